"""The monitor judges NVLink error counters over the whole period since its last run
(monitor/state.py): a slow rise that one facts reading cannot see, started on a lab node
while it runs (lingbot-lab-incident nvlink-errors)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from facts_support import load_profile
from monitor_support import boot, monitor_config

from lingbot_fleet.monitor.run import run_monitor
from lingbot_lab.incident import strike

CODES = ("NVLINK_ERRORS_RISING", "NVLINK_ERRORS_UNKNOWN")


def test_the_monitor_sees_an_incident_s_slow_rise_since_its_last_run(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    """Replays at 60 a minute: under one per facts reading, but the monitor's next run sees
    the rise since its last one. The incident starts them while the node runs."""
    profile = load_profile("h100-sxm-nvswitch")
    booted = boot(profile, tmp_path / "boot", lab_env)
    node = booted.node
    installed = node.lab_root / "opt" / "lingbot-lab" / "profile.json"
    installed.parent.mkdir(parents=True, exist_ok=True)
    installed.write_text(json.dumps(profile))
    config = monitor_config(booted, tmp_path / "work", use_nvml=True)
    clock = iter([1000.0, 1000.0, 1000.0, 1030.0, 1030.0, 1030.0])
    first = run_monitor(config, wall_clock=lambda: next(clock))
    assert [f for f in first["findings"] if f["code"] in CODES] == []
    replays = {"kind": "nvlink_errors", "gpu": 4, "counter": "replay", "per_minute": 60}
    strike(str(node.lab_root), {**replays, "count": 0})
    state = json.loads((tmp_path / "work" / "state" / "state.json").read_text())
    reading = state["nvlink_errors"][node.state["gpus"][4]["uuid"]]
    # The incident's counter rises from now on; the state keeps the last run's reading.
    assert reading["counts"]["replay"] == 0
    assert reading["unix_s"] == 1000.0
    time.sleep(2.1)  # two replays, at one a second
    second = run_monitor(config, wall_clock=lambda: next(clock))
    rising = [f for f in second["findings"] if f["code"] in CODES]
    assert [(f["code"], f["severity"], f["subject"]) for f in rising] == [
        ("NVLINK_ERRORS_RISING", "warning", node.state["gpus"][4]["bdf"])
    ]
    assert rising[0]["evidence"]["window_s"] == 30.0
