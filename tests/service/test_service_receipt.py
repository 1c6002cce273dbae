"""lingbot_service's receipt: a converged node is answered without a call with the module's
own result, and only while nothing the module decides from has moved."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import plan_support
import pytest
from module_support import SERVICE_CODE, FakeSystemd, node_arguments, run

from lingbot_fleet.controller.ansible_data import controller_options
from lingbot_fleet.controller.receipt_action import digest_options, receipt_digest
from lingbot_fleet.lingbot import layout, service_options
from lingbot_fleet.lingbot.service_reading import ANSWERS_READING
from lingbot_fleet.node import receipts
from lingbot_fleet.node import systemd as systemd_show

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="writes root-owned files")

NOW_S = 1_800_000_000.0
DIGEST = "d" * 64
RECEIPT = "var/lib/lingbot-fleet/receipts/lingbot_service.json"


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Any]:
    """A node root with numactl, a model, the account files and a .wants directory."""
    arguments = node_arguments(tmp_path)
    root = Path(arguments["root"])
    (root / "etc/systemd/system/multi-user.target.wants").mkdir(parents=True)
    for name in ("passwd", "group"):
        (root / "etc" / name).write_text("root:x:0:0::/root:/bin/sh\n")
    return arguments


@pytest.fixture(autouse=True)
def ready(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        SERVICE_CODE, "readiness_once", lambda params, instance, state: ("ready", "")
    )


class Task:
    """What controller_options reads of a task."""

    delegate_to = None
    async_val = 0


def inputs_of(profile: str, **policy: Any) -> dict[str, Any]:
    facts, probe = plan_support.lab_inputs(profile)
    return {"facts": facts, "probe": probe, "policy": policy, "findings": []}


def action_params(args: dict[str, Any]) -> dict[str, Any]:
    """The options as the action validates them, with the inputs it gathered."""
    params = controller_options(Task(), args, service_options.DECISION_SPEC)
    assert params is not None
    return {**params, "plan_inputs": args["plan_inputs"]}


def reading(node: dict[str, Any], systemd: FakeSystemd, answering: bool = True) -> dict[str, Any]:
    """The receipt as gpu_facts reads it at the start of a run (systemctl answered by the
    same fake systemd the module ran with; every instance answering, or none)."""

    def show(units: list[str]) -> dict[str, dict[str, str]]:
        argv = ["systemctl", "show", "--property=x", "--", *units]
        return systemd_show.parse_units(systemd(argv).stdout)

    readers = {ANSWERS_READING: lambda recorded: dict.fromkeys(recorded, answering)}
    found = receipts.read_receipts(node["root"], show, NOW_S, readers)
    return found[service_options.RECEIPT_ROLE]


def converge(node: dict[str, Any], monkeypatch: pytest.MonkeyPatch, **args: Any) -> FakeSystemd:
    """A call that converges (it keeps no receipt), then one that changes nothing (it does)."""
    systemd = FakeSystemd()
    done = run(monkeypatch, {**node, "receipt_digest": DIGEST, **args}, systemd)
    assert not done.failed, done.msg
    assert done.result["changed"] is True and done.result["receipt"] == "none"
    again = run(monkeypatch, {**node, "receipt_digest": DIGEST, **args}, systemd)
    assert not again.failed, again.msg
    assert again.result["changed"] is False and again.result["receipt"] == "written"
    return systemd


def answer(node: dict[str, Any], systemd: FakeSystemd, **args: Any) -> dict[str, Any] | None:
    entry = reading(node, systemd)
    if receipts.unchanged(entry, DIGEST, NOW_S) is not None:
        return None
    return service_options.receipt_answer(action_params({**node, **args}), entry["receipt"])


def test_the_receipt_answers_as_the_module_would_on_a_converged_node(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any]
) -> None:
    inputs = inputs_of("h100-sxm-nvswitch", base_port=9000)
    systemd = converge(node, monkeypatch, plan_inputs=inputs)
    said = answer(node, systemd, plan_inputs=inputs)
    assert said is not None
    assert oct((Path(node["root"]) / RECEIPT).stat().st_mode & 0o777) == "0o600"
    again = run(
        monkeypatch,
        {**node, "plan_inputs": inputs, "receipt_digest": DIGEST},
        FakeSystemd(units=systemd.units),
    )
    assert not again.failed, again.msg
    assert again.result["changed"] is False
    # The module's own result, every key; only where the answer came from differs.
    assert said.pop("receipt") == "stands" and again.result.pop("receipt") == "written"
    if not again.result["warnings"]:
        del again.result["warnings"]
    # How long each call waited for readiness is that call's measurement.
    for result in (said, again.result):
        for ready in result["readiness"].values():
            assert isinstance(ready.pop("waited_s"), float)
    assert said == again.result
    for name, ready in said["readiness"].items():
        assert ready["ready"] is True
        assert ready["main_pid"] == int(systemd.units[f"lingbot@{name}.service"]["MainPID"])


def edit(path: Path) -> None:
    path.write_text(path.read_text() + "# edited\n")


MOVES = {
    "config.yaml edited": lambda root, systemd: edit(root / "etc/lingbot/main/config.yaml"),
    "a secrets file appearing": lambda root, systemd: (
        root / "etc/lingbot/main/secrets.env"
    ).write_text("LINGBOT_API_KEY=x\n"),
    "the drop-in edited": lambda root, systemd: edit(
        root / "etc/systemd/system/lingbot@main.service.d/10-lingbot-fleet-plan.conf"
    ),
    "plan.json edited": lambda root, systemd: edit(root / "etc/lingbot/plan.json"),
    "the warm-up program replaced": lambda root, systemd: edit(
        root / layout.WARM_UP_PROGRAM.lstrip("/")
    ),
    "the model's config.json changed": lambda root, systemd: (
        root / "srv/model/config.json"
    ).write_text('{"num_hidden_layers": 40}\n'),
    "the account files changed": lambda root, systemd: edit(root / "etc/passwd"),
    "numactl replaced": lambda root, systemd: edit(
        next(path for path in root.rglob("numactl") if path.is_file())
    ),
    "a new instance directory": lambda root, systemd: (root / "etc/lingbot/other").mkdir(),
    "an enable link of another instance": lambda root, systemd: (
        root / "etc/systemd/system/multi-user.target.wants/lingbot@other.service"
    ).symlink_to("/etc/systemd/system/lingbot@.service"),
    "the instance restarted (a crash, say)": lambda root, systemd: systemd.apply(
        ["systemctl", "restart", "lingbot@main.service"]
    ),
    "the instance stopped": lambda root, systemd: systemd.units["lingbot@main.service"].update(
        ActiveState="inactive"
    ),
    "the instance disabled": lambda root, systemd: systemd.units["lingbot@main.service"].update(
        UnitFileState="disabled"
    ),
}


def test_an_instance_that_stops_answering_takes_the_receipt_down(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any]
) -> None:
    inputs = inputs_of("h100-sxm-nvswitch")
    systemd = converge(node, monkeypatch, plan_inputs=inputs)
    entry = reading(node, systemd, answering=False)
    assert entry["receipt"]["readings"] == {
        ANSWERS_READING: {"127.0.0.1:8000": True, "127.0.0.1:8001": True}
    }
    assert receipts.unchanged(entry, DIGEST, NOW_S) == (
        f"the node's {ANSWERS_READING} changed since the receipt"
    )


@pytest.mark.parametrize("move", sorted(MOVES))
def test_anything_the_module_decides_from_moving_takes_the_receipt_down(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], move: str
) -> None:
    inputs = inputs_of("a6000-phb")
    systemd = converge(node, monkeypatch, plan_inputs=inputs)
    assert answer(node, systemd, plan_inputs=inputs) is not None
    MOVES[move](Path(node["root"]), systemd)
    assert receipts.unchanged(reading(node, systemd), DIGEST, NOW_S) is not None
    assert answer(node, systemd, plan_inputs=inputs) is None


def test_a_new_plan_from_new_inputs_is_not_answered_from_the_receipt(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any]
) -> None:
    inputs = inputs_of("a6000-phb")
    systemd = converge(node, monkeypatch, plan_inputs=inputs)
    # Peer access gone from the pair in use (well below the 5% band): a new plan.
    slow = copy.deepcopy(inputs)
    for pair in slow["probe"]["pairs"]:
        pair["p2p_enabled"]["unidirectional_gbytes_per_s"] = 8.0
    assert answer(node, systemd, plan_inputs=slow) is None
    # A policy the plan reads.
    assert answer(node, systemd, plan_inputs=inputs_of("a6000-phb", base_port=9100)) is None
    # The same figures from a newer probe: the module keeps plan.json, the receipt stands.
    newer = copy.deepcopy(inputs)
    newer["probe"]["timestamp"] = "2026-02-01T00:00:00Z"
    said = answer(node, systemd, plan_inputs=newer)
    assert said is not None
    # It answers with the plan the module makes now (the newer probe's stamp), as a call would.
    real = run(
        monkeypatch,
        {**node, "plan_inputs": newer, "receipt_digest": DIGEST},
        FakeSystemd(units=systemd.units),
    )
    assert real.result["changed"] is False
    for key in ("plan", "model_layers_source", "ansible_facts"):
        assert said[key] == real.result[key], key
    assert answer(node, systemd, plan_inputs=inputs) is not None


def test_a_plan_the_module_would_refuse_is_not_answered_from_the_receipt(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any]
) -> None:
    inputs = inputs_of("a6000-phb")
    systemd = converge(node, monkeypatch, plan_inputs=inputs)
    # config.json says 32 layers; a policy saying 40 is refused by the module.
    assert answer(node, systemd, plan_inputs=inputs_of("a6000-phb", model_num_layers=40)) is None

    # An option that decides the files (another listen address) moves the digest the
    # action computes; the plan's inputs and where files are saved do not.
    def digest(**extra: Any) -> str:
        params = action_params({**node, "plan_inputs": inputs, **extra})
        options = digest_options(
            service_options.ARGUMENT_SPEC, params, service_options.DIGEST_VIEWS
        )
        return receipt_digest(options, None)

    assert digest(listen_host="::1") != digest()
    assert digest(journal_lines=5) != digest()
    assert digest(plan_inputs=inputs_of("h100-sxm-nvswitch"), generation_run_id="run-9") == (
        digest()
    )
    # The API key (no_log) never enters a digest; config.yaml, which holds its effect, is
    # watched by the receipt.
    assert digest(api_key="guessable") == digest(api_key="another") == digest()


def test_a_failed_readiness_check_removes_the_receipt(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any]
) -> None:
    inputs = inputs_of("a6000-phb")
    systemd = converge(node, monkeypatch, plan_inputs=inputs)
    receipt = Path(node["root"]) / RECEIPT
    plan = json.loads((Path(node["root"]) / layout.PLAN_PATH.lstrip("/")).read_text())
    # A readiness check that passes (the rollout's health gate) keeps it.
    checked = run(monkeypatch, {**node, "plan": plan, "readiness_only": True}, systemd)
    assert not checked.failed, checked.msg
    assert receipt.exists()
    monkeypatch.setattr(SERVICE_CODE, "readiness_once", lambda *_: ("failed", "it hangs"))
    failed = run(monkeypatch, {**node, "plan": plan, "readiness_only": True}, systemd)
    assert failed.failed
    assert not receipt.exists()
    # The next converging call finds it ready again and writes it again.
    monkeypatch.setattr(SERVICE_CODE, "readiness_once", lambda *_: ("ready", ""))
    done = run(monkeypatch, {**node, "plan_inputs": inputs, "receipt_digest": DIGEST}, systemd)
    assert done.result["receipt"] == "written"


def test_a_converging_call_that_fails_leaves_no_receipt(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any]
) -> None:
    inputs = inputs_of("a6000-phb")
    systemd = converge(node, monkeypatch, plan_inputs=inputs)
    receipt = Path(node["root"]) / RECEIPT
    bad = {**node, "plan_inputs": inputs, "config_overrides": {"colour": 1}}
    done = run(monkeypatch, {**bad, "receipt_digest": DIGEST}, systemd)
    assert done.failed and "colour" in done.msg
    assert not receipt.exists()
    # Check mode touches no receipt.
    converge(node, monkeypatch, plan_inputs=inputs)
    checked = run(
        monkeypatch,
        {**node, "plan_inputs": inputs, "receipt_digest": DIGEST},
        systemd,
        check_mode=True,
    )
    assert not checked.failed and "receipt" not in checked.result
    assert receipt.exists()


def test_without_a_digest_the_module_writes_no_receipt(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any]
) -> None:
    done = run(monkeypatch, {**node, "plan_inputs": inputs_of("a6000-phb")}, FakeSystemd())
    assert not done.failed, done.msg
    assert "receipt" not in done.result
    assert not (Path(node["root"]) / RECEIPT).exists()
