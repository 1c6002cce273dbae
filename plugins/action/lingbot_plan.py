"""Action plugin: build the LingBot plan for a host, on the controller.

Reads the host's facts (``ansible_facts.lingbot_gpu``, from the gpu_facts role), the probe
result when there is one (``ansible_facts.lingbot_probe``, from the p2p_probe role) and the
planner's policy (the ``lingbot_service_*`` variables named in
``lingbot_fleet.plan.POLICY_KEYS``), builds the plan document (docs/plan.md) and sets it as
the fact ``lingbot_plan``. With ``previous_plan`` (the plan in force, which the
lingbot_plan_inputs module reads on the node) the planner keeps its decisions while the
measurements stay near them; ``model_num_layers`` (the model's layer count, from the same
module) spreads the decoder layers over the GPUs. The plan's own findings (GPUs the policy
keeps idle) become warnings. Every instance's config.yaml is checked with the user's
overrides (``lingbot_service_config_overrides``) merged on top, so a bad override fails
here, before anything is written on the node. No connection to the node.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO / "python") not in sys.path:
    sys.path.insert(0, str(_REPO / "python"))

from lingbot_fleet.ansible_data import plain_data as plain  # noqa: E402
from lingbot_fleet.lingbot_config import ConfigError, build_config  # noqa: E402
from lingbot_fleet.plan import POLICY_KEYS, PlanInputError, build_plan  # noqa: E402
from lingbot_fleet.policy import load_role_specs, typed_role_variables  # noqa: E402

ROLE_PREFIX = "lingbot_service_"
OVERRIDES_VARIABLE = f"{ROLE_PREFIX}config_overrides"


def config_problems(plan: Mapping[str, Any], overrides: Mapping[str, Any]) -> list[str]:
    """Every problem of every instance's config.yaml with the overrides merged on top."""
    problems: list[str] = []
    for instance in plan["instances"]:
        try:
            build_config(
                instance["config"], overrides, instance["peer_access_threshold_gbytes_per_s"]
            )
        except ConfigError as error:
            problems += [f"instance {instance['name']}: {problem}" for problem in error.problems]
    return problems


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def _variable(self, task_vars: Mapping[str, Any], name: str) -> Any:
        return plain(self._templar.template(task_vars[name]))

    def _facts(self, task_vars: Mapping[str, Any], name: str) -> Any:
        facts = task_vars.get("ansible_facts") or {}
        value = facts.get(name)
        return None if value is None else plain(self._templar.template(value))

    def _inputs(
        self, task_vars: Mapping[str, Any]
    ) -> tuple[Any, Any, dict[str, Any], Any, list[Any], Any]:
        args = self._task.args
        facts = plain(args["facts"]) if args.get("facts") else self._facts(task_vars, "lingbot_gpu")
        probe = (
            plain(args["probe"]) if args.get("probe") else self._facts(task_vars, "lingbot_probe")
        )
        raw = {
            f"{ROLE_PREFIX}{key}": self._variable(task_vars, f"{ROLE_PREFIX}{key}")
            for key in POLICY_KEYS
            if f"{ROLE_PREFIX}{key}" in task_vars
        }
        spec = load_role_specs(_REPO / "roles").get("lingbot_service", {})
        typed = typed_role_variables(spec, raw)
        policy = {name[len(ROLE_PREFIX) :]: value for name, value in typed.items()}
        if args.get("model_num_layers") not in (None, ""):
            policy["model_num_layers"] = int(plain(args["model_num_layers"]))
        policy.update(plain(args.get("policy") or {}))
        if "config_overrides" in args:
            overrides = plain(args["config_overrides"])
        elif OVERRIDES_VARIABLE in task_vars:
            overrides = self._variable(task_vars, OVERRIDES_VARIABLE)
        else:
            overrides = {}
        # The link findings of gpu_checks (its action sets them as a fact), as the audit
        # passes its own: the plan is computed one way at deploy time and in the audit.
        findings = (
            plain(args["findings"])
            if "findings" in args
            else self._facts(task_vars, "lingbot_link_findings") or []
        )
        previous_plan = plain(args.get("previous_plan")) if args.get("previous_plan") else None
        return facts, probe, policy, overrides, findings, previous_plan

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        result["changed"] = False
        try:
            facts, probe, policy, overrides, findings, previous_plan = self._inputs(task_vars)
        except ValueError as error:
            result["failed"] = True
            result["msg"] = f"cannot plan LingBot for this host: {error}"
            return result
        if facts is None:
            result["failed"] = True
            result["msg"] = (
                "no GPU facts for this host (ansible_facts.lingbot_gpu); run the gpu_facts "
                "role before planning"
            )
            return result
        if not isinstance(overrides, Mapping):
            result["failed"] = True
            result["msg"] = f"{OVERRIDES_VARIABLE} must be a mapping of config.yaml keys"
            return result
        try:
            plan = build_plan(facts, probe, policy, findings, previous_plan)
        except PlanInputError as error:
            result["failed"] = True
            result["msg"] = f"cannot plan LingBot for this host: {error}"
            return result
        problems = config_problems(plan, overrides)
        result["plan"] = plan
        result["ansible_facts"] = {"lingbot_plan": plan}
        if problems:
            result["failed"] = True
            result["problems"] = problems
            result["msg"] = (
                f"{OVERRIDES_VARIABLE} would make config.yaml invalid (nothing was written):\n- "
                + "\n- ".join(problems)
            )
            return result
        warnings = [
            f"{finding['code']}: {finding['message']}; fix: {finding['fix']}"
            for finding in plan.get("findings") or []
        ]
        if warnings:
            result["warnings"] = warnings
        result["msg"] = plan["summary"]
        return result
