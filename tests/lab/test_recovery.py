"""`lab up` after a crash: supervisors and containers killed, mounts left behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from lingbot_fleet.lab import layout
from lingbot_fleet.lab.manager import _mounts_under


def test_lab_up_recovers_after_crash(booted_lab):
    lab = booted_lab.lab
    # A crash of the controller: supervisors and nspawn die, the containers' own
    # processes (reparented) and the overlay mounts stay behind.
    boot_ids = {spec.name: booted_lab.boot_id(spec) for spec in booted_lab.specs}
    for spec in booted_lab.specs:
        os.kill(lab.supervisor_pid(spec), signal.SIGKILL)
        for pid in lab._nspawn_pids(spec):
            if b"systemd-nspawn" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
    time.sleep(1)
    assert not any(lab.supervisor_pid(spec) for spec in booted_lab.specs)
    assert _mounts_under(layout.LAB_HOME / "nodes"), "the crash should leave the overlays mounted"

    specs = lab.up([spec.profile for spec in booted_lab.specs])

    assert specs == booted_lab.specs
    assert [spec.name for spec in specs if not lab.ssh_ok(spec)] == []
    assert [s.name for s in specs if booted_lab.boot_id(s) == boot_ids[s.name]] == []
    overlays = [m for m in _mounts_under(layout.LAB_HOME / "nodes") if m.endswith("/merged")]
    assert len(overlays) == len(specs)
