"""The path planner: facts (+ probe, findings, policy) -> which GPUs LingBot uses, how.

Pure and stdlib-only (it may run on nodes through Ansible module_utils). docs/plan.md
describes the plan document and every policy key.
"""

from __future__ import annotations

from .document import build_plan, explain_plan
from .model import PLAN_SCHEMA_VERSION, PlanInputError
from .policy import POLICY_KEYS, PlanPolicy, policy_from_mapping

__all__ = [
    "PLAN_SCHEMA_VERSION",
    "POLICY_KEYS",
    "PlanInputError",
    "PlanPolicy",
    "build_plan",
    "explain_plan",
    "policy_from_mapping",
]
