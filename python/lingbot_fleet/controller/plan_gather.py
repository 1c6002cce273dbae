"""The planner's inputs for one host, gathered on the controller from the host's variables.

What the lingbot_service action passes to its module (option ``plan_inputs``), which plans
on the node with ``lingbot_fleet.plan.node``: the GPU facts (``ansible_facts.lingbot_gpu``,
role gpu_facts), the probe when there is one (``ansible_facts.lingbot_probe``, role
p2p_probe; without it the plan is provisional), the link findings of gpu_checks
(``ansible_facts.lingbot_link_findings``, as the audit passes its own) and the policy: the
``lingbot_service_*`` variables named in ``lingbot_fleet.plan.POLICY_KEYS``, converted to
the types the role's argument spec declares (extra-vars arrive as strings).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..plan import POLICY_KEYS
from .ansible_data import plain_data
from .policy import load_role_specs, typed_role_variables

ROLE = "lingbot_service"
ROLE_PREFIX = f"{ROLE}_"


class PlanGatherError(ValueError):
    """The host's variables cannot be planned with; the message names what and the fix."""


def gather_plan_inputs(
    task_vars: Mapping[str, Any], template: Callable[[Any], Any], roles_dir: Path
) -> dict[str, Any]:
    """``{facts, probe, policy, findings}`` for the host of ``task_vars``.

    ``template`` renders one variable's value (the action's templar); only the variables
    used here are rendered.
    """

    def rendered(value: Any) -> Any:
        return None if value is None else plain_data(template(value))

    facts = task_vars.get("ansible_facts") or {}
    gpu_facts = rendered(facts.get("lingbot_gpu"))
    if gpu_facts is None:
        raise PlanGatherError(
            "no GPU facts for this host (ansible_facts.lingbot_gpu); run the gpu_facts role "
            "before planning"
        )
    raw = {
        name: rendered(task_vars[name])
        for name in (f"{ROLE_PREFIX}{key}" for key in POLICY_KEYS)
        if name in task_vars
    }
    try:
        typed = typed_role_variables(load_role_specs(roles_dir).get(ROLE, {}), raw)
    except ValueError as error:
        raise PlanGatherError(f"cannot plan LingBot for this host: {error}") from error
    return {
        "facts": gpu_facts,
        "probe": rendered(facts.get("lingbot_probe")),
        "policy": {name[len(ROLE_PREFIX) :]: value for name, value in typed.items()},
        "findings": rendered(facts.get("lingbot_link_findings")) or [],
    }
