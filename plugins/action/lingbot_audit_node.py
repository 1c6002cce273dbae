"""Action plugin lingbot_audit_node: one module call on the node, the rest on the controller.

Runs the lingbot_audit_node module (roles/fleet_audit/library) once, then, in the same
worker on the controller, completes what it read (the boot files parsed, the generations
checked: lingbot_fleet.audit.node_document) and evaluates it: link and NUMA findings, the plan the
node would get, drift of the deployed LingBot configs, the pending reboot (see
lingbot_fleet.audit.evaluate). Policy comes from the host's variables, with the roles'
defaults for what the inventory leaves unset, so the audit judges by the same policy as
provisioning, the fleet's severity per finding code (lingbot_fleet_finding_severity)
included. Changes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ansible.plugins.action import ActionBase

from lingbot_fleet.audit.evaluate import AuditPolicy, evaluate_node
from lingbot_fleet.audit.node_document import complete_node
from lingbot_fleet.boot.cmdline import PolicyError
from lingbot_fleet.controller.policy import check_policy, load_role_specs
from lingbot_fleet.controller.role_dirs import RolesNotFoundError, roles_dir
from lingbot_fleet.node.findings import FINDING_SEVERITY_VARIABLE
from lingbot_fleet.plan import PlanInputError

# Read once per host: libyaml's loader, when PyYAML has it, is ten times faster.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
POLICY_ROLES = ("gpu_checks", "kernel_cmdline", "lingbot_service")
ACTION_ONLY_ARGS = ("fresh_probe",)
# The roles whose variables this task checks against their argument specs.
SPEC_ROLES = ("fleet_audit", *POLICY_ROLES)


def role_defaults(roles_dir: Path) -> dict[str, Any]:
    """Every policy role's defaults/main.yml merged (roles not in the tree are skipped)."""
    merged: dict[str, Any] = {}
    for role in POLICY_ROLES:
        path = roles_dir / role / "defaults" / "main.yml"
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            merged.update(yaml.load(text, Loader=_SAFE_LOADER) or {})
    return merged


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _policy_vars(self, task_vars: dict[str, Any], roles: Path) -> dict[str, Any]:
        values = role_defaults(roles)
        prefixes = tuple(f"{role}_" for role in POLICY_ROLES)
        for key, value in task_vars.items():
            if key.startswith(prefixes) or key == FINDING_SEVERITY_VARIABLE:
                values[key] = self._templar.template(value)
        return values

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        # The role's own argument check is skipped by playbooks/audit.yml: the variables of
        # the audit and of the policy it judges with are checked here, in this one task.
        try:
            roles = roles_dir("fleet_audit", self._loader, self._task.collections)
        except RolesNotFoundError as error:
            result.update(failed=True, changed=False, msg=str(error))
            return result
        specs = load_role_specs(roles)
        problems = check_policy(
            task_vars, {role: specs[role] for role in SPEC_ROLES if role in specs}
        )
        if problems:
            result.update(
                failed=True,
                changed=False,
                problems=[str(problem) for problem in problems],
                msg="invalid policy variables:\n- " + "\n- ".join(str(p) for p in problems),
            )
            return result
        module_args = {k: v for k, v in self._task.args.items() if k not in ACTION_ONLY_ARGS}
        fresh_probe = self._task.args.get("fresh_probe") or None
        node_result = self._execute_module(
            module_name="lingbot_audit_node", module_args=module_args, task_vars=task_vars
        )
        if node_result.get("failed") or "node" not in node_result:
            return {**result, **node_result, "failed": True}
        try:
            policy = AuditPolicy.from_vars(self._policy_vars(task_vars, roles))
            record = evaluate_node(complete_node(node_result["node"]), policy, fresh_probe)
        except (PolicyError, PlanInputError, ValueError, TypeError) as error:
            result.update(
                failed=True,
                msg=f"the audit policy of this host is invalid: {error}; fix the inventory "
                "variable it names",
            )
            return result
        counts: dict[str, int] = {}
        for finding in record["findings"]:
            counts[finding["severity"]] = counts.get(finding["severity"], 0) + 1
        result.update(
            changed=False,
            audit=record,
            msg=", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no findings",
        )
        return result
