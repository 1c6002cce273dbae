"""The units the toolkit writes, judged by `systemd-analyze security --offline=true`.

Rendered by the same code the modules run (lingbot_layout, monitor.units) into a temp root;
both must stay at an exposure of 2.0 or less (systemd's "OK" band).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plan_support
from unit_exposure_support import MAX_EXPOSURE, exposure, needs_analyze

from lingbot_fleet.lingbot import layout
from lingbot_fleet.monitor.units import MonitorUnits, unit_files
from lingbot_fleet.plan import build_plan

pytestmark = needs_analyze


def lingbot_instance() -> dict[str, Any]:
    facts, probe = plan_support.lab_inputs("a6000-phb")
    return build_plan(facts, probe, {})["instances"][0]


def test_the_lingbot_instance_unit_is_sandboxed(tmp_path: Path) -> None:
    unit_dir = tmp_path / "etc/systemd/system"
    instance = lingbot_instance()
    (unit_dir / f"lingbot@{instance['name']}.service.d").mkdir(parents=True)
    (unit_dir / "lingbot@.service").write_text(layout.template_text(layout.UnitSettings()))
    launch = layout.Launch(numactl="/usr/bin/numactl", python="/usr/bin/python3", model_path="/m")
    (unit_dir / f"lingbot@{instance['name']}.service.d" / layout.DROPIN_NAME).write_text(
        layout.dropin_text(instance, launch)
    )
    text = (unit_dir / "lingbot@.service").read_text()
    assert "CapabilityBoundingSet=\n" in text
    assert "DeviceAllow=char-nvidia-uvm rw" in text
    assert exposure(tmp_path, f"lingbot@{instance['name']}.service") <= MAX_EXPOSURE


def test_the_monitor_unit_is_sandboxed(tmp_path: Path) -> None:
    unit_dir = tmp_path / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    units = MonitorUnits(
        python="/usr/bin/python3",
        app_path="/usr/local/sbin/lingbot-fleet-monitor",
        config_path="/etc/lingbot-fleet/monitor.json",
        state_dir="/var/lib/lingbot-fleet/monitor",
        textfile_dir="/var/lib/prometheus/node-exporter",
    )
    for name, text in unit_files(units).items():
        (unit_dir / name).write_text(text)
    assert exposure(tmp_path, "lingbot-fleet-monitor.service") <= MAX_EXPOSURE
