"""fleet.json: the audit's source of truth (schema_version 1), and the exit status.

Every inventory host of the audit has exactly one entry in `nodes`: audited (`ok` or
`findings`), `unreachable`, or `failed` (the module failed, or no result came back).
docs/audit.md describes every key.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..node.findings import SEVERITIES, severity_rank

FLEET_SCHEMA_VERSION = 1

EXIT_COMPLIANT = 0
EXIT_FINDINGS = 1
EXIT_NODES_FAILED = 2
EXIT_AUDIT_FAILED = 3

STATUS_OK = "ok"
STATUS_FINDINGS = "findings"
STATUS_UNREACHABLE = "unreachable"
STATUS_FAILED = "failed"
STATUSES = (STATUS_OK, STATUS_FINDINGS, STATUS_UNREACHABLE, STATUS_FAILED)


@dataclass
class AuditOutcome:
    """What the run produced, host by host (filled from the runner's events)."""

    hosts: list[str]
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def node_status(record: Mapping[str, Any], threshold: str) -> str:
    limit = severity_rank(threshold)
    worst = [severity_rank(f["severity"]) for f in record.get("findings") or []]
    return STATUS_FINDINGS if worst and max(worst) >= limit else STATUS_OK


def node_entry(host: str, outcome: AuditOutcome, threshold: str) -> dict[str, Any]:
    if host in outcome.unreachable:
        return {"host": host, "status": STATUS_UNREACHABLE, "reason": outcome.unreachable[host]}
    if host in outcome.failed:
        return {"host": host, "status": STATUS_FAILED, "reason": outcome.failed[host]}
    if host not in outcome.records:
        return {
            "host": host,
            "status": STATUS_FAILED,
            "reason": "no result: the audit ended before this host reported",
        }
    record = outcome.records[host]
    return {"host": host, "status": node_status(record, threshold), "reason": None, **record}


def findings_by_code(nodes: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per finding code: its worst severity, the affected nodes and the count."""
    rows: dict[str, dict[str, Any]] = {}
    for node in nodes:
        for finding in node.get("findings") or []:
            row = rows.setdefault(
                finding["code"], {"code": finding["code"], "severity": "info", "count": 0}
            )
            row["count"] += 1
            if severity_rank(finding["severity"]) > severity_rank(row["severity"]):
                row["severity"] = finding["severity"]
            row.setdefault("nodes", [])
            if node["host"] not in row["nodes"]:
                row["nodes"].append(node["host"])
    return sorted(rows.values(), key=lambda r: (-severity_rank(r["severity"]), r["code"]))


def driver_versions(nodes: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The NVIDIA driver versions of the fleet, the fleet's own first: one row per version (null:
    the node's facts do not say), with its nodes; ``differs`` marks every version but the
    one most nodes run (on a tie, the newest), so the nodes out of step are named."""
    rows: dict[str | None, list[str]] = {}
    for node in nodes:
        facts = node.get("facts")
        if node.get("status") in (STATUS_UNREACHABLE, STATUS_FAILED) or not facts:
            continue
        rows.setdefault(facts.get("driver_version"), []).append(node["host"])
    known = [version for version in rows if version is not None]
    fleet_version = max(known, key=lambda v: (len(rows[v]), _version_key(v)), default=None)
    # The fleet's version first, then by nodes, newest first; unknown last.
    ordered = sorted(known, key=_version_key, reverse=True) + ([None] if None in rows else [])
    ordered.sort(key=lambda v: (v != fleet_version, v is None, -len(rows[v])))
    return [
        {
            "version": version,
            "count": len(rows[version]),
            "nodes": sorted(rows[version]),
            "differs": version != fleet_version,
        }
        for version in ordered
    ]


def _version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(part)) if part.isdecimal() else (1, part) for part in version.split("."))


def summarize(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    by_severity = dict.fromkeys(SEVERITIES, 0)
    for node in nodes:
        for finding in node.get("findings") or []:
            by_severity[finding["severity"]] += 1
    return {
        "nodes": len(nodes),
        **{status: sum(1 for n in nodes if n["status"] == status) for status in STATUSES},
        "findings_by_severity": by_severity,
        "pending_reboot": sum(1 for n in nodes if n.get("pending_reboot")),
        "drifted": sum(1 for n in nodes if (n.get("drift") or {}).get("drifted")),
        "gpus": sum(len((n.get("facts") or {}).get("gpus") or []) for n in nodes),
    }


def build_fleet(
    outcome: AuditOutcome,
    *,
    inventory: str,
    limit: str | None,
    threshold: str,
    fresh_probe: bool = False,
    duration_s: float | None = None,
    generated_at: str | None = None,
) -> dict[str, Any]:
    severity_rank(threshold)
    nodes = [node_entry(host, outcome, threshold) for host in sorted(outcome.hosts)]
    return {
        "schema_version": FLEET_SCHEMA_VERSION,
        "generated_at": generated_at
        or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "inventory": inventory,
        "limit": limit,
        "severity_threshold": threshold,
        "fresh_probe": fresh_probe,
        "duration_s": None if duration_s is None else round(duration_s, 2),
        "summary": summarize(nodes),
        "findings_by_code": findings_by_code(nodes),
        "driver_versions": driver_versions(nodes),
        "nodes": nodes,
    }


def exit_status(fleet: Mapping[str, Any]) -> int:
    """2 when a node is unreachable or failed, else 1 when a node has findings, else 0."""
    summary = fleet["summary"]
    if summary[STATUS_UNREACHABLE] or summary[STATUS_FAILED]:
        return EXIT_NODES_FAILED
    if summary[STATUS_FINDINGS]:
        return EXIT_FINDINGS
    return EXIT_COMPLIANT
