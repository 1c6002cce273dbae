"""The rollout's summary: every node's batch, gate outcome and evidence, one line each."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

LOST_TEXT = (
    "LOST during its change: it became unreachable, so it was neither gated nor rolled "
    "back and its state is unknown; bring it back, then roll it back "
    "(playbooks/rollback.yml -e rollback_confirm=true -e rollback_to=<the generation "
    "before this rollout>) or run the rollout on it again: the next run finishes the "
    "generation it left open"
)


def _batch_label(number: int, count: int) -> str:
    return f"batch {number}/{count}" + (" (canary)" if number == 1 else "")


def summarize(
    plan: Mapping[str, Any],
    results: Mapping[str, Mapping[str, Any] | None],
    reached: Collection[str] = (),
) -> dict[str, Any]:
    """Rows (host, batch, outcome, failures, notes, rollback) and printable lines for
    every host of the batch plan; `results` maps hosts to their `rollout_gate_result`,
    `reached` names the hosts whose change play started. A host reached without a gate
    result was lost during its change (it became unreachable: Ansible drops such a host
    from the play, and no rescue runs for it)."""
    batches = plan["batches"]
    rows: list[dict[str, Any]] = []
    stopped_after: int | None = None
    for number, batch in enumerate(batches, 1):
        for host in batch:
            result = results.get(host)
            if result is not None:
                outcome = "passed" if result.get("passed") else "failed"
            elif host in reached:
                outcome = "lost"
            else:
                outcome = "not_reached"
            if outcome in ("failed", "lost") and stopped_after is None:
                stopped_after = number
            rows.append(
                {
                    "host": host,
                    "batch": number,
                    "outcome": outcome,
                    "failures": list((result or {}).get("failures", [])),
                    "notes": list((result or {}).get("notes", [])),
                    "rollback": (result or {}).get("rollback"),
                }
            )
    lines = [_row_line(row, len(batches)) for row in rows]
    lost = [row["host"] for row in rows if row["outcome"] == "lost"]
    if stopped_after is not None:
        failed = any(row["outcome"] == "failed" for row in rows)
        why = "a node failed its gate and was rolled back" if failed else ""
        if lost:
            why += (" and " if why else "") + f"{', '.join(lost)} became unreachable"
        lines.append(
            f"rollout stopped after {_batch_label(stopped_after, len(batches))}: {why}; "
            "the nodes not reached are unchanged"
        )
    elif rows and all(row["outcome"] == "passed" for row in rows):
        lines.append(f"rollout complete: {len(rows)} node(s) in {len(batches)} batch(es) passed")
    return {"rows": rows, "lines": lines, "stopped_after_batch": stopped_after, "lost": lost}


def _row_line(row: Mapping[str, Any], batch_count: int) -> str:
    head = f"{_batch_label(row['batch'], batch_count)} {row['host']}: "
    if row["outcome"] == "not_reached":
        return head + "not reached"
    if row["outcome"] == "lost":
        return head + LOST_TEXT
    if row["outcome"] == "passed":
        return head + "passed" + (f" ({'; '.join(row['notes'])})" if row["notes"] else "")
    failures = "; ".join(f"gate {f['gate']}: {f['evidence']}" for f in row["failures"])
    rollback = row.get("rollback") or "not rolled back"
    return head + f"FAILED {failures} -> {rollback}"
