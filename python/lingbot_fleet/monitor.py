"""The path monitor: a short probe of the GPU paths LingBot uses, judged against the plan.

One run (the lingbot-fleet-monitor.timer starts one every few minutes):

1. read the plan in force (/etc/lingbot/plan.json, docs/plan.md): the instances, their
   GPUs and the peer-access pairs each uses with its threshold;
2. gather the facts, probe the used pairs and every GPU's host bandwidth with small copies
   (lingbot_fleet.probe), and check the links (lingbot_fleet.linkcheck);
3. judge each used pair: usable when peer access works, the data check passed and the
   measured bandwidth is at or above the instance's threshold. A pair that is not usable
   counts one more consecutive run in the state file; a usable pair resets its count;
4. when a pair of an instance has not been usable for `consecutive_runs` runs in a row,
   recommend the single-GPU fallback for that instance (a finding, a metric, a journal
   line; with `auto_fallback` also the flag file `fallback-recommended` in the state
   directory). The monitor never changes the LingBot service itself;
5. write the Prometheus metrics atomically to the node_exporter textfile directory, the
   state, and the run's report (`last-run.json`).

Stdlib only: it runs on the nodes from /opt/lingbot-fleet/lib (role topo_monitor).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .facts import gather_facts
from .findings import SEVERITIES, Finding, count_by_severity
from .linkcheck import LinkPolicy, check_links, load_from_probe
from .probe import MIB, ProbeParameters, run_probe, start_link_sampler

MONITOR_SCHEMA_VERSION = 1
DEFAULT_CONFIG_PATH = "/etc/lingbot-fleet/monitor.json"
STATE_NAME = "state.json"
REPORT_NAME = "last-run.json"
FALLBACK_FLAG_NAME = "fallback-recommended"
METRIC_PREFIX = "lingbot_fleet_"

EXIT_OK = 0
EXIT_CONFIG = 1
EXIT_WRITE = 2

# ---- configuration -------------------------------------------------------------------


class MonitorConfigError(ValueError):
    """The configuration cannot be used; str() names the key and the fix."""


@dataclass(frozen=True)
class MonitorConfig:
    plan_path: str = "/etc/lingbot/plan.json"
    state_dir: str = "/var/lib/lingbot-fleet/monitor"
    textfile_dir: str = "/var/lib/prometheus/node-exporter"
    textfile_name: str = "lingbot_fleet_monitor.prom"
    size_mib: int = 16
    repetitions: int = 3
    latency_repetitions: int = 20
    time_budget_s: float = 30.0
    consecutive_runs: int = 3
    auto_fallback: bool = False
    root: str = "/"
    use_nvml: bool = True
    nvml_python_path: tuple[str, ...] = ()
    nvidia_smi: tuple[str, ...] = ("nvidia-smi",)
    cuda_library: str = "libcuda.so.1"
    expected_links: Mapping[str, Any] = field(default_factory=dict)
    expected_link_default: Mapping[str, Any] = field(default_factory=dict)
    chipset_bridge_ids: tuple[str, ...] = ()
    numa_node_count: int = 0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> MonitorConfig:
        """From the JSON configuration; unknown keys and wrong types are refused."""
        if not isinstance(data, Mapping):
            raise MonitorConfigError(
                f"the configuration must be a JSON object, not {type(data).__name__}"
            )
        known = {item.name: item for item in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise MonitorConfigError(
                f"unknown configuration key(s) {', '.join(unknown)}; known keys: "
                f"{', '.join(sorted(known))}"
            )
        values = {name: _convert(name, value) for name, value in data.items()}
        config = cls(**values)
        problems = config.problems()
        if problems:
            raise MonitorConfigError("; ".join(problems))
        return config

    def problems(self) -> list[str]:
        problems = [
            f"{name} must be at least 1, not {value}"
            for name, value in (
                ("size_mib", self.size_mib),
                ("repetitions", self.repetitions),
                ("latency_repetitions", self.latency_repetitions),
                ("consecutive_runs", self.consecutive_runs),
            )
            if value < 1
        ]
        if self.time_budget_s <= 0:
            problems.append(f"time_budget_s must be greater than 0, not {self.time_budget_s}")
        if not self.textfile_name.endswith(".prom") or "/" in self.textfile_name:
            problems.append(
                f"textfile_name {self.textfile_name!r} must be a file name ending in .prom "
                "(node_exporter's textfile collector reads only *.prom)"
            )
        if not self.nvidia_smi:
            problems.append('nvidia_smi must name a command, e.g. ["nvidia-smi"]')
        return problems

    def link_policy(self) -> LinkPolicy:
        return LinkPolicy.from_vars(
            {
                "expected_links": dict(self.expected_links),
                "expected_link_default": dict(self.expected_link_default),
                "chipset_bridge_ids": list(self.chipset_bridge_ids),
                "numa_node_count": self.numa_node_count,
            }
        )

    def probe_parameters(self, pairs: tuple[tuple[int, int], ...]) -> ProbeParameters:
        return ProbeParameters(
            size_bytes=self.size_mib * MIB,
            repetitions=self.repetitions,
            latency_repetitions=self.latency_repetitions,
            time_budget_s=self.time_budget_s,
            pairs=pairs,
        )


_TYPES: dict[str, tuple[type, ...]] = {
    "plan_path": (str,),
    "state_dir": (str,),
    "textfile_dir": (str,),
    "textfile_name": (str,),
    "size_mib": (int,),
    "repetitions": (int,),
    "latency_repetitions": (int,),
    "time_budget_s": (int, float),
    "consecutive_runs": (int,),
    "auto_fallback": (bool,),
    "root": (str,),
    "use_nvml": (bool,),
    "nvml_python_path": (list,),
    "nvidia_smi": (str, list),
    "cuda_library": (str,),
    "expected_links": (dict,),
    "expected_link_default": (dict,),
    "chipset_bridge_ids": (list,),
    "numa_node_count": (int,),
}


def _convert(name: str, value: Any) -> Any:
    wanted = _TYPES[name]
    if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
        names = " or ".join(kind.__name__ for kind in wanted)
        raise MonitorConfigError(
            f"{name}: {value!r} is a {type(value).__name__}, expected {names} "
            "(fix it in the topo_monitor role variables)"
        )
    if name == "time_budget_s":
        return float(value)
    if name == "nvidia_smi":
        return (value,) if isinstance(value, str) else tuple(str(word) for word in value)
    if isinstance(value, list):
        return tuple(str(item) for item in value)
    return value


def load_config(path: str | Path) -> MonitorConfig:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise MonitorConfigError(
            f"configuration {path}: cannot read: {error.strerror or error}; run the "
            "topo_monitor role to write it, or pass --config"
        ) from None
    except json.JSONDecodeError as error:
        raise MonitorConfigError(
            f"configuration {path}: not JSON (line {error.lineno} column {error.colno}: "
            f"{error.msg})"
        ) from None
    try:
        return MonitorConfig.from_mapping(data)
    except MonitorConfigError as error:
        raise MonitorConfigError(f"configuration {path}: {error}") from None


# ---- the plan ------------------------------------------------------------------------


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


# ---- state across runs ---------------------------------------------------------------


def load_state(path: Path) -> tuple[dict[str, Any], str | None]:
    """(state, note): a missing or unreadable state starts from zero, with a note why."""
    empty: dict[str, Any] = {"schema_version": MONITOR_SCHEMA_VERSION, "pairs": {}}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return empty, None
    except (OSError, json.JSONDecodeError) as error:
        return empty, f"state {path} unreadable ({error}); counting consecutive runs from zero"
    if not isinstance(state, dict) or not isinstance(state.get("pairs"), dict):
        return empty, f"state {path} has no `pairs` object; counting consecutive runs from zero"
    return state, None


def advance_state(
    previous: Mapping[str, Any], verdicts: Sequence[PairVerdict], timestamp: str
) -> dict[str, Any]:
    """Count consecutive unusable runs per used pair; pairs the plan dropped are forgotten.

    Sets each verdict's `below_threshold_runs`.
    """
    pairs: dict[str, Any] = {}
    for verdict in verdicts:
        before = (previous.get("pairs") or {}).get(verdict.key) or {}
        runs = 0 if verdict.usable else int(before.get("below_threshold_runs") or 0) + 1
        verdict.below_threshold_runs = runs
        pairs[verdict.key] = {
            "instance": verdict.instance,
            "src": verdict.src,
            "dst": verdict.dst,
            "below_threshold_runs": runs,
            "below_threshold_since": (before.get("below_threshold_since") or timestamp)
            if runs
            else None,
            "last_gbytes_per_s": verdict.measured_gbytes_per_s,
        }
    return {"schema_version": MONITOR_SCHEMA_VERSION, "updated": timestamp, "pairs": pairs}


def fallback_recommendations(
    instances: Sequence[str], verdicts: Sequence[PairVerdict], consecutive_runs: int
) -> dict[str, list[PairVerdict]]:
    """Instance -> the pairs that stayed unusable for `consecutive_runs` runs (may be [])."""
    recommended: dict[str, list[PairVerdict]] = {name: [] for name in instances}
    for verdict in verdicts:
        if verdict.below_threshold_runs >= consecutive_runs:
            recommended.setdefault(verdict.instance, []).append(verdict)
    return recommended


# ---- findings ------------------------------------------------------------------------


def drift_findings(
    plan: PlanView,
    facts: Mapping[str, Any],
    verdicts: Sequence[PairVerdict],
    recommended: Mapping[str, Sequence[PairVerdict]],
    consecutive_runs: int,
) -> list[Finding]:
    """The plan against what was measured: lost GPUs, unusable pairs, fallbacks."""
    findings: list[Finding] = []
    if plan.error:
        findings.append(
            Finding(
                code="MONITOR_PLAN_UNREADABLE",
                severity="error",
                subject="node",
                message=f"the plan in force cannot be read: {plan.error}",
                evidence={"plan_path": plan.path},
                fix="run the provision playbook again (role lingbot_service writes the plan)",
            )
        )
    elif not plan.present:
        findings.append(
            Finding(
                code="MONITOR_NO_PLAN",
                severity="info",
                subject="node",
                message=f"no plan in force at {plan.path}: no GPU pair is watched",
                evidence={"plan_path": plan.path},
                fix="run the provision playbook (role lingbot_service) to plan LingBot",
            )
        )
    # A GPU the driver lost is still in the facts (by bus id, without UUID) and the link
    # checks report it as GPU_LOST; this finding is for GPUs gone from the node entirely.
    present_uuids = {gpu.get("uuid") for gpu in facts.get("gpus") or []}
    lost_bus_ids = {gpu.get("bus_id") for gpu in facts.get("gpus") or [] if gpu.get("lost")}
    for gpu in plan.gpus:
        if gpu.uuid is None or gpu.uuid in present_uuids or gpu.bus_id in lost_bus_ids:
            continue
        findings.append(
            Finding(
                code="MONITOR_PLANNED_GPU_MISSING",
                severity="critical",
                subject=gpu.bus_id or gpu.uuid,
                message=(
                    f"GPU {gpu.index} ({gpu.uuid}) of instance {gpu.instance} is not on "
                    "the node any more"
                ),
                evidence={"instance": gpu.instance, "index": gpu.index, "uuid": gpu.uuid},
                fix="check the kernel log (Xid 79: fallen off the bus), reseat or replace "
                "the GPU, then run the provision playbook to plan again",
            )
        )
    for verdict in verdicts:
        if verdict.usable:
            continue
        findings.append(
            Finding(
                code="MONITOR_PATH_BELOW_THRESHOLD",
                severity="warning",
                subject=f"pair {verdict.src}-{verdict.dst}",
                message=(f"{verdict.reason} ({verdict.below_threshold_runs} consecutive run(s))"),
                evidence=asdict(verdict),
                fix=(
                    f"after {consecutive_runs} consecutive runs the monitor recommends the "
                    "single-GPU fallback; check the link findings and the kernel command "
                    "line (IOMMU), or re-plan with the provision playbook"
                ),
            )
        )
    for instance, pairs in recommended.items():
        if not pairs:
            continue
        names = ", ".join(f"{p.src}->{p.dst}" for p in pairs)
        findings.append(
            Finding(
                code="MONITOR_FALLBACK_RECOMMENDED",
                severity="error",
                subject=f"instance {instance}",
                message=(
                    f"instance {instance}: pair(s) {names} not usable for "
                    f"{max(p.below_threshold_runs for p in pairs)} consecutive runs "
                    f"(limit {consecutive_runs}); single-GPU fallback recommended"
                ),
                evidence={"pairs": [asdict(p) for p in pairs]},
                fix=(
                    "ansible-playbook playbooks/rollback.yml -l <node> -e rollback_confirm=true "
                    "-e lingbot_mode=single_gpu for the emergency fallback, then fix the path "
                    "and run the provision playbook to plan again"
                ),
            )
        )
    return findings


def probe_error_findings(probe: Mapping[str, Any]) -> list[Finding]:
    errors = list(probe.get("errors") or [])
    if not errors:
        return []
    return [
        Finding(
            code="MONITOR_PROBE_ERRORS",
            severity="error",
            subject="node",
            message=f"the probe could not measure everything: {'; '.join(errors)}",
            evidence={"errors": errors},
            fix="see each error's meaning; the monitor probes again on its next run",
        )
    ]


def planned_gpus_lost(plan: PlanView, facts: Mapping[str, Any]) -> int:
    by_uuid = current_indices(facts)
    return sum(1 for gpu in plan.gpus if locate(gpu.index, gpu.uuid, by_uuid) is None)


# ---- metrics -------------------------------------------------------------------------

MetricSample = tuple[dict[str, str], float]

METRICS: dict[str, str] = {
    "p2p_bandwidth_gbytes_per_s": "Measured unidirectional P2P bandwidth (peer access on) "
    "of a GPU pair the plan uses, GB/s.",
    "p2p_threshold_gbytes_per_s": "Peer-access threshold of the instance using the pair, GB/s.",
    "p2p_usable": "1 when the used pair is at or above its threshold and its data check "
    "passed, else 0.",
    "p2p_latency_ns": "Measured small-copy P2P latency (peer access on) of a used pair, ns.",
    "gpu_link_generation": "PCIe link generation of the GPU under load (idle reading when "
    "no load sample).",
    "gpu_link_width": "PCIe link width of the GPU (lanes).",
    "gpu_host_bandwidth_gbytes_per_s": "Pinned host-to-device (h2d) and device-to-host "
    "(d2h) bandwidth of the GPU, GB/s.",
    "findings": "Findings of the last monitor run by severity.",
    "plan_drift": "Drifted paths: used pairs not usable now plus planned GPUs lost.",
    "path_below_threshold_runs": "Consecutive monitor runs in which the used pair was not usable.",
    "fallback_recommended": "1 when the instance should fall back to a single GPU.",
    "monitor_last_run_timestamp_seconds": "When the last monitor run finished, Unix time.",
    "monitor_duration_seconds": "How long the last monitor run took, seconds.",
}


def escape_label_value(value: str) -> str:
    """Prometheus text format: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def render_metrics(families: Mapping[str, Sequence[MetricSample]]) -> str:
    """Prometheus text exposition (every family a gauge) with HELP and TYPE lines."""
    lines: list[str] = []
    for short_name, help_text in METRICS.items():
        name = METRIC_PREFIX + short_name
        lines.append(f"# HELP {name} {_escape_help(help_text)}")
        lines.append(f"# TYPE {name} gauge")
        for labels, value in families.get(short_name, ()):
            label_text = ",".join(
                f'{key}="{escape_label_value(str(labels[key]))}"' for key in labels
            )
            series = f"{name}{{{label_text}}}" if label_text else name
            lines.append(f"{series} {format_value(value)}")
    return "\n".join(lines) + "\n"


def metric_families(report: Mapping[str, Any]) -> dict[str, list[MetricSample]]:
    """The report of one run as metric samples."""
    families: dict[str, list[MetricSample]] = {name: [] for name in METRICS}
    for pair in report["pairs"]:
        labels = {"src": str(pair["src"]), "dst": str(pair["dst"])}
        if pair["measured_gbytes_per_s"] is not None:
            families["p2p_bandwidth_gbytes_per_s"].append((labels, pair["measured_gbytes_per_s"]))
        if pair["latency_ns"] is not None:
            families["p2p_latency_ns"].append((labels, pair["latency_ns"]))
        families["p2p_threshold_gbytes_per_s"].append((labels, pair["threshold_gbytes_per_s"]))
        families["p2p_usable"].append((labels, 1 if pair["usable"] else 0))
        families["path_below_threshold_runs"].append((labels, pair["below_threshold_runs"]))
    for gpu in report["gpus"]:
        labels = {"gpu": str(gpu["index"]), "bus_id": gpu["bus_id"] or ""}
        if gpu["link_generation"] is not None:
            families["gpu_link_generation"].append((labels, gpu["link_generation"]))
        if gpu["link_width"] is not None:
            families["gpu_link_width"].append((labels, gpu["link_width"]))
        for direction in ("h2d", "d2h"):
            figure = gpu[f"{direction}_gbytes_per_s"]
            if figure is not None:
                families["gpu_host_bandwidth_gbytes_per_s"].append(
                    ({"gpu": str(gpu["index"]), "direction": direction}, figure)
                )
    for severity, count in report["findings_by_severity"].items():
        families["findings"].append(({"severity": severity}, count))
    families["plan_drift"].append(({}, report["plan_drift"]))
    for instance, recommended in report["fallback_recommended"].items():
        families["fallback_recommended"].append(({"instance": instance}, 1 if recommended else 0))
    families["monitor_last_run_timestamp_seconds"].append(({}, report["finished_unix_s"]))
    families["monitor_duration_seconds"].append(({}, report["duration_s"]))
    return families


# ---- files ---------------------------------------------------------------------------


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Write to a hidden temp file in the same directory, then rename it over `path`.

    The temp name starts with '.' and ends in '.tmp', so node_exporter's textfile
    collector (which reads *.prom) never sees a half-written file.
    """
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    descriptor, temp_name = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_name, mode)
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise


def update_fallback_flag(
    flag: Path, recommended: Mapping[str, Sequence[PairVerdict]], enabled: bool, timestamp: str
) -> bool:
    """With auto_fallback: the flag file exists while an instance is recommended to fall back.

    Without it the flag is removed. The flag is the only thing the monitor writes for a
    fallback; acting on it is left to the operator or the provision playbook. Returns
    whether the flag exists afterwards.
    """
    instances = sorted(name for name, pairs in recommended.items() if pairs)
    if enabled and instances:
        document = {
            "timestamp": timestamp,
            "instances": instances,
            "reasons": {name: [p.reason for p in recommended[name]] for name in instances},
        }
        write_atomically(flag, json.dumps(document, indent=2, sort_keys=True) + "\n")
        return True
    with contextlib.suppress(FileNotFoundError):
        flag.unlink()
    return False


# ---- journal -------------------------------------------------------------------------

JOURNAL_PRIORITIES = {"error": 3, "warning": 4, "info": 6}


def log(level: str, message: str, stream: Any = None) -> None:
    """One line on stderr; under systemd with an "<N>" priority prefix the journal reads."""
    stream = stream or sys.stderr
    prefix = f"<{JOURNAL_PRIORITIES[level]}>" if os.environ.get("JOURNAL_STREAM") else ""
    stream.write(f"{prefix}lingbot-fleet-monitor: {message}\n")
    stream.flush()


# ---- one run -------------------------------------------------------------------------


def gpu_rows(facts: Mapping[str, Any], probe: Mapping[str, Any]) -> list[dict[str, Any]]:
    measured = {gpu.get("index"): gpu for gpu in probe.get("gpus") or []}
    rows = []
    for gpu in facts.get("gpus") or []:
        entry = measured.get(gpu["index"]) or {}
        load = entry.get("link_under_load") or {}
        pcie = gpu.get("pcie") or {}
        rows.append(
            {
                "index": gpu["index"],
                "uuid": gpu.get("uuid"),
                "bus_id": gpu.get("bus_id"),
                "lost": bool(gpu.get("lost")),
                "h2d_gbytes_per_s": entry.get("h2d_gbytes_per_s"),
                "d2h_gbytes_per_s": entry.get("d2h_gbytes_per_s"),
                "link_generation": load.get("gen") or pcie.get("current_gen"),
                "link_width": load.get("width") or pcie.get("current_width"),
                "link_under_load": bool(load),
                "error": entry.get("error"),
            }
        )
    return rows


def run_monitor(
    config: MonitorConfig,
    *,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Measure, judge, update the state, write metrics and report; returns the report."""
    started_s = clock()
    timestamp = datetime.fromtimestamp(wall_clock(), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    notes: list[str] = []
    plan = read_plan(config.plan_path)
    python_path = list(config.nvml_python_path)
    facts = gather_facts(
        config.root,
        nvml="auto" if config.use_nvml else "off",
        nvml_python_path=python_path,
        smi_command=list(config.nvidia_smi),
    )
    notes += facts.get("notes") or []
    by_uuid = current_indices(facts)
    sampler, stop_sampler, note = start_link_sampler(
        config.use_nvml, python_path, list(config.nvidia_smi)
    )
    if note:
        notes.append(note)
    try:
        probe = run_probe(
            facts,
            config.probe_parameters(probe_pairs(plan.pairs, by_uuid)),
            cuda_library=config.cuda_library,
            sampler=sampler,
        )
    finally:
        stop_sampler()
    verdicts = [judge_pair(pair, probe, by_uuid) for pair in plan.pairs]

    state_dir = Path(config.state_dir)
    previous, state_note = load_state(state_dir / STATE_NAME)
    if state_note:
        notes.append(state_note)
    state = advance_state(previous, verdicts, timestamp)
    recommended = fallback_recommendations(plan.instances, verdicts, config.consecutive_runs)

    findings = check_links(facts, config.link_policy(), load_from_probe(probe))
    findings += probe_error_findings(probe)
    findings += drift_findings(plan, facts, verdicts, recommended, config.consecutive_runs)
    drift = sum(1 for verdict in verdicts if not verdict.usable) + planned_gpus_lost(plan, facts)

    write_atomically(state_dir / STATE_NAME, json.dumps(state, indent=2, sort_keys=True) + "\n")
    flag = update_fallback_flag(
        state_dir / FALLBACK_FLAG_NAME, recommended, config.auto_fallback, timestamp
    )
    duration_s = round(clock() - started_s, 3)
    report: dict[str, Any] = {
        "schema_version": MONITOR_SCHEMA_VERSION,
        "timestamp": timestamp,
        "finished_unix_s": round(wall_clock(), 3),
        "duration_s": duration_s,
        "plan": {"path": plan.path, "present": plan.present, "error": plan.error},
        "consecutive_runs": config.consecutive_runs,
        "pairs": [{**asdict(v), "key": v.key} for v in verdicts],
        "gpus": gpu_rows(facts, probe),
        "plan_drift": drift,
        "fallback_recommended": {name: bool(pairs) for name, pairs in recommended.items()},
        "fallback_flag": str(state_dir / FALLBACK_FLAG_NAME) if flag else None,
        "findings": [finding.to_dict() for finding in findings],
        "findings_by_severity": count_by_severity(findings),
        "probe_errors": list(probe.get("errors") or []),
        "notes": notes,
    }
    write_atomically(state_dir / REPORT_NAME, json.dumps(report, indent=2, sort_keys=True) + "\n")
    metrics_path = Path(config.textfile_dir) / config.textfile_name
    write_atomically(metrics_path, render_metrics(metric_families(report)))
    report["metrics_path"] = str(metrics_path)
    return report


def journal_lines(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(level, line) for the journal: every finding of warning or worse, then a summary."""
    lines: list[tuple[str, str]] = []
    for finding in report["findings"]:
        if finding["severity"] == "info":
            continue
        level = "warning" if finding["severity"] == "warning" else "error"
        lines.append((level, f"{finding['code']}: {finding['message']}; fix: {finding['fix']}"))
    counts = ", ".join(
        f"{report['findings_by_severity'][severity]} {severity}" for severity in SEVERITIES
    )
    usable = sum(1 for pair in report["pairs"] if pair["usable"])
    fallbacks = sorted(name for name, on in report["fallback_recommended"].items() if on)
    lines.append(
        (
            "info",
            f"{usable} of {len(report['pairs'])} used path(s) usable, plan drift "
            f"{report['plan_drift']}, fallback recommended for "
            f"{', '.join(fallbacks) or 'no instance'}; findings: {counts}; metrics in "
            f"{report['metrics_path']} ({report['duration_s']:g} s)",
        )
    )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lingbot-fleet-monitor",
        description="Probe the GPU paths LingBot uses, compare them with the plan in force "
        "and write Prometheus metrics for node_exporter's textfile collector.",
    )
    parser.add_argument("--config", default=DEFAULT_CONFIG_PATH, help="JSON configuration")
    parser.add_argument("--json", action="store_true", help="print the run's report as JSON")
    parser.add_argument(
        "--check-config",
        action="store_true",
        help="only check the configuration (exit status 0 when it can be used)",
    )
    arguments = parser.parse_args(argv)
    try:
        config = load_config(arguments.config)
    except MonitorConfigError as error:
        log("error", str(error))
        return EXIT_CONFIG
    if arguments.check_config:
        print(f"configuration {arguments.config}: OK")
        return EXIT_OK
    try:
        report = run_monitor(config)
    except OSError as error:
        log(
            "error",
            f"could not write {error.filename or 'a result file'}: {error.strerror or error}; "
            "check that the state and textfile directories exist and are writable",
        )
        return EXIT_WRITE
    for level, line in journal_lines(report):
        log(level, line)
    if arguments.json:
        json.dump(report, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
