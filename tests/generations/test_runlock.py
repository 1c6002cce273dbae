"""The node's run lock and the controller's run records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lingbot_fleet.node import runs
from lingbot_fleet.node.runlock import LockedError, read_lock, release, take

MINE = "20261201T100000Z-ctl01-p4711"
OTHER_LIVE = "20261201T095900Z-ctl01-p4700"
ELSEWHERE = "20261201T095800Z-ctl02-p99"


@pytest.fixture
def tmp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generations tree of these tests: a directory whose name is the toolkit's (the
    lock lives only in a tree the toolkit may own, values.owned_dir)."""
    return tmp_path_factory.mktemp("lingbot-fleet-generations")


def test_a_run_takes_the_lock_again_and_gives_it_back(tmp_path: Path) -> None:
    assert take(str(tmp_path), MINE, now=100.0).replaced_run is None
    assert take(str(tmp_path), MINE, now=200.0).replaced_run is None
    lock = read_lock(str(tmp_path))
    assert lock is not None
    assert (lock["run_id"], lock["started_epoch"], lock["heartbeat_epoch"]) == (MINE, 100.0, 200.0)
    assert oct((tmp_path / "lock.json").stat().st_mode & 0o777) == "0o600"
    assert release(str(tmp_path), OTHER_LIVE) is False
    assert release(str(tmp_path), MINE) is True
    assert read_lock(str(tmp_path)) is None


def test_a_live_run_of_the_same_controller_keeps_the_lock(tmp_path: Path) -> None:
    take(str(tmp_path), OTHER_LIVE, now=100.0)
    with pytest.raises(LockedError) as refused:
        take(str(tmp_path), MINE, live_runs=[MINE, OTHER_LIVE], now=160.0)
    assert str(refused.value).startswith(
        f"another toolkit run is changing this node: run {OTHER_LIVE}, last change 60 s ago. "
        "Wait for it to finish and run again."
    )
    assert read_lock(str(tmp_path))["run_id"] == OTHER_LIVE


def test_a_gone_run_of_the_same_controller_is_taken_over_at_once(tmp_path: Path) -> None:
    take(str(tmp_path), OTHER_LIVE, now=100.0)
    taken = take(str(tmp_path), MINE, live_runs=[MINE], now=101.0)
    assert (taken.replaced_run, taken.replaced_reason) == (
        OTHER_LIVE,
        "its ansible-playbook process is gone",
    )
    assert read_lock(str(tmp_path))["run_id"] == MINE


def test_a_run_of_another_controller_is_taken_over_only_after_the_ttl(tmp_path: Path) -> None:
    take(str(tmp_path), ELSEWHERE, now=100.0)
    with pytest.raises(LockedError):
        take(str(tmp_path), MINE, live_runs=[MINE], ttl_s=3600, now=3000.0)
    taken = take(str(tmp_path), MINE, live_runs=[MINE], ttl_s=3600, now=3701.0)
    assert taken.replaced_run == ELSEWHERE
    assert taken.replaced_reason == "it changed nothing for 3601 s (more than 3600 s)"


def _module_holding_the_lock(directory: Path, run_id: str) -> subprocess.Popen[str]:
    """Another process, as a module of ``run_id`` on the node, that holds the lock."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from lingbot_fleet.node.runlock import take; "
            "take(sys.argv[1], sys.argv[2]); print('held', flush=True); time.sleep(60)",
            str(directory),
            run_id,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "python")},
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_gone_run_whose_module_still_runs_is_waited_for(tmp_path: Path) -> None:
    # The controller of OTHER_LIVE is gone (not in live_runs), but the module it started
    # still runs on the node: taking over now would change files under its hands.
    holder = _module_holding_the_lock(tmp_path, OTHER_LIVE)
    try:
        with pytest.raises(LockedError) as refused:
            take(str(tmp_path), MINE, live_runs=[MINE], wait_s=0.5)
        assert str(refused.value).startswith(
            "a toolkit module is still changing this node "
            f"(run {OTHER_LIVE}, module pid {holder.pid}) and did not end within 0 s."
        )
        assert read_lock(str(tmp_path))["run_id"] == OTHER_LIVE
    finally:
        holder.kill()
        holder.wait()
    # Killed, its hold ends with it: the next take goes through at once.
    taken = take(str(tmp_path), MINE, live_runs=[MINE], wait_s=0.0)
    assert taken.replaced_run == OTHER_LIVE
    assert read_lock(str(tmp_path))["run_id"] == MINE


def test_a_run_waits_for_the_module_before_it_to_end(tmp_path: Path) -> None:
    holder = _module_holding_the_lock(tmp_path, OTHER_LIVE)
    ender = subprocess.Popen(["sh", "-c", f"sleep 0.6; kill {holder.pid}"])
    try:
        taken = take(str(tmp_path), MINE, live_runs=[MINE], wait_s=30)
    finally:
        ender.wait()
        holder.wait()
    assert taken.replaced_run == OTHER_LIVE
    assert holder.returncode == -15


def test_a_damaged_lock_file_names_itself(tmp_path: Path) -> None:
    (tmp_path / "lock.json").write_text("{not json")
    with pytest.raises(LockedError, match=r"lock\.json cannot be read"):
        take(str(tmp_path), MINE)


def test_run_records_list_live_runs_and_drop_gone_ones(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        live = runs.run_identity(sleeper.pid)
        runs.register(live, tmp_path)
        gone = runs.RunIdentity(
            run_id=f"20261130T000000Z-ctl01-p{os.getpid()}", pid=os.getpid(), start_ticks=1
        )
        (tmp_path / gone.run_id).write_text(json.dumps({"pid": gone.pid, "start_ticks": 1}))
        assert runs.live_runs(tmp_path) == [live.run_id]
        assert sorted(p.name for p in tmp_path.iterdir()) == [live.run_id]
    finally:
        sleeper.kill()
        sleeper.wait()
    assert runs.live_runs(tmp_path) == []
    assert runs.controller_of(live.run_id) == live.run_id.split("-", 1)[1].rsplit("-p", 1)[0]
    assert runs.controller_of("20250101T120000Z-4711") is None
