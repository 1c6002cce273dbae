"""The options of the lingbot_service module, and what its action checks before it answers.

One owner for both sides. The module validates its options with ARGUMENT_SPEC and, after a
call that planned on the node (``plan_inputs``), changed nothing and saw every instance
ready, keeps its receipt (``lingbot_fleet.node.receipts.keep``): what its NodeChanges read,
wrote, listed and ran systemctl on, its own result, the reading each later run takes
(``service_reading``: every instance answering ``GET /metrics``), and ``data``: plan.json as
it is now and what the model's config.json held.

The action plugin of the same name gathers the planner's inputs on the controller, as
always. Those inputs carry readings of the node (link speeds, a newer probe's timestamp),
so they enter the receipt's digest through the module's own reduction of them: the plan
they make. When the receipt stands (same digest of the other options and of the code,
nothing moved), the action plans with the very function the module plans with
(``plan.node.plan_with``: the inputs, the plan in force and the layers, both from the
receipt); when that plan is the one in force (``lingbot_layout.same_plan``), it answers with
the module's recorded result (``receipt_answer``). A new plan, any move, a refusal: the
module runs. docs/converged-runs.md is the contract.

Stdlib only: runs on nodes too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..node.nodefiles import GENERATION_ARGUMENT_SPEC
from ..node.receipts import RECEIPT_ARGUMENT_SPEC, replay
from ..plan import PlanInputError
from ..plan.node import NodePlan, decide_layers, plan_with
from . import layout
from .service_reading import ANSWERS_READING, address

RECEIPT_ROLE = "lingbot_service"
PLAN_INPUTS_SPEC = {
    "facts": {"type": "dict", "required": True},
    "probe": {"type": "dict"},
    "policy": {"type": "dict", "default": {}},
    "findings": {"type": "list", "elements": "dict", "default": []},
}
ARGUMENT_SPEC: dict[str, Any] = {
    "plan": {"type": "dict"},
    "plan_inputs": {"type": "dict", "options": PLAN_INPUTS_SPEC},
    "fail_without_instances": {"type": "bool", "default": True},
    "readiness_only": {"type": "bool", "default": False},
    "python": {"type": "path", "default": "/usr/bin/python3"},
    "entry": {"type": "list", "elements": "str", "default": ["-m", "lingbot"]},
    "pythonpath": {"type": "str", "default": ""},
    "model_path": {"type": "path", "default": "/var/lib/lingbot/model"},
    "numactl": {"type": "path", "default": "/usr/bin/numactl"},
    "listen_host": {"type": "str", "default": layout.DEFAULT_HOST},
    "extra_args": {"type": "list", "elements": "str", "default": []},
    "user": {"type": "str", "default": "lingbot"},
    "group": {"type": "str", "default": "lingbot"},
    "device_groups": {"type": "list", "elements": "str", "default": ["video"]},
    # raw: a mapping or a list is refused by values.api_key, not turned into its text.
    "api_key": {"type": "raw", "default": "", "no_log": True},
    "config_overrides": {"type": "dict", "default": {}},
    "hardening": {"type": "bool", "default": True},
    "restart_delay_s": {"type": "int", "default": 5},
    "start_limit_burst": {"type": "int", "default": 5},
    "start_limit_interval_s": {"type": "int", "default": 300},
    "verify_units": {"type": "bool", "default": True},
    "remove_stale_instances": {"type": "bool", "default": True},
    "health_timeout_s": {"type": "int", "default": 60},
    "health_host": {"type": "str", "default": "127.0.0.1"},
    "warm_up": {"type": "bool", "default": True},
    "journal_lines": {"type": "int", "default": 30},
    "header": {"type": "str", "default": layout.MANAGED_HEADER},
    "root": {"type": "path", "default": "/"},
    **GENERATION_ARGUMENT_SPEC,
    **RECEIPT_ARGUMENT_SPEC,
}
# The options that carry node readings: the plan's inputs enter the digest as the marker
# below and are checked through the plan they make (``receipt_answer``); a plan passed in is
# never answered from a receipt.
PLAN_CHECKED = "checked through the plan they make (service_options.receipt_answer)"
DIGEST_VIEWS = {"plan_inputs": lambda _params: PLAN_CHECKED, "plan": lambda _params: None}
# The options an action validates on the controller beside the inputs it gathered itself.
DECISION_SPEC = {
    key: spec for key, spec in ARGUMENT_SPEC.items() if key not in ("plan", "plan_inputs")
}
# The account database the module decides the service account from.
ACCOUNT_FILES = ("/etc/passwd", "/etc/group")


def answers_reading(
    params: Mapping[str, Any], readiness: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The reading each later run takes (``service_reading``): every instance answering."""
    addresses = {
        address(params["health_host"], ready["port"]): True for ready in readiness.values()
    }
    return {ANSWERS_READING: addresses}


def receipt_data(plan_text: str, config_layers: Sequence[Any]) -> dict[str, Any]:
    return {"plan_text": plan_text, "config_layers": list(config_layers)}


def plan_from_receipt(params: Mapping[str, Any], receipt: Mapping[str, Any]) -> NodePlan | None:
    """The plan the module would make now, from the action's inputs and what the receipt
    says the node holds; None when the receipt's data cannot say (the module decides)."""
    data = receipt.get("data") or {}
    plan_text, config_layers = data.get("plan_text"), data.get("config_layers")
    if not isinstance(plan_text, str) or not isinstance(config_layers, list):
        return None
    if len(config_layers) != 2 or not isinstance(config_layers[1], str | None):
        return None
    try:
        previous = json.loads(plan_text)
    except ValueError:
        return None
    inputs = params["plan_inputs"]
    configured = (inputs.get("policy") or {}).get("model_num_layers")
    layers = decide_layers(params["model_path"], config_layers[0], config_layers[1], configured)
    try:
        return plan_with(inputs, previous if isinstance(previous, dict) else None, layers)
    except PlanInputError:
        return None


def plan_fields(planned: NodePlan | None) -> dict:
    """What the module's result says of the plan made on the node (nothing for a plan
    passed in)."""
    if planned is None:
        return {}
    return {"plan": planned.plan, "model_layers_source": planned.model_layers_source}


def with_plan_fact(result: dict, planned: NodePlan | None) -> dict:
    """``result`` with the plan made and the fact lingbot_plan (beside the others)."""
    if planned is None:
        return result
    facts = {**result.get("ansible_facts", {}), "lingbot_plan": planned.plan}
    return {**result, **plan_fields(planned), "ansible_facts": facts}


def receipt_answer(params: Mapping[str, Any], receipt: Mapping[str, Any]) -> dict[str, Any] | None:
    """The module's recorded result, when the plan made from the receipt is the plan in
    force and the module would not refuse it; None otherwise (the module runs). The plan
    the result carries is the one made now, by the module's own ``with_plan_fact``: the
    same figures from a newer probe keep plan.json but carry the newer probe's stamp."""
    planned = plan_from_receipt(params, receipt)
    if planned is None or planned.refusal(params["fail_without_instances"]) is not None:
        return None
    if not layout.same_plan(receipt["data"]["plan_text"], planned.plan):
        return None
    answer = replay(receipt)
    if answer is None:
        return None
    if planned.warnings:
        answer["warnings"] = list(planned.warnings)
    return with_plan_fact(answer, planned)
