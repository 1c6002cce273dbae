"""The controller's record of the toolkit runs it started, for the node lock.

A run is one ``ansible-playbook`` process. Its id carries what identifies it:
``<UTC start>-<controller host>-p<pid>``. Every run writes a small file under the
controller's state directory (``$XDG_STATE_HOME/lingbot-fleet/runs``, else
``~/.local/state/lingbot-fleet/runs``); a later run lists the ones still running and
removes the rest. A node lock held by a run of this controller that is not among the live
ones may be taken over at once (``runlock``): that run can never finish what it left open.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from .atomic import write_atomic

_HOST_WORD = re.compile(r"[^A-Za-z0-9_.-]+")
_RUN_ID_PARTS = re.compile(r"[0-9]{8}T[0-9]{6}Z-(?P<host>[A-Za-z0-9_.-]+)-p[0-9]+")


@dataclass(frozen=True)
class RunIdentity:
    run_id: str
    pid: int
    start_ticks: int | None


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(base) / "lingbot-fleet" / "runs"


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[19])


def run_identity(pid: int, started_epoch: float | None = None) -> RunIdentity:
    """The id of the run whose ansible-playbook process is ``pid``."""
    ticks = process_start_ticks(pid)
    host = _HOST_WORD.sub("-", socket.gethostname().split(".")[0])[:40] or "controller"
    stamp_source = started_epoch
    if stamp_source is None:
        stamp_source = _process_start_epoch(ticks) if ticks is not None else time.time()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(stamp_source))
    return RunIdentity(run_id=f"{stamp}-{host}-p{pid}", pid=pid, start_ticks=ticks)


def _process_start_epoch(ticks: int) -> float:
    try:
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    except OSError:
        return time.time()
    return time.time() - uptime_s + ticks / os.sysconf("SC_CLK_TCK")


def register(identity: RunIdentity, directory: Path | None = None) -> None:
    """Note the run (idempotent: every host of the run calls it)."""
    directory = directory or state_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / identity.run_id
    if path.exists():
        return
    record = {"pid": identity.pid, "start_ticks": identity.start_ticks}
    write_atomic(str(path), json.dumps(record), mode=0o600, dir_mode=0o700)


def live_runs(directory: Path | None = None) -> list[str]:
    """Runs this controller started whose ansible-playbook process still runs.

    The records of the others are removed: their locks on nodes are taken over by the next
    run from this controller (``runlock.run_is_gone``).
    """
    directory = directory or state_dir()
    live = []
    try:
        entries = sorted(directory.iterdir())
    except FileNotFoundError:
        return []
    for path in entries:
        if path.name.startswith("."):
            continue
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if process_start_ticks(int(record.get("pid") or 0)) == record.get("start_ticks"):
            live.append(path.name)
        else:
            path.unlink(missing_ok=True)
    return live


def controller_of(run_id: str) -> str | None:
    """The controller host a run id names (None for ids not made by ``run_identity``)."""
    found = _RUN_ID_PARTS.fullmatch(run_id)
    return found.group("host") if found else None
