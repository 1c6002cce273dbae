"""The options of the lingbot_service module, and what its receipt keeps and answers.

One owner for both sides. The module validates its options with ARGUMENT_SPEC and, after a
call that planned on the node (``plan_inputs``), converged and saw every instance ready,
writes the receipt (``lingbot_fleet.receipts``):

- ``paths``: every file and directory it manages (``managed_paths``), the model's
  config.json, numactl, and /etc/passwd and /etc/group (the service account);
- ``listings``: /etc/lingbot, the unit directory and its ``*.wants`` directories, where a
  new or stale instance would show;
- ``units``: each instance active and enabled, with the main PID and invocation id it had
  when it answered the readiness check, so a restart since, a crash included, moves it;
- ``readings``: every instance answering ``GET /metrics`` (``service_reading``), which
  gpu_facts reads again each run: a hung or failing instance moves it;
- ``data``: plan.json as it is now and what the model's config.json held.

The action plugin of the same name gathers the planner's inputs on the controller, as
always. When the receipt stands (same digest of options and code, nothing moved), it plans
there with the very function the module plans with (``plan.node.plan_with``: the inputs,
the plan in force and the layers, both from the receipt); when that plan is the one in
force (``lingbot_layout.same_plan``), every file the module would write is the one it left
and every instance is the process it saw ready, still answering, so it answers as a call
changing nothing would, without a connection. A new plan, any move, a refusal: the module runs.

Stdlib only: runs on nodes too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from . import lingbot_layout as layout
from .nodefiles import GENERATION_ARGUMENT_SPEC
from .plan import PlanInputError
from .plan.node import NodePlan, decide_layers, plan_with
from .receipts import RECEIPT_ARGUMENT_SPEC
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
# Options that decide nothing the node holds: the plan's inputs (the action plans from them
# afresh), where files are saved, how much journal a failure shows.
NOT_RECEIPT_OPTIONS = frozenset(
    {
        "plan",
        "plan_inputs",
        "readiness_only",
        "journal_lines",
        "receipt_digest",
        *GENERATION_ARGUMENT_SPEC,
    }
)
# The options an action validates on the controller beside the inputs it gathered itself.
DECISION_SPEC = {
    key: spec for key, spec in ARGUMENT_SPEC.items() if key not in ("plan", "plan_inputs")
}
ACCOUNT_FILES = ("/etc/passwd", "/etc/group")
# What each instance must still be for the receipt to stand; MainPID and InvocationID are
# added with the values the instance had when it was seen ready.
UNIT_REQUIRED = {"LoadState": "loaded", "UnitFileState": "enabled", "ActiveState": "active"}


def receipt_options(params: Mapping[str, Any]) -> dict[str, Any]:
    return {key: params.get(key) for key in ARGUMENT_SPEC if key not in NOT_RECEIPT_OPTIONS}


def managed_paths(params: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    """Every path the module writes, or keeps absent, for these instances, and what else it
    decides from: the model's config.json, numactl, the account files."""
    paths = [
        layout.CONFIG_DIR,
        layout.PLAN_PATH,
        layout.template_path(),
        os.path.dirname(layout.WARM_UP_PROGRAM),
        layout.WARM_UP_PROGRAM,
        os.path.join(params["model_path"], "config.json"),
        params["numactl"],
        *ACCOUNT_FILES,
    ]
    for name in names:
        paths += [
            layout.instance_dir(name),
            layout.marker_path(name),
            layout.config_path(name),
            layout.secrets_path(name),
            layout.dropin_path(name),
        ]
    return paths


def listed_dirs(root: str) -> list[str]:
    """Where a new or a stale instance shows (``lingbot_layout.present_instances``)."""
    unit_root = layout.on_root(root, layout.UNIT_DIR)
    try:
        wants = sorted(name for name in os.listdir(unit_root) if name.endswith(".wants"))
    except OSError:
        wants = []
    return [layout.CONFIG_DIR, layout.UNIT_DIR, *(f"{layout.UNIT_DIR}/{name}" for name in wants)]


def unit_requirements(states: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """unit -> the properties a receipt requires, from each instance's state when it was
    seen ready (``states``: instance name -> systemctl show properties)."""
    return {
        layout.unit_name(name): {
            **UNIT_REQUIRED,
            "MainPID": state.get("MainPID", ""),
            "InvocationID": state.get("InvocationID", ""),
        }
        for name, state in states.items()
    }


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


def receipt_answer(
    params: Mapping[str, Any], receipt: Mapping[str, Any], diff: bool
) -> dict[str, Any] | None:
    """The result of a call that changes nothing, when the plan made from the receipt is
    the plan in force; None otherwise (the module runs)."""
    planned = plan_from_receipt(params, receipt)
    if planned is None or planned.refusal(params["fail_without_instances"]) is not None:
        return None
    plan = planned.plan
    names = [instance["name"] for instance in plan["instances"]]
    units = receipt.get("units") or {}
    if not names or sorted(units) != sorted(layout.unit_name(name) for name in names):
        return None
    if not layout.same_plan(receipt["data"]["plan_text"], plan):
        return None
    readiness = {
        instance["name"]: {
            "ready": True,
            "port": int(instance["port"]),
            "main_pid": int(units[layout.unit_name(instance["name"])].get("MainPID") or 0),
            "since": "verified ready by an earlier run; the same process since (receipt)",
        }
        for instance in plan["instances"]
    }
    result: dict[str, Any] = {
        "changed": False,
        "actions": [],
        "changed_paths": [],
        "instances": names,
        "files": [],
        "removed_instances": [],
        "daemon_reload": False,
        "readiness": readiness,
        "restarted": [],
        "started": [],
        "enabled": [],
        "plan": plan,
        "model_layers_source": planned.model_layers_source,
        "ansible_facts": {"lingbot_plan": plan},
        "receipt": "stands",
        "msg": "nothing changed since the module saw every instance ready (receipt); no call",
    }
    if planned.warnings:
        result["warnings"] = list(planned.warnings)
    if diff:
        result["diff"] = []
    return result
