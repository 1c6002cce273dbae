"""Boot, list and stop the lab: simulated GPU servers as systemd-nspawn containers.

Each node is a real Debian 12 system (systemd, sshd on 127.0.0.1:<port>) on an overlay of
one cached rootfs. The node's hardware comes from a profile under lab/profiles; the
node-side lab code (lab/node, lab/native, lab/lingbot_standin) renders it as sysfs,
NVML, libcuda and nvidia-smi at every boot.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from . import layout
from .rootfs import ensure_rootfs

Log = Callable[[str], None]
STATE_FILE = "lab.json"
LINGBOT_FIRST_PORT = 18000
LINGBOT_PORTS_PER_NODE = 10
# Inside each node: which lab home started it, so orphans of a crash can be found.
LAB_HOME_MARKER = "opt/lingbot-lab/lab-home"
SSH_WAIT_S = 90.0


class LabError(RuntimeError):
    """The lab could not do what was asked; the message says what to do."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    profile: str
    port: int
    machine: str

    def directory(self, lab_home: Path) -> Path:
        return lab_home / "nodes" / self.name


def available_profiles() -> list[str]:
    return sorted(path.stem for path in layout.PROFILES_DIR.glob("*.yml"))


def load_profile(name: str) -> dict:
    path = layout.PROFILES_DIR / f"{name}.yml"
    if not path.is_file():
        raise LabError(
            f"unknown lab profile {name!r}: choose from {', '.join(available_profiles())}"
        )
    profile = yaml.safe_load(path.read_text())
    return _lab_profile_module().validate_profile(profile)


def _lab_profile_module() -> Any:
    """lab/node/lingbot_lab/profile.py, the lab-side profile model (stdlib only)."""
    sys.path.insert(0, str(layout.LAB_SOURCE / "node"))
    try:
        from lingbot_lab import profile  # noqa: PLC0415 - lab-side package
    finally:
        sys.path.pop(0)
    return profile


def plan_nodes(profiles: list[str]) -> list[NodeSpec]:
    if not profiles:
        raise LabError("no profiles given: pass --profiles a,b,... (see lab/profiles)")
    specs = []
    for number, profile in enumerate(profiles, start=1):
        load_profile(profile)
        specs.append(
            NodeSpec(
                name=f"lab{number:02d}-{profile}"[:63],
                profile=profile,
                port=layout.FIRST_SSH_PORT + number - 1,
                machine=f"lbf{number:02d}",
            )
        )
    return specs


# ---------------------------------------------------------------- mounts and processes


def _mounts_under(prefix: Path) -> list[str]:
    """Mount points at or below prefix, deepest first."""
    points = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            point = line.split()[4].replace("\\040", " ")
            if point == str(prefix) or point.startswith(f"{prefix}/"):
                points.append(point)
    return sorted(set(points), key=len, reverse=True)


def _unmount_all(prefix: Path) -> None:
    for point in _mounts_under(prefix):
        subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)


def _pid_alive(pid: int, must_contain: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return must_contain in cmdline


def _orphan_container_inits(lab_home: Path) -> list[int]:
    """Init processes of containers this lab started whose nspawn parent is gone.

    A container's init outlives a killed systemd-nspawn (it is reparented), and once its
    overlay was lazily unmounted /proc/<pid>/root no longer names it; the marker file
    the lab puts in every node still tells which lab it belongs to.
    """
    own_namespace = os.readlink("/proc/self/ns/pid")
    inits = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "ns/pid") == own_namespace:
                continue
            nspids = next(
                line.split()[1:]
                for line in (entry / "status").read_text().splitlines()
                if line.startswith("NSpid:")
            )
            marker = (entry / "root" / LAB_HOME_MARKER).read_text().strip()
        except (OSError, StopIteration):
            continue
        if nspids[-1] == "1" and marker == str(lab_home):
            inits.append(int(entry.name))
    return inits


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# ---------------------------------------------------------------- building a node


def _build_native(log: Log) -> None:
    if not (layout.NATIVE_DIR / "Makefile").exists():
        raise LabError(
            "lab/native/Makefile is missing: the simulated driver libraries cannot be built"
        )
    result = subprocess.run(
        ["make", "-s", "-C", str(layout.NATIVE_DIR)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise LabError(f"building the simulated driver libraries failed:\n{result.stderr}")
    log("simulated driver libraries built (lab/native/build)")


def _ssh_key(lab_home: Path) -> Path:
    key = lab_home / "ssh" / "id_ed25519"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lingbot-lab", "-f", str(key)],
            check=True,
        )
    return key


def _copy_file(source: Path, destination: Path, mode: int) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, destination)
    destination.chmod(mode)


def _copy_tree(source: Path, destination: Path) -> None:
    shutil.copytree(
        source,
        destination,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "tests"),
    )


def _install_lab_files(
    spec: NodeSpec, profile: dict, root: Path, public_key: str, lab_home: Path
) -> None:
    """Copy the node-side lab into the node's overlay and give it its identity."""
    for source, destination, mode in layout.NODE_FILES:
        _copy_file(layout.LAB_SOURCE / source, root / destination, mode)
    for source, destination in layout.NODE_TREES:
        _copy_tree(layout.LAB_SOURCE / source, root / destination)
    (root / "opt/lingbot-lab/profile.json").write_text(json.dumps(profile, indent=1) + "\n")
    (root / LAB_HOME_MARKER).write_text(f"{lab_home}\n")
    wants = root / "etc/systemd/system/sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / "lingbot-lab-firmware.service"
    if not link.is_symlink():
        link.symlink_to("/etc/systemd/system/lingbot-lab-firmware.service")
    _install_fabric_manager(profile, root)

    unit = (layout.LAB_SOURCE / "node/systemd/nvidia-persistenced.service").read_text()
    unit = unit.replace("@PERSISTENCED_ARGS@", profile.get("persistenced", {}).get("args", ""))
    unit = re.sub(r"[ \t]+\n", "\n", unit)
    (root / "lib/systemd/system/nvidia-persistenced.service").write_text(unit)
    sysusers = root / "usr/lib/sysusers.d/nvidia-persistenced.conf"
    sysusers.parent.mkdir(parents=True, exist_ok=True)
    sysusers.write_text('u nvidia-persistenced - "NVIDIA Persistence Daemon" /nonexistent\n')

    libdir = root / layout.LIB_DIR_IN_NODE
    version = profile["driver"]["version"]
    for library in ("libnvidia-ml", "libcuda"):
        real = libdir / f"{library}.so.{version}"
        _copy_file(layout.NATIVE_BUILD_DIR / f"{library}.so.1", real, 0o755)
        for alias in (f"{library}.so.1", f"{library}.so"):
            (libdir / alias).unlink(missing_ok=True)
            (libdir / alias).symlink_to(real.name)
    subprocess.run(["ldconfig", "-r", str(root)], check=True)

    # The firmware unit writes /etc/default/grub and grub.cfg from the profile at the
    # node's first boot (lab/node/lingbot_lab/firmware.py).
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(public_key)
    (ssh_dir / "authorized_keys").chmod(0o600)
    (root / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/ssh/sshd_config.d/lingbot-lab.conf").write_text(
        f"Port {spec.port}\nListenAddress 127.0.0.1\nPermitRootLogin prohibit-password\n"
        "UseDNS no\nMaxStartups 200\nMaxSessions 200\n"
    )
    subprocess.run(["ssh-keygen", "-A", "-f", str(root)], check=True, capture_output=True)
    (root / "etc/hostname").write_text(spec.name + "\n")
    (root / "etc/hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {spec.name}\n")
    (root / "etc/machine-id").write_text(os.urandom(16).hex() + "\n")
    if profile.get("os_family") == "RedHat":
        _present_as_rocky(root)
    elif profile["boot"]["distribution"] == "ubuntu":
        _present_as_ubuntu(root)


def _install_fabric_manager(profile: dict, root: Path) -> None:
    """The fabric manager and its unit, enabled, in an NVSwitch profile's node; none in
    another's."""
    wants = root / layout.FABRIC_MANAGER_WANTS
    if not _lab_profile_module().has_nvswitch(profile):
        for _, destination, _ in layout.NVSWITCH_NODE_FILES:
            (root / destination).unlink(missing_ok=True)
        wants.unlink(missing_ok=True)
        return
    for source, destination, mode in layout.NVSWITCH_NODE_FILES:
        _copy_file(layout.LAB_SOURCE / source, root / destination, mode)
    wants.parent.mkdir(parents=True, exist_ok=True)
    if not wants.is_symlink():
        wants.symlink_to("/lib/systemd/system/nvidia-fabricmanager.service")


# A RedHat-family profile boots the same Debian rootfs but presents itself as Rocky Linux
# 9, so Ansible takes its RedHat paths (grubby and BLS entries, which the lab simulates).
ROCKY_OS_RELEASE = """NAME="Rocky Linux"
VERSION="9.3 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.3"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.3 (Blue Onyx)"
"""


def _present_as_rocky(root: Path) -> None:
    os_release = root / "etc/os-release"
    os_release.unlink(missing_ok=True)
    os_release.write_text(ROCKY_OS_RELEASE)
    for name in ("redhat-release", "rocky-release", "system-release"):
        (root / "etc" / name).write_text("Rocky Linux release 9.3 (Blue Onyx)\n")
    (root / "etc/debian_version").unlink(missing_ok=True)


# An Ubuntu-style profile boots the same Debian rootfs but says it is Ubuntu 24.04, as its
# /etc/default/grub (GRUB_DISTRIBUTOR reads NAME) and Ansible's facts expect.
UBUNTU_OS_RELEASE = """PRETTY_NAME="Ubuntu 24.04 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=noble
"""
UBUNTU_LSB_RELEASE = """DISTRIB_ID=Ubuntu
DISTRIB_RELEASE=24.04
DISTRIB_CODENAME=noble
DISTRIB_DESCRIPTION="Ubuntu 24.04 LTS"
"""


def _present_as_ubuntu(root: Path) -> None:
    os_release = root / "etc/os-release"
    os_release.unlink(missing_ok=True)
    os_release.write_text(UBUNTU_OS_RELEASE)
    (root / "etc/lsb-release").write_text(UBUNTU_LSB_RELEASE)


# ---------------------------------------------------------------- the lab


class Lab:
    def __init__(self, lab_home: Path = layout.LAB_HOME, log: Log = print) -> None:
        self.home = lab_home
        self.log = log

    # state ---------------------------------------------------------------
    def _state_path(self) -> Path:
        return self.home / STATE_FILE

    def nodes(self) -> list[NodeSpec]:
        try:
            data = json.loads(self._state_path().read_text())
        except FileNotFoundError:
            return []
        return [NodeSpec(**node) for node in data["nodes"]]

    def _save(self, specs: list[NodeSpec]) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self._state_path().with_suffix(".tmp")
        tmp.write_text(json.dumps({"nodes": [asdict(spec) for spec in specs]}, indent=1))
        tmp.replace(self._state_path())

    def supervisor_pid(self, spec: NodeSpec) -> int | None:
        try:
            pid = int((spec.directory(self.home) / "supervisor.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if _pid_alive(pid, "lingbot_fleet.lab.supervisor") else None

    # up ------------------------------------------------------------------
    def up(self, profiles: list[str]) -> list[NodeSpec]:
        specs = plan_nodes(profiles)
        running = all(self.supervisor_pid(spec) and self.ssh_ok(spec) for spec in specs)
        if specs == self.nodes() and running:
            self.log(f"lab already up with {len(specs)} node(s)")
            self.write_inventory(specs)
            return specs
        self.down(quiet=True)
        for spec in specs:
            if not _port_free(spec.port):
                raise LabError(
                    f"port 127.0.0.1:{spec.port} for node {spec.name} is taken by another "
                    "process: stop it, or set LINGBOT_LAB_HOME to the lab that owns it and "
                    "run lab down"
                )
        rootfs = ensure_rootfs(log=self.log)
        _build_native(self.log)
        key = _ssh_key(self.home)
        public_key = key.with_suffix(".pub").read_text()
        self._save(specs)
        started = time.monotonic()
        for spec in specs:
            self._start_node(spec, rootfs, public_key)
        for spec in specs:
            self._wait_ssh(spec, key)
        self.write_inventory(specs)
        self.log(
            f"lab up: {len(specs)} node(s) answering SSH after "
            f"{time.monotonic() - started:.1f} s; inventory {layout.LAB_INVENTORY}"
        )
        return specs

    def _start_node(self, spec: NodeSpec, rootfs: Path, public_key: str) -> None:
        directory = spec.directory(self.home)
        for sub in ("upper", "work", "merged"):
            (directory / sub).mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "mount",
                "-t",
                "overlay",
                "overlay",
                "-o",
                f"lowerdir={rootfs},upperdir={directory / 'upper'},workdir={directory / 'work'}",
                str(directory / "merged"),
            ],
            check=True,
        )
        profile = load_profile(spec.profile)
        _install_lab_files(spec, profile, directory / "merged", public_key, self.home)
        (directory / "node.json").write_text(json.dumps(asdict(spec)))
        with open(directory / "supervisor.log", "ab") as supervisor_log:
            process = subprocess.Popen(
                [sys.executable, "-m", "lingbot_fleet.lab.supervisor", str(directory)],
                stdin=subprocess.DEVNULL,
                stdout=supervisor_log,
                stderr=supervisor_log,
                start_new_session=True,
                cwd="/",
                env={**os.environ, "PYTHONPATH": str(layout.REPO_ROOT / "python")},
            )
        (directory / "supervisor.pid").write_text(f"{process.pid}\n")

    def _supervisor_starting(self, spec: NodeSpec) -> bool:
        """The supervisor was just forked and has not exec'd Python yet (its cmdline is
        still the parent's)."""
        try:
            pid = int((spec.directory(self.home) / "supervisor.pid").read_text())
            status = Path(f"/proc/{pid}/status").read_text()
        except (OSError, ValueError):
            return False
        return "State:\tZ" not in status

    def ssh_argv(self, spec: NodeSpec, *command: str) -> list[str]:
        return [
            "ssh",
            "-q",
            "-i",
            str(self.home / "ssh" / "id_ed25519"),
            "-p",
            str(spec.port),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=3",
            "root@127.0.0.1",
            *command,
        ]

    def ssh_ok(self, spec: NodeSpec) -> bool:
        result = subprocess.run(
            self.ssh_argv(spec, "true"), capture_output=True, check=False, timeout=15
        )
        return result.returncode == 0

    def _wait_ssh(self, spec: NodeSpec, _key: Path) -> None:
        deadline = time.monotonic() + SSH_WAIT_S
        while time.monotonic() < deadline:
            if self.supervisor_pid(spec) is None and not self._supervisor_starting(spec):
                raise LabError(
                    f"node {spec.name} stopped while booting; see "
                    f"{spec.directory(self.home) / 'console.log'}"
                )
            if self.ssh_ok(spec):
                return
            time.sleep(0.3)
        raise LabError(
            f"node {spec.name} did not answer SSH on 127.0.0.1:{spec.port} within "
            f"{SSH_WAIT_S:.0f} s; see {spec.directory(self.home) / 'console.log'}"
        )

    def write_inventory(self, specs: list[NodeSpec]) -> Path:
        hosts = {
            spec.name: {
                "ansible_host": "127.0.0.1",
                "ansible_port": spec.port,
                "lingbot_lab_profile": spec.profile,
                # Lab nodes share the host's network: give each its own LingBot ports.
                "lingbot_service_base_port": LINGBOT_FIRST_PORT
                + LINGBOT_PORTS_PER_NODE * (spec.port - layout.FIRST_SSH_PORT),
            }
            for spec in specs
        }
        inventory = {
            "all": {
                "children": {
                    layout.GROUP_NAME: {
                        "hosts": hosts,
                        "vars": {
                            "ansible_user": "root",
                            "ansible_ssh_private_key_file": str(self.home / "ssh" / "id_ed25519"),
                            "ansible_ssh_common_args": (
                                "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
                            ),
                            "ansible_python_interpreter": "/usr/bin/python3",
                        },
                    }
                }
            }
        }
        layout.LAB_INVENTORY.parent.mkdir(parents=True, exist_ok=True)
        text = "# Generated by `lingbot-fleet lab up`; do not edit.\n---\n" + yaml.safe_dump(
            inventory, sort_keys=False
        )
        layout.LAB_INVENTORY.write_text(text)
        return layout.LAB_INVENTORY

    # down ----------------------------------------------------------------
    def down(self, quiet: bool = False) -> None:
        specs = self.nodes()
        for spec in specs:
            pid = self.supervisor_pid(spec)
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
        for spec in specs:
            self._wait_stopped(spec)
        orphans = _orphan_container_inits(self.home)
        for pid in orphans:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while orphans and time.monotonic() < deadline and _orphan_container_inits(self.home):
            time.sleep(0.1)
        nodes_dir = self.home / "nodes"
        _unmount_all(nodes_dir)
        for spec in specs:
            _unmount_all(Path("/run/systemd/nspawn/propagate") / spec.machine)
        if _mounts_under(nodes_dir):
            raise LabError(f"could not unmount {', '.join(_mounts_under(nodes_dir))}")
        if nodes_dir.exists():
            shutil.rmtree(nodes_dir)
        self._state_path().unlink(missing_ok=True)
        layout.LAB_INVENTORY.unlink(missing_ok=True)
        if specs and not quiet:
            self.log(f"lab down: {len(specs)} node(s) stopped, mounts removed")
        elif not quiet:
            self.log("lab down: nothing was running")

    def _wait_stopped(self, spec: NodeSpec, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.supervisor_pid(spec) is None and not self._nspawn_pids(spec):
                return
            time.sleep(0.2)
        for pid in [self.supervisor_pid(spec), *self._nspawn_pids(spec)]:
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)

    def _nspawn_pids(self, spec: NodeSpec) -> list[int]:
        """systemd-nspawn processes of the node, and every process living inside it.

        After a crash the container's init survives its nspawn parent, so the processes
        whose root directory is the node's overlay are found through /proc/<pid>/root.
        """
        marker = f"--machine={spec.machine} --directory={spec.directory(self.home) / 'merged'}"
        merged = str(spec.directory(self.home) / "merged")
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                root = os.readlink(entry / "root")
            except OSError:
                root = ""
            if root == merged or _pid_alive(pid, marker):
                pids.append(pid)
        return pids

    # status --------------------------------------------------------------
    def status(self) -> list[dict]:
        rows = []
        for spec in self.nodes():
            directory = spec.directory(self.home)
            try:
                boots = int((directory / "boots").read_text())
            except (OSError, ValueError):
                boots = 0
            running = self.supervisor_pid(spec) is not None
            rows.append(
                {
                    **asdict(spec),
                    "running": running,
                    "ssh": running and self.ssh_ok(spec),
                    "boots": boots,
                }
            )
        return rows
