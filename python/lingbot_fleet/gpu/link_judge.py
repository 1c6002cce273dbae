"""gpu_checks' verdict: the link checks, then the fleet's severity per finding code, then
``fail_on``.

``linkcheck.judge_links`` finds and judges; this applies ``finding_severity`` (the role's
``lingbot_fleet_finding_severity``, node.findings.override_severities) to every finding
before anything decides with a severity: the failure at ``fail_on``, the planner (the fact
``lingbot_link_findings``) and the rollout gate (the registered findings). One function
for the gpu_link_check module (on a node) and its action plugin (on the controller).
Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..node.findings import (
    Finding,
    at_or_above,
    count_by_severity,
    override_severities,
    severity_label,
)
from .linkcheck import JUDGE_ARGUMENT_SPEC, judge_options

# The options of gpu_link_check (module and action plugin): the judgement's, and the
# fleet's severities.
LINK_CHECK_ARGUMENT_SPEC = {
    **JUDGE_ARGUMENT_SPEC,
    "finding_severity": {"type": "dict", "default": {}},
}


def judge_link_check(params: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The gpu_checks result and the failure message (None when the node passes), for the
    options of LINK_CHECK_ARGUMENT_SPEC, validated. ValueError names a bad option."""
    judged, _unused = judge_options({**params, "fail_on": "never"})
    findings = override_severities(
        [Finding(**finding) for finding in judged["findings"]],
        params["finding_severity"],
        "finding_severity",
    )
    rows = [finding.to_dict() for finding in findings]
    judged.update(
        findings=rows,
        counts=count_by_severity(findings),
        summary=[f"{severity_label(f)} {f['code']} {f['subject']}: {f['message']}" for f in rows],
        ansible_facts={**judged["ansible_facts"], "lingbot_link_findings": rows},
    )
    fail_on = params["fail_on"]
    failing = [] if fail_on == "never" else at_or_above(findings, fail_on)
    if not failing:
        return judged, None
    named = "; ".join(f"{f.code} {f.subject}: {f.message}" for f in failing)
    return judged, f"{len(failing)} finding(s) at or above {fail_on}: {named}"
