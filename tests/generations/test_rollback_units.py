"""The rollback's stop of a unit it takes away, when systemd no longer knows the unit."""

from __future__ import annotations

from typing import Any

import pytest

from lingbot_fleet.node import nodefiles, rollback
from lingbot_fleet.node.nodefiles import CommandResult, NodeChanges, NodeFileError


def fake_systemctl(monkeypatch: pytest.MonkeyPatch, disable: CommandResult, show: str) -> list:
    calls: list[list[str]] = []

    def run(argv: Any, *, check: bool = True) -> CommandResult:
        calls.append(list(argv))
        return disable if "disable" in argv else CommandResult(0, show, "")

    monkeypatch.setattr(nodefiles, "run_command", run)
    monkeypatch.setattr(rollback, "run_command", run)
    return calls


NOT_LOADED = CommandResult(
    5, "", "Failed to stop lingbot@numa0-2.service: Unit lingbot@numa0-2.service not loaded."
)


def test_a_unit_systemd_no_longer_knows_is_already_stopped(monkeypatch) -> None:
    calls = fake_systemctl(
        monkeypatch, NOT_LOADED, "LoadState=not-found\nActiveState=inactive\nUnitFileState=\n"
    )
    rollback._stop_and_disable(NodeChanges(check_mode=False), "lingbot@numa0-2.service")
    assert calls[0] == ["systemctl", "disable", "--now", "lingbot@numa0-2.service"]


def test_a_loaded_unit_that_will_not_stop_fails_the_rollback(monkeypatch) -> None:
    fake_systemctl(
        monkeypatch, NOT_LOADED, "LoadState=loaded\nActiveState=active\nUnitFileState=enabled\n"
    )
    with pytest.raises(NodeFileError) as failed:
        rollback._stop_and_disable(NodeChanges(check_mode=False), "lingbot@numa0-2.service")
    assert str(failed.value) == (
        "systemctl disable --now lingbot@numa0-2.service failed with exit status 5: Failed to "
        "stop lingbot@numa0-2.service: Unit lingbot@numa0-2.service not loaded."
    )
