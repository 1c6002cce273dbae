"""A finding: one thing a check found about a node, with its evidence and its fix.

Stdlib-only: checks run on nodes (through role modules) and on the controller.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from .values import ValueRefusedError, kind_of

SEVERITIES: tuple[str, ...] = ("info", "warning", "error", "critical")
# The fleet's severity per finding code, over the one each check gives (docs/audit.md,
# "Overriding a finding's severity"): gpu_checks, the audit and the monitor read it.
FINDING_SEVERITY_VARIABLE = "lingbot_fleet_finding_severity"
# Where an overridden finding keeps the severity its check gave.
SEVERITY_DEFAULT = "severity_default"
_CODE = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*")
_CODE_RULE = (
    "give the code as findings carry it, in UPPER_SNAKE_CASE (e.g. PCIE_WIDTH_BELOW_EXPECTED; "
    "docs/audit.md lists the codes)"
)


def severity_rank(severity: str) -> int:
    """0 for info up to 3 for critical; ValueError naming the choices for anything else."""
    try:
        return SEVERITIES.index(severity)
    except ValueError:
        raise ValueError(
            f"unknown severity {severity!r}; use one of: {', '.join(SEVERITIES)}"
        ) from None


def is_finding_code(text: object) -> bool:
    """Whether ``text`` is shaped as a finding code: UPPER_SNAKE_CASE, starting with a
    letter (PCIE_WIDTH_BELOW_EXPECTED, P2P_DATA_CHECK_FAILED)."""
    return isinstance(text, str) and _CODE.fullmatch(text) is not None


@dataclass(frozen=True)
class Finding:
    """code: stable identifier (e.g. PCIE_WIDTH_BELOW_EXPECTED); subject: what it is about
    (a GPU's bus id, a bridge, the node); evidence: the values the verdict rests on."""

    code: str
    severity: str
    subject: str
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    fix: str = ""

    def __post_init__(self) -> None:
        severity_rank(self.severity)
        if not is_finding_code(self.code):
            raise ValueError(f"finding code {self.code!r} must be UPPER_SNAKE_CASE")

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "subject": self.subject,
            "message": self.message,
            "evidence": dict(self.evidence),
            "fix": self.fix,
        }


def at_or_above(findings: Iterable[Finding], threshold: str) -> list[Finding]:
    """The findings whose severity is `threshold` or worse."""
    limit = severity_rank(threshold)
    return [finding for finding in findings if severity_rank(finding.severity) >= limit]


def count_by_severity(findings: Iterable[Finding]) -> dict[str, int]:
    counts = dict.fromkeys(SEVERITIES, 0)
    for finding in findings:
        counts[finding.severity] += 1
    return counts


def severity_overrides(mapping: object, source: str) -> dict[str, str]:
    """The fleet's severity per finding code from ``mapping`` (code -> severity), checked.

    ValueRefusedError names ``source`` (the variable, option or key the mapping came from),
    the code or severity that is wrong and the fix; the policy play refuses the inventory
    variable with the same message.
    """
    if not isinstance(mapping, Mapping):
        raise ValueRefusedError(
            source,
            f"is {kind_of(mapping)}, not a mapping; give each finding code with the severity "
            "it should have, e.g. {PROBE_MISSING: warning}, or {} for none",
        )
    overrides = {}
    for code, severity in mapping.items():
        if not is_finding_code(code):
            raise ValueRefusedError(source, f"{code!r} is not a finding code; {_CODE_RULE}")
        if severity not in SEVERITIES:
            raise ValueRefusedError(
                f"{source}.{code}",
                f"{severity!r} is not a severity; give one of {', '.join(SEVERITIES)}",
            )
        overrides[code] = severity
    return overrides


AnyFinding = TypeVar("AnyFinding", Finding, dict[str, Any])


def _overridden(finding: AnyFinding, severity: str) -> AnyFinding:
    if isinstance(finding, Finding):
        evidence = {SEVERITY_DEFAULT: finding.severity, **finding.evidence}
        return replace(finding, severity=severity, evidence=evidence)
    evidence = {SEVERITY_DEFAULT: finding["severity"], **(finding.get("evidence") or {})}
    return {**finding, "severity": severity, "evidence": evidence}


def override_severities(
    findings: Iterable[AnyFinding], overrides: object, source: str
) -> list[AnyFinding]:
    """``findings`` (Finding objects or their dicts) with the severity ``overrides``
    (code -> severity, checked by severity_overrides with ``source``) gives their code.

    An overridden finding keeps the severity its check gave in its evidence as
    ``severity_default`` (severity_label shows both), also when it is overridden again.
    The others, and those already at their code's severity, come back as they are.
    """
    chosen = severity_overrides(overrides, source)
    judged = []
    for finding in findings:
        code, severity = (
            (finding.code, finding.severity)
            if isinstance(finding, Finding)
            else (finding["code"], finding["severity"])
        )
        wanted = chosen.get(code, severity)
        judged.append(finding if wanted == severity else _overridden(finding, wanted))
    return judged


def severity_label(finding: Mapping[str, Any]) -> str:
    """A finding's severity as reports show it: "info (default critical)" where the fleet
    overrode the severity its check gave, else the severity alone."""
    evidence = finding.get("evidence")
    default = evidence.get(SEVERITY_DEFAULT) if isinstance(evidence, Mapping) else None
    if default is None or default == finding["severity"]:
        return str(finding["severity"])
    return f"{finding['severity']} (default {default})"
