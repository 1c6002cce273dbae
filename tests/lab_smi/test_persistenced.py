"""lab/node/bin/nvidia-persistenced as a forking daemon, and its systemd unit."""

from __future__ import annotations

import io
import os
import pwd
import re
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_smi_support import LAB_NODE_DIR, REPO_ROOT, make_state, write_state

from lingbot_lab import persistence

DAEMON = LAB_NODE_DIR / "bin" / "nvidia-persistenced"
UNIT = REPO_ROOT / "lab" / "node" / "systemd" / "nvidia-persistenced.service"


def start_daemon(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "LINGBOT_LAB_ROOT": str(root),
        "LINGBOT_LAB_LIB": str(LAB_NODE_DIR),
    }
    environment.pop("JOURNAL_STREAM", None)
    with open(root / "daemon.log", "a") as log:
        return subprocess.run(
            [str(DAEMON), *argv],
            env=environment,
            stdout=log,
            stderr=log,
            text=True,
            timeout=30,
            check=False,
        )


def daemon_pid(root: Path) -> int:
    return int(persistence.daemon_pid_file(root).read_text())


def stop_daemon(root: Path) -> None:
    os.kill(daemon_pid(root), signal.SIGTERM)
    assert persistence.wait_for_pid_file_removal(root, timeout_s=10), "daemon did not stop"
    time.sleep(0.05)


def persistence_values(root: Path) -> list[str | None]:
    directory = root / "run/lingbot-lab/persistence"
    return [
        (directory / str(index)).read_text() if (directory / str(index)).exists() else None
        for index in range(4)
    ]


@pytest.fixture
def running_daemons(lab_root: Path) -> Iterator[Path]:
    yield lab_root
    if persistence.daemon_pid_file(lab_root).exists():
        os.kill(daemon_pid(lab_root), signal.SIGTERM)
        persistence.wait_for_pid_file_removal(lab_root, timeout_s=10)


def test_daemon_enables_and_restores_persistence(running_daemons: Path) -> None:
    root = running_daemons
    persistence.write_persistence(root, 1, True)
    result = start_daemon(root, "--user", "no-such-user-lingbot", "--verbose")
    assert result.returncode == 0
    pid = daemon_pid(root)
    assert persistence.persistenced_running(root)
    assert persistence_values(root) == ["1\n", "1\n", None, "1\n"]
    log = (root / "daemon.log").read_text()
    assert f"nvidia-persistenced[{pid}]: Started ({pid})\n" in log
    assert "User 'no-such-user-lingbot' does not exist; continuing with user ID" in log
    assert "device 0000:41:00.0 - persistence mode enabled.\n" in log

    stop_daemon(root)
    assert not persistence.persistenced_running(root)
    assert persistence_values(root) == ["0\n", "1\n", None, "0\n"]
    log = (root / "daemon.log").read_text()
    assert f"Received signal {signal.SIGTERM.value}\n" in log
    assert "device 0000:c2:00.0 - persistence mode disabled.\n" in log
    assert log.endswith(f"nvidia-persistenced[{pid}]: Shutdown ({pid})\n")
    assert not persistence.daemon_runtime_dir(root).exists()


def test_no_persistence_mode_leaves_gpus_alone(running_daemons: Path) -> None:
    root = running_daemons
    assert start_daemon(root, "--no-persistence-mode").returncode == 0
    assert persistence_values(root) == [None, None, None, None]
    stop_daemon(root)
    assert persistence_values(root) == [None, None, None, None]
    log = (root / "daemon.log").read_text()
    assert "registered" not in log, "info messages need --verbose"


def test_second_daemon_is_refused(running_daemons: Path) -> None:
    root = running_daemons
    assert start_daemon(root).returncode == 0
    first_pid = daemon_pid(root)
    assert start_daemon(root).returncode == 1
    assert daemon_pid(root) == first_pid
    assert (
        "Failed to lock PID file: Resource temporarily unavailable"
        in (root / "daemon.log").read_text()
    )


def test_missing_state_fails_start(tmp_path: Path) -> None:
    result = start_daemon(tmp_path)
    assert result.returncode == 1
    log = (tmp_path / "daemon.log").read_text()
    assert "nvidia-persistenced failed to initialize. Check syslog for more details." in log
    assert "state.json does not exist" in log


def test_version_and_bad_option(lab_root: Path) -> None:
    environment = {
        **os.environ,
        "LINGBOT_LAB_ROOT": str(lab_root),
        "LINGBOT_LAB_LIB": str(LAB_NODE_DIR),
    }
    version = subprocess.run(
        [str(DAEMON), "-v"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (version.returncode, version.stdout.splitlines()[0]) == (
        0,
        "nvidia-persistenced:  version 550.54.15",
    )
    bad = subprocess.run(
        [str(DAEMON), "--frobnicate"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert bad.returncode == 1
    assert bad.stderr.startswith('Unrecognized option: "--frobnicate"')


def test_parse_daemon_args() -> None:
    options = persistence.parse_daemon_args(
        ["--user=nvidia-persistenced", "-g", "video", "-V", "--no-persistence-mode"]
    )
    assert options == persistence.DaemonOptions(
        verbose=True, user="nvidia-persistenced", group="video", persistence_mode=False
    )
    with pytest.raises(
        persistence.UsageError, match=re.escape('Option "--user" requires an argument.')
    ):
        persistence.parse_daemon_args(["--user"])


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_daemon_drops_to_its_user_and_still_restores() -> None:
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user on this host")
    root = Path(tempfile.mkdtemp(prefix="lingbot-persistenced-"))
    root.chmod(0o755)
    state: dict[str, Any] = make_state()
    write_state(root, state)
    try:
        assert start_daemon(root, "--user", "nobody").returncode == 0
        status = Path(f"/proc/{daemon_pid(root)}/status").read_text()
        assert f"Uid:\t{nobody.pw_uid}\t" in status
        assert persistence_values(root) == ["1\n", "1\n", None, "1\n"]
        stop_daemon(root)
        assert persistence_values(root) == ["0\n", "0\n", None, "0\n"]
        log = (root / "daemon.log").read_text()
        assert f"Now running with user ID {nobody.pw_uid} and group ID {nobody.pw_gid}" in log
        assert "no longer has permission to remove its runtime data directory" in log
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=True)


def test_unit_is_the_packaged_shape() -> None:
    lines = UNIT.read_text().splitlines()
    assert "Type=forking" in lines
    assert "PIDFile=/run/nvidia-persistenced/nvidia-persistenced.pid" in lines
    assert "ExecStopPost=/bin/rm -rf /run/nvidia-persistenced" in lines
    exec_start = [line for line in lines if line.startswith("ExecStart=")]
    assert exec_start == [
        "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose "
        "@PERSISTENCED_ARGS@"
    ]
    assert persistence.DAEMON_RUNTIME_RELATIVE_DIR + "/" + persistence.PID_FILE_NAME == (
        "run/nvidia-persistenced/nvidia-persistenced.pid"
    )


def test_scripts_are_executable() -> None:
    for script in (DAEMON, LAB_NODE_DIR / "bin" / "nvidia-smi"):
        assert script.stat().st_mode & stat.S_IXUSR
        assert script.read_text().startswith("#!/usr/bin/python3\n")


def test_nvidia_smi_sees_the_running_daemon(running_daemons: Path) -> None:
    from test_smi_cli import run_smi

    root = running_daemons
    assert start_daemon(root, "--no-persistence-mode").returncode == 0
    result = run_smi(root, "-pm", "1", "-i", "2,3")
    if os.geteuid() != 0:
        assert result.returncode == 4
        return
    assert (result.returncode, result.stdout) == (
        0,
        "Persistence mode is already Enabled for GPU 00000000:C1:00.0.\n"
        "Enabled persistence mode for GPU 00000000:C2:00.0.\n"
        "All done.\n",
    )


def test_log_lines_are_bare_under_journald(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_STREAM", "8:12345")
    journal = io.StringIO()
    persistence.SyslogStyleLog(journal, verbose=False).notice("Started (7)")
    persistence.SyslogStyleLog(journal, verbose=False).info("Local RPC services initialized")
    assert journal.getvalue() == "Started (7)\n"
    monkeypatch.delenv("JOURNAL_STREAM")
    terminal = io.StringIO()
    persistence.SyslogStyleLog(terminal, verbose=True).info("Socket closed.")
    assert terminal.getvalue() == f"nvidia-persistenced[{os.getpid()}]: Socket closed.\n"
