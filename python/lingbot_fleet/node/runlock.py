"""The node's run lock: one toolkit run at a time changes a node.

Stdlib-only: runs on nodes (shipped as ``ansible.module_utils.lingbot_fleet.node.runlock``).

A run takes the lock with its first change (``NodeChanges`` does it before it saves the
first file into the run's generation) and gives it back when it commits that generation,
so a run that changes nothing never takes it and read-only runs never wait. The lock file
(``<generations dir>/lock.json``) names its owner, the run id (which carries the controller
host and its ``ansible-playbook`` process id, ``lingbot_fleet.node.runs``), with when it started
and when it last changed something.

Another run finding the lock:

- refuses, naming the owner and the fix, while the owner may still be running;
- takes it over when the owner is gone: the owner was started by this run's controller,
  which does not list it among its live runs (``live_runs``: its ansible-playbook process
  is gone), or the owner has changed nothing for ``ttl_s`` seconds (a controller that died
  elsewhere). The owner's open generation is then committed as incomplete by the caller,
  never thrown away.

A controller that dies does not stop the module it had started on the node: the module
runs on and finishes its changes. So the module process that holds the lock also holds
``flock`` on the generations directory itself until it gives the lock back or exits (the
kernel lets go of it then, however the process ends). A run taking the lock over waits,
up to ``wait_s``, for that module to end, and refuses naming it if it does not: two
module processes never change one node's files at once.

The read-modify-write of the lock file happens under ``flock`` on a sibling file, so two
module calls that race for it see one winner.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .atomic import write_json_atomic
from .generations import GenerationError, own_tree
from .runs import controller_of

LOCK_FILE = "lock.json"
GUARD_FILE = ".lock.guard"
DEFAULT_TTL_S = 3600
# How long a run taking the lock waits for a module of the run before it to end.
DEFAULT_WAIT_S = 180.0
_POLL_S = 0.25

# This process's descriptors holding a generations directory (one per directory):
# flock belongs to the open file, so the process reuses its own instead of blocking itself.
_active_descriptors: dict[str, int] = {}


class LockedError(Exception):
    """Another run holds the node's lock; str() names it and the fix."""


@dataclass(frozen=True)
class Taken:
    """What taking the lock found: the stale run it replaced, if any, and why."""

    replaced_run: str | None = None
    replaced_reason: str = ""


def _lock_paths(generations_dir_real: str) -> tuple[str, str]:
    return (
        os.path.join(generations_dir_real, LOCK_FILE),
        os.path.join(generations_dir_real, GUARD_FILE),
    )


@contextlib.contextmanager
def _guard(path: str) -> Iterator[None]:
    # The generations tree, created and marked by the toolkit, or refused (another user's
    # directory, one that is not a generations tree): never a directory taken as found.
    own_tree(os.path.dirname(path), mark_earlier=False)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def _hold_active(generations_dir_real: str) -> bool:
    """Hold the directory for this process; False while another process holds it."""
    descriptor = _active_descriptors.get(generations_dir_real)
    if descriptor is None:
        # The directory, not a file in it: holding it leaves nothing on the node. Not
        # inherited (O_CLOEXEC): a command the module starts must not keep it held.
        descriptor = os.open(generations_dir_real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if generations_dir_real not in _active_descriptors:
            os.close(descriptor)
        return False
    _active_descriptors[generations_dir_real] = descriptor
    return True


def _let_go_of_active(generations_dir_real: str) -> None:
    descriptor = _active_descriptors.pop(generations_dir_real, None)
    if descriptor is not None:
        os.close(descriptor)


def read_lock(generations_dir_real: str) -> dict[str, Any] | None:
    """The lock file's document; None when no run holds the lock."""
    lock_path, _ = _lock_paths(generations_dir_real)
    try:
        with open(lock_path, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise LockedError(
            f"{lock_path} cannot be read ({error}); it names the run that holds this node. "
            "Look at it, and remove it once no toolkit run is changing the node"
        ) from error
    if not isinstance(document, dict) or not document.get("run_id"):
        raise LockedError(
            f"{lock_path} does not name a run; remove it once no toolkit run is changing the node"
        )
    return document


def _describe(document: dict[str, Any], now: float) -> str:
    idle_s = now - float(document.get("heartbeat_epoch") or 0)
    return f"run {document['run_id']}, last change {idle_s:.0f} s ago"


def run_is_gone(holder: str, taker: str, live_runs: Sequence[str] | None) -> bool:
    """The holder was started by the taker's controller, which no longer runs it."""
    if live_runs is None:
        return False
    controller = controller_of(taker)
    return (
        controller is not None and controller_of(holder) == controller and holder not in live_runs
    )


def take(
    generations_dir_real: str,
    run_id: str,
    *,
    live_runs: Sequence[str] | None = None,
    ttl_s: float = DEFAULT_TTL_S,
    wait_s: float = DEFAULT_WAIT_S,
    now: float | None = None,
) -> Taken:
    """Hold the lock for ``run_id`` (again, or for the first time); LockedError when busy.

    Waits up to ``wait_s`` while a module process of another run (or of this one) is
    still changing the node, although its run is gone or done.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            taken, waiting_for = _try_take(generations_dir_real, run_id, live_runs, ttl_s, now)
        except GenerationError as error:
            raise LockedError(str(error)) from error
        if taken is not None:
            return taken
        if time.monotonic() >= deadline:
            raise LockedError(
                f"a toolkit module is still changing this node ({waiting_for}) and did not end "
                f"within {wait_s:.0f} s. Wait for it to end (ps -p <pid> on the node) and run "
                "again; nothing was touched"
            )
        time.sleep(_POLL_S)


def _try_take(
    generations_dir_real: str,
    run_id: str,
    live_runs: Sequence[str] | None,
    ttl_s: float,
    now: float | None,
) -> tuple[Taken | None, str]:
    """The lock taken, or None and the module process still busy on the node."""
    moment = time.time() if now is None else now
    lock_path, guard_path = _lock_paths(generations_dir_real)
    with _guard(guard_path):
        current = read_lock(generations_dir_real)
        taken = Taken()
        if current is not None and current.get("run_id") != run_id:
            idle_s = moment - float(current.get("heartbeat_epoch") or 0)
            if run_is_gone(str(current["run_id"]), run_id, live_runs):
                reason = "its ansible-playbook process is gone"
            elif idle_s > ttl_s:
                reason = f"it changed nothing for {idle_s:.0f} s (more than {ttl_s:.0f} s)"
            else:
                raise LockedError(
                    f"another toolkit run is changing this node: {_describe(current, moment)}. "
                    "Wait for it to finish and run again. If that run is gone (killed, or its "
                    "controller died), run again from the controller that started it, or after "
                    f"{ttl_s:.0f} s without a change; its open generation is then kept, "
                    "committed as incomplete"
                )
            taken = Taken(replaced_run=str(current["run_id"]), replaced_reason=reason)
        if not _hold_active(generations_dir_real):
            if current is None:
                return None, "a module that is giving the lock back"
            return None, f"run {current['run_id']}, module pid {current.get('pid', 'unknown')}"
        if current is not None and taken.replaced_run is None:
            started = current.get("started_epoch")
        else:
            started = moment
        write_json_atomic(
            lock_path,
            {
                "run_id": run_id,
                "started_epoch": started,
                "heartbeat_epoch": moment,
                "pid": os.getpid(),
            },
            mode=0o600,
            dir_mode=0o700,
        )
        return taken, ""


def release(generations_dir_real: str, run_id: str) -> bool:
    """Give the lock back when ``run_id`` holds it; True when it did."""
    lock_path, guard_path = _lock_paths(generations_dir_real)
    if not os.path.isdir(generations_dir_real):
        return False
    with _guard(guard_path):
        current = read_lock(generations_dir_real)
        if current is None or current.get("run_id") != run_id:
            return False
        os.unlink(lock_path)
        _let_go_of_active(generations_dir_real)
        return True
