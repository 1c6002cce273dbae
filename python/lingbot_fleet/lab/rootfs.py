"""The lab's cached Debian 12 root file system, built once with debootstrap."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

SUITE = "bookworm"
MIRROR = os.environ.get("LINGBOT_LAB_MIRROR", "http://deb.debian.org/debian")
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-venv",
    "openssh-server",
    "numactl",
    "pciutils",
    "grub2-common",
    "iproute2",
    "procps",
    "sudo",
    "ca-certificates",
    "curl",
)
# Commands run in the new root once, after debootstrap. The lab replaces update-grub
# and numactl with its own (see lab/node/bin), so the real ones are diverted aside.
SETUP_COMMANDS = (
    ("dpkg-divert", "--local", "--rename", "--add", "/usr/sbin/update-grub"),
    ("dpkg-divert", "--local", "--rename", "--add", "/usr/bin/numactl"),
    ("systemctl", "enable", "ssh.service"),
    (
        "systemctl",
        "mask",
        "systemd-timesyncd.service",
        "apt-daily.timer",
        "apt-daily-upgrade.timer",
    ),
)
SETUP_VERSION = 1

DEFAULT_CACHE_DIR = Path(os.environ.get("LINGBOT_LAB_CACHE", "/var/cache/lingbot-fleet"))


class RootfsError(RuntimeError):
    """The cached root file system could not be built."""


def cache_key() -> str:
    text = "\n".join([SUITE, MIRROR, *PACKAGES, repr(SETUP_COMMANDS), str(SETUP_VERSION)])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def rootfs_path(cache_dir: Path = DEFAULT_CACHE_DIR) -> Path:
    return cache_dir / f"rootfs-{SUITE}-{cache_key()}"


def ensure_rootfs(cache_dir: Path = DEFAULT_CACHE_DIR, log=print) -> Path:
    """Return the cached rootfs, building it first when it is missing.

    The build goes to a temporary directory and is renamed into place when complete,
    so an interrupted build never leaves a half rootfs behind; a lock file keeps two
    builds from racing.
    """
    target = rootfs_path(cache_dir)
    if (target / ".lingbot-lab-complete").exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    for tool in ("debootstrap", "systemd-nspawn"):
        if shutil.which(tool) is None:
            raise RootfsError(
                f"{tool} is not installed: install the Debian packages debootstrap and "
                "systemd-container (make setup does)"
            )
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".lingbot-lab-complete").exists():
            return target
        building = target.with_name(target.name + ".building")
        if building.exists():
            shutil.rmtree(building)
        log(f"building the lab rootfs with debootstrap into {target} (about a minute, once)")
        command = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            SUITE,
            str(building),
            MIRROR,
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RootfsError(
                f"debootstrap failed (exit {result.returncode}); last lines:\n"
                + "\n".join(result.stdout.splitlines()[-15:] + result.stderr.splitlines()[-15:])
            )
        for argv in SETUP_COMMANDS:
            result = subprocess.run(
                ["chroot", str(building), *argv], capture_output=True, text=True, check=False
            )
            if result.returncode != 0:
                raise RootfsError(f"rootfs setup step {' '.join(argv)} failed: {result.stderr}")
        for key in (building / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        (building / "etc/machine-id").write_text("")
        (building / ".lingbot-lab-complete").write_text(cache_key() + "\n")
        building.rename(target)
    return target
