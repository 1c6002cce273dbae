"""Role pcie_acs on a lab node's tree: the real setpci writes the ports' config space, a
systemctl stand-in runs the unit's ExecStart and ExecStop lines, and a rollback through
the generations sets the bits back as they were."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from acs_support import (
    GDIR,
    PASSTHROUGH,
    REPO,
    ROOT_PORT,
    SWITCH_PORTS,
    TRANSLATING,
    Node,
)
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from malformed_support import role_module

from lingbot_fleet.controller.receipt_action import digest_options
from lingbot_fleet.gpu import acs
from lingbot_fleet.node import generations, receipts, rollback


def tree(root: Path) -> dict[str, bytes]:
    """Every file the toolkit could have written (the node's /etc and /var)."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for top in ("etc", "var")
        for path in sorted((root / top).rglob("*"))
        if path.is_file()
    }


def test_named_switch_ports_lose_redirect_and_a_rollback_sets_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(tmp_path, PASSTHROUGH, monkeypatch)
    assert [node.acs_word(bdf) for bdf in SWITCH_PORTS] == [0x001D, 0x001D]
    facts = node.facts()

    preview = node.run(monkeypatch, facts, redirect_off_bridges=SWITCH_PORTS, check_mode=True)
    assert preview["failed"] is False, preview
    assert f"would create {acs.UNIT_PATH}" in preview["actions"]
    assert not (node.root / acs.UNIT_PATH.lstrip("/")).exists()
    assert [node.acs_word(bdf) for bdf in SWITCH_PORTS] == [0x001D, 0x001D]

    done = node.run(monkeypatch, facts, redirect_off_bridges=["18:00.0", "0000:18:01.0"])
    assert done["failed"] is False, done
    assert done["changed"] is True and done["started"] is True
    # Request and completion redirect off; source validation and upstream forwarding stay.
    assert [node.acs_word(bdf) for bdf in SWITCH_PORTS] == [0x0011, 0x0011]
    assert node.acs_word(ROOT_PORT) == 0x001D
    unit = (node.root / acs.UNIT_PATH.lstrip("/")).read_text()
    assert f"ExecStart={node.setpci} -s 0000:18:00.0 ECAP_ACS+6.w=0000:000c" in unit
    assert f"ExecStop={node.setpci} -s 0000:18:01.0 ECAP_ACS+6.w=000c:000c" in unit
    refreshed = done["ansible_facts"]["lingbot_gpu"]
    controls = {b["bdf"]: b["acs"]["control"] for g in refreshed["gpus"] for b in g["bridges"]}
    assert controls == {**dict.fromkeys(SWITCH_PORTS, "0x0011"), ROOT_PORT: "0x001d"} | {
        "0000:17:00.0": "0x0000"
    }

    # Converged: the second run, on the facts as they are now, touches nothing.
    calls = node.log.read_text()
    again = node.run(monkeypatch, node.facts(), redirect_off_bridges=SWITCH_PORTS)
    assert again["failed"] is False and again["changed"] is False, again
    # Only reads: the unit's state to decide, and the properties of the unit it watched
    # for the receipt of a call that changed nothing.
    receipt_show = [f"--property=Id,{','.join(receipts.UNIT_PROPERTIES)}", "--", acs.UNIT_NAME]
    assert node.log.read_text()[len(calls) :].split() == [
        "show",
        *acs_show_args(),
        "show",
        *receipt_show,
    ]

    generations.commit(GDIR, "run-1", {"playbook": "site.yml"}, root=str(node.root))
    before = tree(node.root)
    request = rollback.RollbackRequest(GDIR, "rb", root=str(node.root), target=0)
    undone = rollback.roll_back(request, check_mode=False, find_bin=shutil.which)
    assert acs.UNIT_NAME in undone["rollback"]["units_to_stop"]
    assert [node.acs_word(bdf) for bdf in SWITCH_PORTS] == [0x001D, 0x001D]
    assert not (node.root / acs.UNIT_PATH.lstrip("/")).exists()
    assert set(tree(node.root)) - set(before) <= {
        name for name in tree(node.root) if name.startswith("var/lib/lingbot-fleet/gen")
    }


def acs_show_args() -> list[str]:
    return [*(f"--property={name}" for name in acs.UNIT_STATE_PROPERTIES), "--", acs.UNIT_NAME]


def test_an_empty_list_takes_the_unit_away_and_restores_the_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(tmp_path, PASSTHROUGH, monkeypatch)
    installed = node.run(monkeypatch, node.facts(), redirect_off_bridges=SWITCH_PORTS[:1])
    assert installed["failed"] is False, installed
    assert [node.acs_word(bdf) for bdf in SWITCH_PORTS] == [0x0011, 0x001D]
    # Installed for one port: the second port added stops the unit first (bits back),
    # then runs it for both.
    both = node.run(monkeypatch, node.facts(), redirect_off_bridges=SWITCH_PORTS)
    assert both["failed"] is False, both
    assert [p["redirect_bits_before"] for p in both["decision"]["ports"]] == ["0x000c"] * 2
    assert both["ports_written"] == SWITCH_PORTS
    assert [node.acs_word(bdf) for bdf in SWITCH_PORTS] == [0x0011, 0x0011]
    removed = node.run(monkeypatch, node.facts(), redirect_off_bridges=[])
    assert removed["failed"] is False and removed["changed"] is True, removed
    assert [node.acs_word(bdf) for bdf in SWITCH_PORTS] == [0x001D, 0x001D]
    assert not (node.root / acs.UNIT_PATH.lstrip("/")).exists()
    # A call that changed something keeps no receipt.
    assert removed["receipt"] == "none"
    # The facts the probe reads next show the bits back (a probe taken with them off is
    # not reused).
    assert removed["ports_written"] == SWITCH_PORTS
    refreshed = removed["ansible_facts"]["lingbot_gpu"]
    controls = {b["bdf"]: b["acs"]["control"] for g in refreshed["gpus"] for b in g["bridges"]}
    assert [controls[bdf] for bdf in SWITCH_PORTS] == ["0x001d", "0x001d"]


@pytest.mark.parametrize(
    ("named", "fragment"),
    [
        (
            [ROOT_PORT],
            "0000:16:01.0 is a root_port, not a switch downstream port; ACS on root and "
            "chipset ports keeps the devices below them apart and is left as it is. Name the "
            "switch downstream ports instead: 0000:18:00.0, 0000:18:01.0",
        ),
        (
            ["0000:42:00.0"],
            "0000:42:00.0 is not a bridge above any GPU of this node; the switch downstream "
            "ports above its GPUs are: 0000:18:00.0, 0000:18:01.0",
        ),
        (["18-00-0"], "'18-00-0' is not a PCI address; write it as lspci -D prints it"),
    ],
)
def test_a_port_the_toolkit_will_not_touch_fails_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: list[str], fragment: str
) -> None:
    node = Node(tmp_path, PASSTHROUGH, monkeypatch)
    before = tree(node.root)
    failed = node.run(monkeypatch, node.facts(), redirect_off_bridges=[SWITCH_PORTS[0], *named])
    assert failed["failed"] is True
    assert fragment in failed["msg"]
    assert tree(node.root) == before
    assert [node.acs_word(bdf) for bdf in SWITCH_PORTS] == [0x001D, 0x001D]


def test_a_translating_iommu_keeps_redirect_unless_the_operator_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(tmp_path, TRANSLATING, monkeypatch)
    facts = node.facts()
    assert facts["iommu"]["mode"] == "translated"
    kept = node.run(monkeypatch, facts, redirect_off_bridges=SWITCH_PORTS)
    assert kept["failed"] is False and kept["changed"] is False, kept
    assert kept["decision"]["refused"].startswith("the IOMMU is translated on this node")
    assert [node.acs_word(bdf) for bdf in SWITCH_PORTS] == [0x001D, 0x001D]
    forced = node.run(
        monkeypatch, facts, redirect_off_bridges=SWITCH_PORTS, allow_translating_iommu=True
    )
    assert forced["failed"] is False and forced["changed"] is True, forced
    assert [node.acs_word(bdf) for bdf in SWITCH_PORTS] == [0x0011, 0x0011]


def facts_with_port(control: int, installed: str | None = None) -> acs.AcsDecision:
    bits = {"request_redirect": bool(control & 4), "completion_redirect": bool(control & 8)}
    bridge = {
        "bdf": "0000:18:00.0",
        "port_type": "switch_downstream",
        "acs_status": "read",
        "acs": {"control": f"0x{control:04x}", **bits},
    }
    facts = {"iommu": {"mode": "passthrough"}, "gpus": [{"index": 0, "bridges": [bridge]}]}
    return acs.decide(
        ["0000:18:00.0"], facts, allow_translating_iommu=False, installed_unit=installed
    )


def test_a_port_already_off_is_left_alone_unless_the_unit_turned_it_off() -> None:
    assert facts_with_port(0x0011).ports == ()
    assert facts_with_port(0x0011).left_alone[0][0] == "0000:18:00.0"
    # Only request redirect was on: only it comes back when the unit is stopped.
    [port] = facts_with_port(0x0015).ports
    assert port.redirect_bits_before == 0x0004
    unit = acs.unit_text([port], "/usr/bin/setpci")
    assert "ExecStop=/usr/bin/setpci -s 0000:18:00.0 ECAP_ACS+6.w=0004:000c" in unit
    # Once the unit turned it off, the facts show it off: the unit's record stands.
    assert facts_with_port(0x0011, installed=unit).ports == (port,)
    assert json.loads(json.dumps(facts_with_port(0x0011, installed=unit).to_json()))["ports"] == [
        {"bdf": "0000:18:00.0", "redirect_bits_before": "0x0004"}
    ]


def show_units(node: Node):
    """systemctl show of units as gpu_facts reads them, through the node's systemctl."""
    return receipts.show_units(shutil.which("systemctl") or "systemctl")


def reading(node: Node) -> dict[str, Any]:
    return receipts.read_receipts(str(node.root), show_units(node), time.time())[acs.RECEIPT_ROLE]


def action_digest(node: Node, facts: dict[str, Any], named: list[str]) -> str:
    """The digest the action computes (every option but the run's; the facts as the view
    the module decides from)."""
    params = {
        "redirect_off_bridges": named,
        "allow_translating_iommu": False,
        "facts": facts,
        "setpci": str(node.setpci),
        "verify": True,
        "root": str(node.root),
    }
    return receipts.options_digest(digest_options(acs.ARGUMENT_SPEC, params, acs.DIGEST_VIEWS))


def test_the_receipt_stands_only_while_the_module_would_change_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the action plugin asks before it answers without a module call."""
    node = Node(tmp_path, PASSTHROUGH, monkeypatch)
    named = {"redirect_off_bridges": SWITCH_PORTS}
    done = node.run(monkeypatch, node.facts(), **named)
    assert done["changed"] is True and done["receipt"] == "none"
    digest = action_digest(node, node.facts(), SWITCH_PORTS)
    again = node.run(monkeypatch, node.facts(), **named, receipt_digest=digest)
    assert again["changed"] is False and again["receipt"] == "written"
    entry = reading(node)
    assert receipts.unchanged(entry, digest, time.time()) is None
    # What the receipt watches is what the call read and ran systemctl on.
    assert set(entry["receipt"]["paths"]) == {acs.UNIT_PATH}
    assert set(entry["receipt"]["units"]) == {acs.UNIT_NAME}
    assert entry["receipt"]["units"][acs.UNIT_NAME]["ActiveState"] == "active"
    # The answer is the module's own: a third call says the same, every key.
    answer = receipts.replay(entry["receipt"])
    third = node.run(monkeypatch, node.facts(), **named, receipt_digest=digest)
    assert answer is not None and answer.pop("receipt") == "stands"
    assert answer == {key: third[key] for key in third if key not in ("receipt", "failed")}
    # Another list of ports is another digest; a bridge's link moving in the facts is not.
    assert action_digest(node, node.facts(), SWITCH_PORTS[:1]) != digest
    moved = node.facts()
    for gpu in moved["gpus"]:
        for bridge in gpu.get("bridges") or []:
            bridge["current_link"] = {"generation": 1, "width": 1}
    assert action_digest(node, moved, SWITCH_PORTS) == digest
    # The unit failing takes it down.
    state_path = tmp_path / "unit-state.json"
    state = json.loads(state_path.read_text())
    state_path.write_text(json.dumps({**state, "ActiveState": "failed"}))
    assert receipts.unchanged(reading(node), digest, time.time()) is not None
    state_path.write_text(json.dumps(state))
    assert receipts.unchanged(reading(node), digest, time.time()) is None
    # The bits came back (a boot whose unit failed): the facts say so, the digest moves.
    subprocess.run([str(node.setpci), "-s", SWITCH_PORTS[1], "ECAP_ACS+6.w=000c:000c"], check=True)
    assert action_digest(node, node.facts(), SWITCH_PORTS) != digest


def role_runs(*, bridges: list[str], ansible_facts: dict[str, Any]) -> bool:
    """The role's task condition (roles/pcie_acs/tasks/main.yml), evaluated by Ansible."""
    [task] = yaml.safe_load((REPO / "roles/pcie_acs/tasks/main.yml").read_text())
    role_vars = yaml.safe_load((REPO / "roles/pcie_acs/vars/main.yml").read_text())
    variables = {
        **role_vars,
        "pcie_acs_redirect_off_bridges": bridges,
        "ansible_facts": ansible_facts,
    }
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.evaluate_conditional(trust_as_template(task["when"])) is True


def test_a_lost_receipt_with_the_ports_cleared_still_removes_the_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The role runs on what is on the node (its unit, as gpu_facts lists the toolkit's
    units), never on a receipt's existence: a receipt is only a saving."""
    node = Node(tmp_path, PASSTHROUGH, monkeypatch)
    node.run(monkeypatch, node.facts(), redirect_off_bridges=SWITCH_PORTS)
    kept = node.run(monkeypatch, node.facts(), redirect_off_bridges=SWITCH_PORTS)
    assert kept["receipt"] == "written"
    assert receipts.remove_receipt(acs.RECEIPT_ROLE, str(node.root))
    gpu_facts = role_module("gpu_facts", "gpu_facts")
    facts = {"lingbot_toolkit_units": gpu_facts.toolkit_units(str(node.root))}
    assert facts["lingbot_toolkit_units"] == [acs.UNIT_NAME]
    assert role_runs(bridges=[], ansible_facts=facts)
    assert not role_runs(bridges=[], ansible_facts={"lingbot_toolkit_units": []})
    assert role_runs(bridges=SWITCH_PORTS, ansible_facts={})
    removed = node.run(monkeypatch, node.facts(), redirect_off_bridges=[])
    assert removed["failed"] is False and removed["changed"] is True, removed
    assert not (node.root / acs.UNIT_PATH.lstrip("/")).exists()
    assert [node.acs_word(bdf) for bdf in SWITCH_PORTS] == [0x001D, 0x001D]
    assert gpu_facts.toolkit_units(str(node.root)) == []


def test_the_role_names_the_unit_the_module_installs() -> None:
    role_vars = yaml.safe_load((REPO / "roles/pcie_acs/vars/main.yml").read_text())
    assert role_vars["__pcie_acs_unit_name"] == acs.UNIT_NAME
