"""Which boot loader configuration a node boots from, and the command that regenerates it.

Stdlib-only: runs on nodes. ``grub_d`` is the Debian family's GRUB (/etc/default/grub,
/etc/default/grub.d/*.cfg, grub.cfg written by update-grub); ``grubby`` the RedHat
family's BLS entries (/boot/loader/entries/*.conf, edited by grubby). Used by
kernel_cmdline, which writes the configuration, and by the rollback, which restores it.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable

from ..node.rooted import on_root as _on_root
from .bootfiles import BLS_ENTRIES_DIR

FindBin = Callable[[str], "str | None"]
DEBIAN_IDS = frozenset({"debian", "ubuntu"})
REDHAT_IDS = frozenset({"rhel", "centos", "fedora", "rocky", "almalinux", "ol", "amzn"})


class BootloaderError(Exception):
    """The node's boot loader cannot be told; str() says what was looked at."""


def os_release_ids(root: str) -> list[str]:
    """ID then ID_LIKE of /etc/os-release (or /usr/lib/os-release), lower case."""
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(_on_root(root, path), encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue
        values: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip().strip("'\"").lower()
        return values.get("ID", "").split() + values.get("ID_LIKE", "").split()
    return []


def detect(choice: str, root: str, find_bin: FindBin) -> str:
    """grub_d or grubby. BLS entries with grubby installed win; then os-release, then what
    is installed."""
    if choice != "auto":
        return choice
    if glob.glob(os.path.join(_on_root(root, BLS_ENTRIES_DIR), "*.conf")) and find_bin("grubby"):
        return "grubby"
    ids = os_release_ids(root)
    if DEBIAN_IDS.intersection(ids):
        return "grub_d"
    if REDHAT_IDS.intersection(ids) or os.path.exists(_on_root(root, "/etc/redhat-release")):
        return "grubby"
    if find_bin("update-grub"):
        return "grub_d"
    if find_bin("grubby"):
        return "grubby"
    raise BootloaderError(
        "cannot tell how this node boots: /etc/os-release names neither the Debian nor the "
        f"RedHat family (ID and ID_LIKE: {' '.join(ids) or 'none'}), there are no BLS "
        "entries and neither update-grub nor grubby is installed"
    )
