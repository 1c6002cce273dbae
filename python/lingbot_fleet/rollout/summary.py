"""The rollout's summary: every node's batch, gate outcome and evidence, one line each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _batch_label(number: int, count: int) -> str:
    return f"batch {number}/{count}" + (" (canary)" if number == 1 else "")


def summarize(
    plan: Mapping[str, Any], results: Mapping[str, Mapping[str, Any] | None]
) -> dict[str, Any]:
    """Rows (host, batch, outcome, failures, notes, rollback) and printable lines for
    every host of the batch plan; `results` maps hosts to their `rollout_gate_result`."""
    batches = plan["batches"]
    rows: list[dict[str, Any]] = []
    stopped_after: int | None = None
    for number, batch in enumerate(batches, 1):
        for host in batch:
            result = results.get(host)
            if result is None:
                outcome = "not_reached"
            else:
                outcome = "passed" if result.get("passed") else "failed"
            if outcome == "failed" and stopped_after is None:
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
    if stopped_after is not None:
        lines.append(
            f"rollout stopped after {_batch_label(stopped_after, len(batches))}: a node failed "
            "its gate and was rolled back; the nodes not reached are unchanged"
        )
    elif rows and all(row["outcome"] == "passed" for row in rows):
        lines.append(f"rollout complete: {len(rows)} node(s) in {len(batches)} batch(es) passed")
    return {"rows": rows, "lines": lines, "stopped_after_batch": stopped_after}


def _row_line(row: Mapping[str, Any], batch_count: int) -> str:
    head = f"{_batch_label(row['batch'], batch_count)} {row['host']}: "
    if row["outcome"] == "not_reached":
        return head + "not reached"
    if row["outcome"] == "passed":
        return head + "passed" + (f" ({'; '.join(row['notes'])})" if row["notes"] else "")
    failures = "; ".join(f"gate {f['gate']}: {f['evidence']}" for f in row["failures"])
    rollback = row.get("rollback") or "not rolled back"
    return head + f"FAILED {failures} -> {rollback}"
