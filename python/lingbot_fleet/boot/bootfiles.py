"""The files that decide a node's kernel command line, and reading them as they are.

Stdlib only: runs on nodes (shipped as ``ansible.module_utils.lingbot_fleet.boot.bootfiles``).
``lingbot_fleet.boot.grub`` parses these files; this module names them and copies their text,
so a read-only caller (the audit) reads a node's boot files in its one module call and
parses them on the controller: ``read_boot_files`` on the node, ``write_boot_files`` into
a scratch root there, and the grub functions run on that root exactly as on the node.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os

from ..node.rooted import on_root as _on_root

PROC_CMDLINE = "/proc/cmdline"
DEFAULT_GRUB_PATH = "/etc/default/grub"
GRUB_D_DIR = "/etc/default/grub.d"
GRUB_CFG_PATHS = ("/boot/grub/grub.cfg", "/boot/grub2/grub.cfg")
BLS_ENTRIES_DIR = "/boot/loader/entries"
BLS_GRUBENV_PATHS = ("/boot/grub2/grubenv", "/boot/grub/grubenv")
# RHEL 9's kernel-install gives its words to every new kernel.
KERNEL_CMDLINE_PATH = "/etc/kernel/cmdline"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
# The newest boot id the run has seen on a host: gpu_facts and kernel_cmdline return it, and
# facts read in another boot are read again (the gpu_facts action).
BOOT_ID_FACT = "lingbot_boot_id"
# The receipts' reading (lingbot_fleet.node.receipts) of everything kernel_cmdline decides from.
BOOT_STATE_READING = "boot_state"
# Beyond the boot files, what the boot state covers: grubby's words for new kernels, what
# tells the boot loader family (bootloader.detect), and the boot itself.
BOOT_STATE_EXTRA_PATHS = (
    KERNEL_CMDLINE_PATH,
    "/etc/os-release",
    "/usr/lib/os-release",
    "/etc/redhat-release",
    BOOT_ID_PATH,
)
# No boot file comes near this; one that does is not a boot file.
MAX_BOOT_FILE_BYTES = 1 << 20


class BootFileError(ValueError):
    """A boot file that cannot be read as text; str() names it."""


def boot_file_paths(root: str = "/") -> list[str]:
    """Every node path the kernel command line is read from: /proc/cmdline, the grub
    defaults files, grub.cfg and the grubenv beside it, the BLS entries and their grubenv."""
    paths = [PROC_CMDLINE, DEFAULT_GRUB_PATH]
    # As their readers list them: the shell's glob for grub.d (no dot files), grub's
    # blscfg every *.conf.
    found = glob.glob(os.path.join(glob.escape(_on_root(root, GRUB_D_DIR)), "*.cfg"))
    paths += sorted(os.path.join(GRUB_D_DIR, os.path.basename(f)) for f in found)
    try:
        names = os.listdir(_on_root(root, BLS_ENTRIES_DIR))
    except (FileNotFoundError, NotADirectoryError):
        names = []
    paths += sorted(f"{BLS_ENTRIES_DIR}/{name}" for name in names if name.endswith(".conf"))
    grubenvs = [path.rsplit("/", 1)[0] + "/grubenv" for path in GRUB_CFG_PATHS]
    paths += list(GRUB_CFG_PATHS)
    paths += [path for path in (*BLS_GRUBENV_PATHS, *grubenvs) if path not in paths]
    return paths


def read_boot_files(root: str = "/", extra_paths: tuple[str, ...] = ()) -> dict[str, str]:
    """{node path: text} of the boot files (and of ``extra_paths``) that read as files
    (through links, as grub and the node follow them); a missing one, or a link to nothing,
    is left out.

    Newlines are kept as they are (CRLF included); undecodable bytes become U+FFFD.
    Raises BootFileError for a file that exists but cannot be read, or is too large.
    """
    files = {}
    for path in (*boot_file_paths(root), *extra_paths):
        real = _on_root(root, path)
        try:
            with open(real, encoding="utf-8", errors="replace", newline="") as handle:
                text = handle.read(MAX_BOOT_FILE_BYTES + 1)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except IsADirectoryError:
            # A grubenv link to a directory is no grubenv (grub skips it); a grub.cfg
            # or defaults file that is a directory is an error the parse reports.
            if path.endswith("/grubenv"):
                continue
            raise BootFileError(f"{real} is a directory, not a file") from None
        except OSError as error:
            raise BootFileError(f"{real} cannot be read ({error.strerror or error})") from error
        if len(text) > MAX_BOOT_FILE_BYTES:
            raise BootFileError(
                f"{real} is larger than {MAX_BOOT_FILE_BYTES} bytes; it is no boot file"
            )
        files[path] = text
    return files


def write_boot_files(files: dict[str, str], root: str) -> None:
    """Lay out what ``read_boot_files`` returned under ``root`` (a scratch directory)."""
    for path, text in files.items():
        if not path.startswith("/") or ".." in path.split("/"):
            raise BootFileError(f"{path!r} is not an absolute node path")
        real = _on_root(root, path)
        os.makedirs(os.path.dirname(real), exist_ok=True)
        with open(real, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)


def read_boot_id(root: str = "/") -> str | None:
    """This boot's id, None when the kernel does not say."""
    try:
        with open(_on_root(root, BOOT_ID_PATH), encoding="ascii", errors="replace") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def boot_state_digest(root: str = "/") -> str:
    """sha256 of the text of the boot files and of BOOT_STATE_EXTRA_PATHS, and of which of
    them exist (``read_boot_files``): equal digests mean the same kernel command line is
    running and configured, in the same boot. Raises BootFileError when a file cannot be
    read."""
    files = read_boot_files(root, BOOT_STATE_EXTRA_PATHS)
    text = json.dumps(files, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
