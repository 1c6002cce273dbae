"""What the monitor watches and how it judges it: the plan's used pairs against the probe.

The plan in force (/etc/lingbot/plan.json, docs/plan.md) gives each instance's GPUs (by
UUID) and the peer-access pairs it uses with its threshold. A used pair is usable when peer
access works, the data check passed and the measured bandwidth is at or above the
instance's threshold. GPUs are followed by UUID, so a pair keeps its plan indices as labels
when the driver numbers the GPUs differently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ---- the plan in force ---------------------------------------------------------------


@dataclass(frozen=True)
class UsedPair:
    """An ordered GPU pair an instance uses with peer access (plan NVML indices)."""

    instance: str
    src: int
    dst: int
    threshold_gbytes_per_s: float
    planned_gbytes_per_s: float | None
    src_uuid: str | None
    dst_uuid: str | None

    @property
    def key(self) -> str:
        return f"{self.instance}:{self.src}-{self.dst}"


@dataclass(frozen=True)
class PlannedGpu:
    instance: str
    index: int
    uuid: str | None
    bus_id: str | None


@dataclass
class PlanView:
    """What the monitor needs from the plan in force."""

    path: str
    present: bool = False
    error: str | None = None
    instances: list[str] = field(default_factory=list)
    gpus: list[PlannedGpu] = field(default_factory=list)
    pairs: list[UsedPair] = field(default_factory=list)


def _uuid_of(plan: Mapping[str, Any], index: int) -> str | None:
    for gpu in plan.get("gpus") or []:
        if gpu.get("index") == index:
            return gpu.get("uuid")
    return None


def plan_view(plan: Mapping[str, Any], path: str = "") -> PlanView:
    """The instances, their GPUs and used pairs; ValueError names what is malformed."""
    view = PlanView(path=path, present=True)
    seen: set[tuple[int, int]] = set()
    instances = plan.get("instances")
    if not isinstance(instances, list):
        raise ValueError("the plan has no `instances` list (docs/plan.md)")
    for instance in instances:
        name = str(instance.get("name"))
        view.instances.append(name)
        uuids = list(instance.get("gpu_uuids") or [])
        bus_ids = list(instance.get("bus_ids") or [])
        for position, index in enumerate(instance.get("gpus") or []):
            uuid = uuids[position] if position < len(uuids) else _uuid_of(plan, index)
            bus_id = bus_ids[position] if position < len(bus_ids) else None
            view.gpus.append(PlannedGpu(name, int(index), uuid, bus_id))
        threshold = float(instance.get("peer_access_threshold_gbytes_per_s") or 0.0)
        for pair in instance.get("peer_access_pairs") or []:
            src, dst = int(pair["src"]), int(pair["dst"])
            if (src, dst) in seen:
                continue
            seen.add((src, dst))
            planned = pair.get("gbytes_per_s")
            view.pairs.append(
                UsedPair(
                    instance=name,
                    src=src,
                    dst=dst,
                    threshold_gbytes_per_s=threshold,
                    planned_gbytes_per_s=None if planned is None else float(planned),
                    src_uuid=_uuid_of(plan, src),
                    dst_uuid=_uuid_of(plan, dst),
                )
            )
    return view


def read_plan(path: str) -> PlanView:
    """The plan in force; absent: no instances; unreadable: `error` says why and what to do."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return PlanView(path=path)
    except OSError as error:
        return PlanView(path=path, error=f"cannot read {path}: {error.strerror or error}")
    try:
        return plan_view(json.loads(text), path)
    except json.JSONDecodeError as error:
        problem = f"not JSON (line {error.lineno} column {error.colno}: {error.msg})"
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        problem = f"not a plan document: {error}"
    return PlanView(path=path, present=True, error=f"{path}: {problem}")


# ---- judging the measurement ---------------------------------------------------------


@dataclass
class PairVerdict:
    instance: str
    src: int
    dst: int
    threshold_gbytes_per_s: float
    planned_gbytes_per_s: float | None
    measured_gbytes_per_s: float | None
    latency_ns: float | None
    data_check: str
    usable: bool
    reason: str
    below_threshold_runs: int = 0

    @property
    def key(self) -> str:
        return f"{self.instance}:{self.src}-{self.dst}"


def current_indices(facts: Mapping[str, Any]) -> dict[str, int]:
    """UUID -> NVML index of the GPUs the driver still answers for."""
    return {
        gpu["uuid"]: gpu["index"]
        for gpu in facts.get("gpus") or []
        if gpu.get("uuid") and not gpu.get("lost")
    }


def locate(index: int, uuid: str | None, by_uuid: Mapping[str, int]) -> int | None:
    """The GPU's NVML index now: by UUID when the plan has one, else the plan's index."""
    if uuid is None:
        return index
    return by_uuid.get(uuid)


def probe_pairs(
    pairs: Iterable[UsedPair], by_uuid: Mapping[str, int]
) -> tuple[tuple[int, int], ...]:
    wanted: list[tuple[int, int]] = []
    for pair in pairs:
        src = locate(pair.src, pair.src_uuid, by_uuid)
        dst = locate(pair.dst, pair.dst_uuid, by_uuid)
        if src is not None and dst is not None and (src, dst) not in wanted:
            wanted.append((src, dst))
    return tuple(wanted)


def judge_pair(pair: UsedPair, probe: Mapping[str, Any], by_uuid: Mapping[str, int]) -> PairVerdict:
    """Whether the pair is still usable as the plan uses it, and why (not)."""
    verdict = PairVerdict(
        instance=pair.instance,
        src=pair.src,
        dst=pair.dst,
        threshold_gbytes_per_s=pair.threshold_gbytes_per_s,
        planned_gbytes_per_s=pair.planned_gbytes_per_s,
        measured_gbytes_per_s=None,
        latency_ns=None,
        data_check="not_measured",
        usable=False,
        reason="",
    )
    name = f"pair {pair.src}->{pair.dst} of instance {pair.instance}"
    missing = [
        f"GPU {index} ({uuid})"
        for index, uuid in ((pair.src, pair.src_uuid), (pair.dst, pair.dst_uuid))
        if locate(index, uuid, by_uuid) is None
    ]
    if missing:
        verb = "answers" if len(missing) == 1 else "answer"
        verdict.reason = f"{name}: {' and '.join(missing)} no longer {verb} the driver"
        return verdict
    src = locate(pair.src, pair.src_uuid, by_uuid)
    dst = locate(pair.dst, pair.dst_uuid, by_uuid)
    entry = next(
        (p for p in probe.get("pairs") or [] if (p.get("src"), p.get("dst")) == (src, dst)),
        None,
    )
    if entry is None:
        why = "; ".join(probe.get("errors") or []) or "no probe entry"
        verdict.reason = f"{name}: not measured ({why})"
        return verdict
    enabled = entry.get("p2p_enabled") or {}
    verdict.measured_gbytes_per_s = enabled.get("unidirectional_gbytes_per_s")
    verdict.latency_ns = enabled.get("latency_ns")
    verdict.data_check = entry.get("data_check") or "not_measured"
    threshold = pair.threshold_gbytes_per_s
    if entry.get("error"):
        verdict.reason = f"{name}: {entry['error']}"
    elif not entry.get("can_access_peer"):
        verdict.reason = f"{name}: the driver no longer allows peer access"
    elif verdict.data_check != "passed":
        verdict.reason = (
            f"{name}: the peer-to-peer data check {verdict.data_check}: writes do not land; "
            "P2P must not be used"
        )
    elif verdict.measured_gbytes_per_s is None:
        verdict.reason = f"{name}: no bandwidth figure"
    elif verdict.measured_gbytes_per_s < threshold:
        verdict.reason = (
            f"{name}: {verdict.measured_gbytes_per_s:g} GB/s is below the threshold "
            f"{threshold:g} GB/s (planned {_figure(pair.planned_gbytes_per_s)})"
        )
    else:
        verdict.usable = True
        verdict.reason = (
            f"{name}: {verdict.measured_gbytes_per_s:g} GB/s, at or above the threshold "
            f"{threshold:g} GB/s, data check passed"
        )
    return verdict


def _figure(value: float | None) -> str:
    return "unknown" if value is None else f"{value:g} GB/s"


def planned_gpus_lost(plan: PlanView, facts: Mapping[str, Any]) -> int:
    by_uuid = current_indices(facts)
    return sum(1 for gpu in plan.gpus if locate(gpu.index, gpu.uuid, by_uuid) is None)
