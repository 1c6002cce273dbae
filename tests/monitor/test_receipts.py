"""Receipts (lingbot_fleet.node.receipts): a receipt stands only while nothing it covers moved."""

from __future__ import annotations

import json
import os
from pathlib import Path

from lingbot_fleet.controller.receipt_action import digest_options
from lingbot_fleet.monitor.install_options import INSTALL_ARGUMENT_SPEC, managed_files, unit_paths
from lingbot_fleet.node import receipts
from lingbot_fleet.node import systemd as systemd_show

TIMER = "lingbot-fleet-monitor.timer"
ACTIVE = {TIMER: {"Id": TIMER, "UnitFileState": "enabled", "ActiveState": "active"}}
NOW_S = 1_800_000_000.0


def node(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "etc/lingbot-fleet").mkdir(parents=True)
    (root / "etc/lingbot-fleet/monitor.json").write_text(
        '{"plan_path": "/etc/lingbot/plan.json"}\n'
    )
    (root / "var/lib/lingbot-fleet/monitor").mkdir(parents=True)
    return root


def reading(root: Path, units=ACTIVE, now_s: float = NOW_S) -> dict:
    return receipts.read_receipts(str(root), lambda names: units, now_s)


def recorded(root: Path, digest: str = "d1") -> None:
    paths = ["/etc/lingbot-fleet/monitor.json", "/var/lib/lingbot-fleet/monitor", "/opt/old"]
    requires = {TIMER: {"UnitFileState": "enabled", "ActiveState": "active"}}
    assert receipts.write_receipt("topo_monitor", digest, paths, requires, root=str(root))


def test_a_receipt_stands_while_nothing_moved(tmp_path: Path) -> None:
    root = node(tmp_path)
    recorded(root)
    # Written once: the same receipt again is no write.
    paths = ["/etc/lingbot-fleet/monitor.json", "/var/lib/lingbot-fleet/monitor", "/opt/old"]
    requires = {TIMER: {"UnitFileState": "enabled", "ActiveState": "active"}}
    assert not receipts.write_receipt("topo_monitor", "d1", paths, requires, root=str(root))
    found = reading(root)
    assert set(found) == {"topo_monitor"}
    assert receipts.unchanged(found["topo_monitor"], "d1", NOW_S + 5) is None
    # Files appearing in a directory the receipt covers do not move it (state, metrics).
    (root / "var/lib/lingbot-fleet/monitor/state.json").write_text("{}")
    assert receipts.unchanged(reading(root)["topo_monitor"], "d1", NOW_S) is None
    mode = os.stat(root / "var/lib/lingbot-fleet/receipts/topo_monitor.json").st_mode & 0o777
    assert mode == 0o600


def test_any_move_makes_the_receipt_not_stand(tmp_path: Path) -> None:
    root = node(tmp_path)
    config = root / "etc/lingbot-fleet/monitor.json"
    recorded(root)
    assert receipts.unchanged(reading(root)["topo_monitor"], "d2", NOW_S) == (
        "the options changed since the receipt"
    )
    stale = reading(root, now_s=NOW_S - receipts.READING_MAX_AGE_S - 1)
    assert (
        receipts.unchanged(stale["topo_monitor"], "d1", NOW_S) == "no fresh reading of the receipt"
    )
    stopped = {TIMER: {**ACTIVE[TIMER], "ActiveState": "inactive"}}
    assert receipts.unchanged(reading(root, stopped)["topo_monitor"], "d1", NOW_S) == (
        f"{TIMER} is ActiveState=inactive, not active"
    )
    assert receipts.unchanged(reading(root, {})["topo_monitor"], "d1", NOW_S) == (
        f"{TIMER} is ActiveState=unknown, not active"
    )

    edits = {
        "same content written again": lambda: config.write_text(config.read_text()),
        "mode changed": lambda: config.chmod(0o600),
        "an absent path created": lambda: (root / "opt/old").mkdir(parents=True),
        "a directory replaced": lambda: os.rename(
            root / "var/lib/lingbot-fleet/monitor", root / "var/lib/lingbot-fleet/moved"
        ),
    }
    for why, edit in edits.items():
        root = node(tmp_path / why.replace(" ", "-"))
        config = root / "etc/lingbot-fleet/monitor.json"
        recorded(root)
        edit()
        assert receipts.unchanged(reading(root)["topo_monitor"], "d1", NOW_S) is not None, why


def test_damaged_or_foreign_receipts_are_ignored(tmp_path: Path) -> None:
    root = node(tmp_path)
    directory = root / "var/lib/lingbot-fleet/receipts"
    directory.mkdir(parents=True)
    (directory / "topo_monitor.json").write_text("{not json")
    (directory / "other.json").write_text('{"schema": 1, "role": "topo_monitor"}')
    (directory / "notes.txt").write_text("x")
    # A receipt of the earlier schema (its digest may hold a no_log option) is not read.
    earlier = {"schema": 1, "role": "lingbot_service", "options_digest": "d1", "paths": {}}
    (directory / "lingbot_service.json").write_text(json.dumps({**earlier, "units": {}}))
    assert reading(root) == {}
    assert receipts.unchanged(None, "d1", NOW_S) == "no receipt"


def test_the_digest_is_of_every_option_but_the_run_ones() -> None:
    params = {key: spec.get("default") for key, spec in INSTALL_ARGUMENT_SPEC.items()}
    params |= {"app_checksum": "ab" * 32, "python": "/usr/bin/python3", "config": {"a": 1}}

    def digest(**changed: object) -> str:
        return receipts.options_digest(digest_options(INSTALL_ARGUMENT_SPEC, {**params, **changed}))

    # The archive's checksum and the configuration are options like any other.
    assert digest(app_checksum="cd" * 32) != digest()
    assert digest(config={"a": 2}) != digest()
    assert digest(interval="10min") != digest()
    assert managed_files(params)[-2:] == list(unit_paths(params).values())
    assert list(unit_paths(params)) == [
        "lingbot-fleet-monitor.service",
        "lingbot-fleet-monitor.timer",
    ]


def test_systemctl_show_of_several_units_is_parsed_per_unit() -> None:
    text = (
        "Id=lingbot-fleet-monitor.timer\nLoadState=loaded\nUnitFileState=enabled\n"
        "ActiveState=active\n\nId=gone.service\nLoadState=not-found\nUnitFileState=\n"
        "ActiveState=inactive\n"
    )
    units = systemd_show.parse_units(text)
    assert units[TIMER]["ActiveState"] == "active"
    assert units["gone.service"]["LoadState"] == "not-found"
