"""Persistence mode of the simulated GPUs and the nvidia-persistenced daemon.

Persistence mode lives in $LINGBOT_LAB_ROOT/run/lingbot-lab/persistence/<gpu index> ("1" or
"0"); a missing file means the GPU's persistence_default from state.json. The daemon keeps
its pid file where the packaged unit expects it, /run/nvidia-persistenced/, under the same
prefix, and holds a lock on it while it runs, as the real daemon does.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import grp
import json
import os
import pwd
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

DAEMON_NAME = "nvidia-persistenced"
STATE_RELATIVE_PATH = "run/lingbot-lab/state.json"
PERSISTENCE_RELATIVE_DIR = "run/lingbot-lab/persistence"
BUSY_RELATIVE_DIR = "run/lingbot-lab/busy"
DAEMON_RUNTIME_RELATIVE_DIR = "run/nvidia-persistenced"
PID_FILE_NAME = "nvidia-persistenced.pid"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StateUnavailableError(Exception):
    """state.json is missing or unreadable: the simulated driver is not loaded."""


def lab_root() -> Path:
    """The prefix of every lab run-time path ($LINGBOT_LAB_ROOT, default /)."""
    return Path(os.environ.get("LINGBOT_LAB_ROOT", "") or "/")


def state_path(root: Path) -> Path:
    return root / STATE_RELATIVE_PATH


def load_state(root: Path) -> dict[str, Any]:
    path = state_path(root)
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError as error:
        raise StateUnavailableError(
            f"{path} does not exist; the lab firmware writes it at boot "
            "(lingbot-lab-firmware.service)"
        ) from error
    except (OSError, ValueError) as error:
        raise StateUnavailableError(f"{path} cannot be read: {error}") from error
    if not isinstance(state, dict) or not isinstance(state.get("gpus"), list):
        raise StateUnavailableError(f"{path} has no 'gpus' list; regenerate it with the firmware")
    return state


def persistence_path(root: Path, gpu_index: int) -> Path:
    return root / PERSISTENCE_RELATIVE_DIR / str(gpu_index)


def read_persistence(root: Path, gpu: dict[str, Any]) -> bool:
    """persistence/<i> if it holds 1 or 0, else the GPU's persistence_default."""
    try:
        text = persistence_path(root, gpu["index"]).read_text().strip()
    except OSError:
        text = ""
    if text in ("0", "1"):
        return text == "1"
    return bool(gpu.get("persistence_default", 0))


def write_persistence(root: Path, gpu_index: int, enabled: bool) -> None:
    """Replace persistence/<i> atomically; if the directory is not writable (a daemon that
    dropped root), overwrite the file's first byte in place."""
    path = persistence_path(root, gpu_index)
    value = "1" if enabled else "0"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=f".{gpu_index}.", dir=path.parent)
    except PermissionError:
        descriptor = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(descriptor, value.encode(), 0)
        finally:
            os.close(descriptor)
        return
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(value + "\n")
        os.chmod(temporary, 0o644)
        if path.exists():
            stat = path.stat()
            with contextlib.suppress(PermissionError):
                os.chown(temporary, stat.st_uid, stat.st_gid)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def gpu_load(root: Path, gpu_index: int, now_s: float) -> float | None:
    """Seconds the GPU's current load has lasted; None when it is idle.

    busy/<i> is "<until> <since> <last>" (epoch seconds, lab/native/labstate.h): under load
    until <until>, copies from <since> to <last>. One number (written by hand) means under
    load until then, for long enough to have ramped up.
    """
    try:
        fields = [float(f) for f in (root / BUSY_RELATIVE_DIR / str(gpu_index)).read_text().split()]
    except (OSError, ValueError):
        return None
    if not fields or fields[0] <= now_s:
        return None
    if len(fields) < 3:
        return float("inf")
    _until_s, since_s, last_s = fields[:3]
    return min(last_s, now_s) - since_s


def gpu_busy(root: Path, gpu_index: int, now_s: float) -> bool:
    """Whether busy/<i> says the GPU is under load at now_s."""
    return gpu_load(root, gpu_index, now_s) is not None


def daemon_runtime_dir(root: Path) -> Path:
    return root / DAEMON_RUNTIME_RELATIVE_DIR


def daemon_pid_file(root: Path) -> Path:
    return daemon_runtime_dir(root) / PID_FILE_NAME


def persistenced_running(root: Path) -> bool:
    """True while a daemon holds the lock on its pid file."""
    try:
        descriptor = os.open(daemon_pid_file(root), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.lockf(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        return error.errno in (errno.EAGAIN, errno.EACCES)
    finally:
        os.close(descriptor)
    return False


def short_bus_id(bdf: str) -> str:
    """The daemon names devices as the kernel does: 0000:41:00.0."""
    return bdf.lower()


# ----------------------------------------------------------------------------- daemon

VERSION_TEXT = (
    "nvidia-persistenced:  version {version}\n\n"
    "  The NVIDIA Persistence Daemon.\n\n"
    "  Copyright (C) 2013-2024 NVIDIA Corporation.\n"
)
USAGE_TEXT = """\
nvidia-persistenced:  version {version}

  The NVIDIA Persistence Daemon.

  A tool for maintaining persistent driver state, specifically for use by the NVIDIA
  Linux driver.

Usage: nvidia-persistenced [options]

  -v, --version
      Print the utility version and exit.

  -h, --help
      Print usage information for the command line options and exit.

  -V, --verbose
      Controls how much information is printed. By default, nvidia-persistenced will only
      print errors and warnings to syslog for unexpected events, as well as startup and
      shutdown notices. Specifying this flag will cause nvidia-persistenced to also print
      information to syslog on state transitions, such as when persistence mode is
      enabled or disabled, and informational messages on startup and exit.

  -u USERNAME, --user=USERNAME
      Runs nvidia-persistenced with the user permissions of the user specified by the
      USERNAME argument.

  -g GROUPNAME, --group=GROUPNAME
      Runs nvidia-persistenced with the group permissions of the group specified by the
      GROUPNAME argument.

  --persistence-mode
      By default, nvidia-persistenced starts with persistence mode enabled for all
      devices. Use '--no-persistence-mode' to force persistence mode off for all devices
      on startup.

  --no-persistence-mode
      Leave persistence mode as it is for every device on startup.
"""
DEFAULT_VERSION = "550.54.15"


class UsageError(Exception):
    """A bad command line; the message is what the daemon prints."""


@dataclass
class DaemonOptions:
    verbose: bool = False
    user: str | None = None
    group: str | None = None
    persistence_mode: bool = True
    show_version: bool = False
    show_help: bool = False


OPTIONS_WITH_VALUE = {"-u": "user", "--user": "user", "-g": "group", "--group": "group"}


def parse_daemon_args(argv: list[str]) -> DaemonOptions:
    options = DaemonOptions()
    arguments = list(argv)
    while arguments:
        argument = arguments.pop(0)
        name, has_inline_value, inline_value = argument.partition("=")
        if name in OPTIONS_WITH_VALUE:
            if has_inline_value:
                value = inline_value
            elif arguments:
                value = arguments.pop(0)
            else:
                raise UsageError(f'Option "{name}" requires an argument.')
            setattr(options, OPTIONS_WITH_VALUE[name], value)
        elif argument in ("-V", "--verbose"):
            options.verbose = True
        elif argument in ("-v", "--version"):
            options.show_version = True
        elif argument in ("-h", "--help"):
            options.show_help = True
        elif argument == "--persistence-mode":
            options.persistence_mode = True
        elif argument == "--no-persistence-mode":
            options.persistence_mode = False
        else:
            raise UsageError(
                f'Unrecognized option: "{argument}"\n\n'
                "ERROR: Invalid commandline, please run `nvidia-persistenced --help` "
                "for usage information."
            )
    return options


class SyslogStyleLog:
    """Messages as syslog shows them. Under journald (JOURNAL_STREAM set) the journal adds
    the "nvidia-persistenced[pid]:" tag itself, so the message goes out bare."""

    def __init__(self, stream: TextIO, verbose: bool) -> None:
        self.stream = stream
        self.verbose = verbose
        self.tagged = "JOURNAL_STREAM" not in os.environ

    def notice(self, message: str) -> None:
        prefix = f"{DAEMON_NAME}[{os.getpid()}]: " if self.tagged else ""
        self.stream.write(f"{prefix}{message}\n")
        self.stream.flush()

    def info(self, message: str) -> None:
        if self.verbose:
            self.notice(message)


@dataclass
class Identity:
    uid: int
    gid: int
    note: str | None = None
    switch: bool = False


def resolve_identity(user: str | None, group: str | None) -> Identity:
    """The user and group to run as. A user or group that does not exist, or a switch that
    needs root, leaves the daemon running as it is, with a note for the log."""
    current = Identity(uid=os.geteuid(), gid=os.getegid())
    if user is None and group is None:
        return current
    uid, gid = current.uid, current.gid
    if user is not None:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            current.note = (
                f"User '{user}' does not exist; continuing with user ID {uid} and group ID {gid}"
            )
            return current
        uid, gid = entry.pw_uid, entry.pw_gid
    if group is not None:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            current.note = (
                f"Group '{group}' does not exist; continuing with user ID {current.uid} "
                f"and group ID {current.gid}"
            )
            return current
    if (uid, gid) == (current.uid, current.gid):
        return current
    if current.uid != 0:
        current.note = (
            f"Cannot switch to user ID {uid} and group ID {gid} without root; continuing "
            f"with user ID {current.uid} and group ID {current.gid}"
        )
        return current
    return Identity(uid=uid, gid=gid, switch=True)


@dataclass
class Daemon:
    root: Path
    options: DaemonOptions
    log: SyslogStyleLog
    enabled_gpus: list[dict[str, Any]] = field(default_factory=list)
    pid_descriptor: int | None = None

    def lock_pid_file(self) -> bool:
        runtime_dir = daemon_runtime_dir(self.root)
        runtime_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(daemon_pid_file(self.root), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(descriptor)
            self.log.notice(f"Failed to lock PID file: {os.strerror(error.errno)}")
            return False
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        self.pid_descriptor = descriptor
        return True

    def enable_persistence(self, state: dict[str, Any]) -> None:
        for gpu in state["gpus"]:
            bus_id = short_bus_id(gpu["bdf"])
            if gpu.get("lost"):
                self.log.notice(f"device {bus_id} - failed to open.")
                continue
            self.log.info(f"device {bus_id} - registered")
            if not self.options.persistence_mode or read_persistence(self.root, gpu):
                continue
            write_persistence(self.root, gpu["index"], True)
            self.enabled_gpus.append(gpu)
            self.log.info(f"device {bus_id} - persistence mode enabled.")

    def drop_privileges(self) -> None:
        identity = resolve_identity(self.options.user, self.options.group)
        if identity.note:
            self.log.notice(identity.note)
        if not identity.switch:
            return
        owned = [daemon_runtime_dir(self.root), daemon_pid_file(self.root)]
        owned += [persistence_path(self.root, gpu["index"]) for gpu in self.enabled_gpus]
        for path in owned:
            os.chown(path, identity.uid, identity.gid)
        os.setgroups([])
        os.setgid(identity.gid)
        os.setuid(identity.uid)
        self.log.notice(f"Now running with user ID {identity.uid} and group ID {identity.gid}")

    def restore_persistence(self) -> None:
        for gpu in self.enabled_gpus:
            bus_id = short_bus_id(gpu["bdf"])
            try:
                write_persistence(self.root, gpu["index"], False)
            except OSError as error:
                self.log.notice(f"device {bus_id} - failed to disable persistence mode: {error}")
                continue
            self.log.info(f"device {bus_id} - persistence mode disabled.")
            self.log.info(f"device {bus_id} - unregistered")

    def release_runtime_dir(self) -> None:
        pid_file = daemon_pid_file(self.root)
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()
        if self.pid_descriptor is not None:
            os.close(self.pid_descriptor)
            self.pid_descriptor = None
        self.log.info("PID file unlocked.")
        self.log.info("PID file closed.")
        try:
            daemon_runtime_dir(self.root).rmdir()
        except OSError:
            self.log.notice(
                "The daemon no longer has permission to remove its runtime data directory "
                f"{daemon_runtime_dir(self.root)}"
            )


def wait_for_stop_signal() -> int:
    return signal.sigwait(set(STOP_SIGNALS))


def run_daemon(root: Path, options: DaemonOptions, log: SyslogStyleLog, ready_fd: int) -> int:
    """The daemon's life: lock, enable, drop privileges, report ready, wait, restore."""
    signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    log.info("Verbose syslog connection opened")
    daemon = Daemon(root=root, options=options, log=log)
    try:
        state = load_state(root)
    except StateUnavailableError as error:
        log.notice(f"Failed to initialize the NVIDIA driver state: {error}")
        log.notice(f"Shutdown ({os.getpid()})")
        return 1
    if not daemon.lock_pid_file():
        log.notice(f"Shutdown ({os.getpid()})")
        return 1
    daemon.enable_persistence(state)
    daemon.drop_privileges()
    log.notice(f"Started ({os.getpid()})")
    log.info("Local RPC services initialized")
    os.write(ready_fd, b"1")
    os.close(ready_fd)
    received = wait_for_stop_signal()
    log.notice(f"Received signal {received}")
    daemon.restore_persistence()
    log.info("Socket closed.")
    daemon.release_runtime_dir()
    log.notice(f"Shutdown ({os.getpid()})")
    return 0


def daemonize(root: Path, options: DaemonOptions) -> int:
    """Fork; the parent returns once the child has its pid file written (Type=forking)."""
    read_fd, write_fd = os.pipe()
    child_pid = os.fork()
    if child_pid > 0:
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as ready:
            started = ready.read(1) == b"1"
        if not started:
            sys.stderr.write(
                "nvidia-persistenced failed to initialize. Check syslog for more details.\n"
            )
            return 1
        return 0
    os.close(read_fd)
    os.setsid()
    os.chdir("/")
    with open(os.devnull, "rb") as devnull:
        os.dup2(devnull.fileno(), 0)
    log = SyslogStyleLog(sys.stderr, options.verbose)
    try:
        code = run_daemon(root, options, log, write_fd)
    except Exception as error:  # the daemon reports any failure in its log, then exits
        log.notice(f"Unexpected error: {error!r}")
        code = 1
    os._exit(code)


def driver_version(root: Path) -> str:
    try:
        return load_state(root)["driver"]["version"]
    except (StateUnavailableError, KeyError, TypeError):
        return DEFAULT_VERSION


def main(argv: list[str] | None = None) -> int:
    root = lab_root()
    try:
        options = parse_daemon_args(sys.argv[1:] if argv is None else argv)
    except UsageError as error:
        sys.stderr.write(f"{error}\n")
        return 1
    if options.show_help:
        sys.stdout.write(USAGE_TEXT.format(version=driver_version(root)))
        return 0
    if options.show_version:
        sys.stdout.write(VERSION_TEXT.format(version=driver_version(root)))
        return 0
    return daemonize(root, options)


def wait_for_pid_file_removal(root: Path, timeout_s: float) -> bool:
    """For callers that stop the daemon: True once its pid file is gone."""
    deadline_s = time.monotonic() + timeout_s
    while time.monotonic() < deadline_s:
        if not daemon_pid_file(root).exists():
            return True
        time.sleep(0.02)
    return False
