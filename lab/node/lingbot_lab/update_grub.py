"""update-grub: grub-mkconfig -o /boot/grub/grub.cfg, as Debian's wrapper runs it."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from lingbot_lab import LAB_PROFILE_PATH
from lingbot_lab.grubcfg import (
    GRUB_CFG,
    GrubConfigError,
    generate_grub_cfg,
    root_path,
    write_atomically,
)


def lab_root() -> str:
    return os.environ.get("LINGBOT_LAB_ROOT", "")


def read_profile_if_present(root: str) -> dict[str, Any] | None:
    from lingbot_lab.profile import validate_profile  # noqa: PLC0415  (only when needed)

    path = root_path(root, LAB_PROFILE_PATH.lstrip("/"))
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as handle:
        return validate_profile(json.load(handle))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print("Usage: update-grub\nGenerate /boot/grub/grub.cfg from /etc/default/grub.")
        return 0
    root = lab_root()
    try:
        text, versions = generate_grub_cfg(root, read_profile_if_present(root))
    except GrubConfigError as error:
        print(error, file=sys.stderr)
        return 1
    print("Generating grub configuration file ...", file=sys.stderr)
    for version in versions:
        print(f"Found linux image: /boot/vmlinuz-{version}", file=sys.stderr)
        if root_path(root, f"boot/initrd.img-{version}").exists():
            print(f"Found initrd image: /boot/initrd.img-{version}", file=sys.stderr)
    write_atomically(root_path(root, GRUB_CFG), text)
    print("done", file=sys.stderr)
    return 0
