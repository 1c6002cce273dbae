"""The plan in force on the node (/etc/lingbot/plan.json): what it decided, by GPU UUID.

The planner keeps the deployed decisions while new measurements stay near them: a pair's
verdict flips only outside the hysteresis band around the threshold (a verdict made
against another threshold is not kept: the policy changed, so the pair is judged afresh),
figures written in
config.yaml stay while a new measurement is within figure_tolerance_percent, and an
instance with the same GPUs keeps its name. GPUs are matched by UUID, so a GPU that moved
to another index (or was replaced) is judged afresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .model import PLAN_SCHEMA_VERSION

UuidPair = frozenset[str]


@dataclass(frozen=True)
class PreviousPlan:
    """What the deployed plan decided; empty when there is none (or it cannot be read)."""

    pair_qualified: dict[UuidPair, bool] = field(default_factory=dict)
    instance_names: dict[frozenset[str], str] = field(default_factory=dict)
    # (src uuid, dst uuid) -> the written peer link {bandwidth_gbps, latency_ns}
    peer_links: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    # (the instance's uuids, uuid) -> the written balancer weight
    weights: dict[tuple[frozenset[str], str], float] = field(default_factory=dict)
    # The p2p_min_gbytes_per_s the pair verdicts were made against (None: not recorded).
    p2p_min_gbytes_per_s: float | None = None
    note: str | None = None

    @property
    def present(self) -> bool:
        return bool(self.pair_qualified or self.instance_names)


def _uuids_by_index(plan: Mapping[str, Any]) -> dict[int, str]:
    return {
        gpu["index"]: gpu["uuid"]
        for gpu in plan.get("gpus") or []
        if isinstance(gpu, Mapping) and isinstance(gpu.get("uuid"), str) and "index" in gpu
    }


def _pairs(plan: Mapping[str, Any], uuids: Mapping[int, str]) -> dict[UuidPair, bool]:
    decided: dict[UuidPair, bool] = {}
    for entry in plan.get("pairs") or []:
        parts = str(entry.get("pair", "")).split("-") if isinstance(entry, Mapping) else []
        if len(parts) != 2 or not all(part.isdigit() for part in parts):
            continue
        a, b = (uuids.get(int(part)) for part in parts)
        if a and b and isinstance(entry.get("qualifies"), bool):
            decided[frozenset((a, b))] = entry["qualifies"]
    return decided


def _instance_figures(instance: Mapping[str, Any], previous: PreviousPlan) -> None:
    uuids = [str(uuid) for uuid in instance.get("gpu_uuids") or []]
    members = frozenset(uuids)
    previous.instance_names[members] = str(instance.get("name"))
    config = instance.get("config") or {}
    topology = (config.get("hardware_profile") or {}).get("gpu_topology") or []
    for entry in topology:
        src = entry.get("gpu_id")
        if not isinstance(src, int) or not 0 <= src < len(uuids):
            continue
        for link in entry.get("peer_links") or []:
            dst = link.get("target_gpu_id")
            if isinstance(dst, int) and 0 <= dst < len(uuids):
                previous.peer_links[(uuids[src], uuids[dst])] = {
                    "bandwidth_gbps": link.get("bandwidth_gbps"),
                    "latency_ns": link.get("latency_ns"),
                }
    weights = ((config.get("load_balancer") or {}).get("config") or {}).get("gpu_weights") or {}
    for device, weight in weights.items():
        ordinal = str(device).removeprefix("gpu:")
        if ordinal.isdigit() and int(ordinal) < len(uuids):
            previous.weights[(members, uuids[int(ordinal)])] = weight


def read_previous_plan(plan: Any) -> PreviousPlan:
    """The deployed plan's decisions; a plan of another schema is ignored with a note."""
    if plan is None:
        return PreviousPlan()
    if not isinstance(plan, Mapping) or plan.get("schema_version") != PLAN_SCHEMA_VERSION:
        version = plan.get("schema_version") if isinstance(plan, Mapping) else None
        return PreviousPlan(
            note=(
                f"The deployed plan (schema_version {version!r}) is not a schema "
                f"{PLAN_SCHEMA_VERSION} plan, so no decision is carried over from it: pairs "
                "near the threshold are judged against the threshold alone this time."
            )
        )
    threshold = (plan.get("policy") or {}).get("p2p_min_gbytes_per_s")
    previous = PreviousPlan(
        pair_qualified=_pairs(plan, _uuids_by_index(plan)),
        p2p_min_gbytes_per_s=(
            float(threshold)
            if isinstance(threshold, int | float) and not isinstance(threshold, bool)
            else None
        ),
    )
    for instance in plan.get("instances") or []:
        if isinstance(instance, Mapping):
            _instance_figures(instance, previous)
    return previous
