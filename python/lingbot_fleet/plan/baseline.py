"""Measured P2P against a known-good matrix for the same hardware model."""

from __future__ import annotations

from typing import Any

from .grouping import PairVerdict
from .model import PlanInputs
from .policy import Baseline

WITHIN = "within_tolerance"
BELOW = "below_baseline"
ABOVE = "above_baseline"
NOT_MEASURED = "not_measured"


def _path_entry(
    pair: tuple[int, int],
    expected: float,
    measured: float | None,
    tolerance_percent: float,
    path_type: str | None,
) -> dict[str, Any]:
    name = f"{pair[0]}-{pair[1]}"
    if measured is None:
        status, drift = NOT_MEASURED, None
        reason = f"pair {name}: baseline {expected:.1f} GB/s, no P2P measurement on this node"
    else:
        drift = round((measured - expected) / expected * 100, 1)
        if drift < -tolerance_percent:
            status = BELOW
        elif drift > tolerance_percent:
            status = ABOVE
        else:
            status = WITHIN
        reason = (
            f"pair {name} ({path_type or 'topology unknown'}): measured {measured:.1f} GB/s "
            f"against baseline {expected:.1f} GB/s ({drift:+.1f}%, "
            f"tolerance {tolerance_percent:g}%)"
        )
    return {
        "pair": name,
        "baseline_gbytes_per_s": expected,
        "measured_gbytes_per_s": measured,
        "drift_percent": drift,
        "status": status,
        "drifted": status != WITHIN,
        "reason": reason,
    }


def compare_baseline(
    baseline: Baseline | None, inputs: PlanInputs, verdicts: dict[tuple[int, int], PairVerdict]
) -> dict[str, Any] | None:
    if baseline is None:
        return None
    models = sorted({gpu.model for gpu in inputs.gpus if gpu.model})
    result: dict[str, Any] = {
        "model": baseline.model,
        "tolerance_percent": baseline.tolerance_percent,
        "compared": False,
        "paths": [],
        "drifted_pairs": [],
    }
    if models != [baseline.model]:
        result["reason"] = (
            f"not compared: the baseline is for {baseline.model}, this node has "
            f"{', '.join(models) or 'no identified GPU model'}"
        )
        return result
    if not inputs.probe_present:
        result["reason"] = "not compared: no probe results (run the probe to compare)"
        return result
    known = {gpu.index for gpu in inputs.gpus}
    for pair, expected in sorted(baseline.p2p_gbytes_per_s.items()):
        if not set(pair) <= known:
            continue
        verdict = verdicts.get(pair)
        measured = verdict.gbytes_per_s if verdict is not None else None
        path_type = verdict.path_type if verdict is not None else None
        result["paths"].append(
            _path_entry(pair, expected, measured, baseline.tolerance_percent, path_type)
        )
    result["compared"] = True
    result["drifted_pairs"] = [entry["pair"] for entry in result["paths"] if entry["drifted"]]
    result["reason"] = (
        f"{len(result['drifted_pairs'])} of {len(result['paths'])} baseline path(s) drifted beyond "
        f"{baseline.tolerance_percent:g}%"
        + (f": {', '.join(result['drifted_pairs'])}" if result["drifted_pairs"] else "")
    )
    return result
