"""A finding: one thing a check found about a node, with its evidence and its fix.

Stdlib-only: checks run on nodes (through role modules) and on the controller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SEVERITIES: tuple[str, ...] = ("info", "warning", "error", "critical")


def severity_rank(severity: str) -> int:
    """0 for info up to 3 for critical; ValueError naming the choices for anything else."""
    try:
        return SEVERITIES.index(severity)
    except ValueError:
        raise ValueError(
            f"unknown severity {severity!r}; use one of: {', '.join(SEVERITIES)}"
        ) from None


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
        if not self.code or not self.code.replace("_", "").isalnum() or not self.code.isupper():
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
