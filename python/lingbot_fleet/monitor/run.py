"""One run of the monitor: gather the facts, probe the used pairs, judge, write results.

Writes three files, each replaced atomically: the state (``state.json``) and the run's
report (``last-run.json``) in the state directory, and the metrics in the textfile
directory; with ``auto_fallback`` also the fallback flag (lingbot_fleet.monitor.state).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..facts import gather_facts
from ..gpu.linkcheck import LinkPolicy, check_links, load_from_probe
from ..gpu.probe import MIB, ProbeParameters, run_probe, start_link_sampler
from ..node.atomic import write_json_atomic
from ..node.findings import count_by_severity, override_severities
from .config import MonitorConfig
from .drift import drift_findings, probe_error_findings
from .judge import current_indices, judge_pair, planned_gpus_lost, probe_pairs, read_plan
from .metrics import metric_families, render_metrics, write_textfile
from .state import (
    FALLBACK_FLAG_NAME,
    MONITOR_SCHEMA_VERSION,
    STATE_NAME,
    advance_state,
    fallback_recommendations,
    load_state,
    nvlink_error_readings,
    update_fallback_flag,
    widen_nvlink_error_windows,
)

REPORT_NAME = "last-run.json"


def link_policy(config: MonitorConfig) -> LinkPolicy:
    """The link expectations of the configuration, as the gpu_checks role reads them."""
    return LinkPolicy.from_vars(
        {
            "expected_links": dict(config.expected_links),
            "expected_link_default": dict(config.expected_link_default),
            "chipset_bridge_ids": list(config.chipset_bridge_ids),
            "numa_node_count": config.numa_node_count,
        }
    )


def probe_parameters(config: MonitorConfig, pairs: tuple[tuple[int, int], ...]) -> ProbeParameters:
    """The short probe of one run: the configured copy sizes, over ``pairs`` only."""
    return ProbeParameters(
        size_bytes=config.size_mib * MIB,
        repetitions=config.repetitions,
        latency_repetitions=config.latency_repetitions,
        time_budget_s=config.time_budget_s,
        pairs=pairs,
    )


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
        use_nvml=config.use_nvml,
        nvml_python_path=python_path,
        smi_command=list(config.nvidia_smi),
    )
    notes += facts.get("notes") or []
    state_dir = Path(config.state_dir)
    previous, state_note = load_state(state_dir / STATE_NAME)
    if state_note:
        notes.append(state_note)
    read_unix_s = wall_clock()
    widen_nvlink_error_windows(facts, previous, read_unix_s)
    by_uuid = current_indices(facts)
    sampler, stop_sampler, note = start_link_sampler(
        config.use_nvml, python_path, list(config.nvidia_smi)
    )
    if note:
        notes.append(note)
    try:
        probe = run_probe(
            facts,
            probe_parameters(config, probe_pairs(plan.pairs, by_uuid)),
            cuda_library=config.cuda_library,
            sampler=sampler,
        )
    finally:
        stop_sampler()
    verdicts = [judge_pair(pair, probe, by_uuid) for pair in plan.pairs]

    state = advance_state(previous, verdicts, timestamp)
    state["nvlink_errors"] = nvlink_error_readings(facts, read_unix_s)
    recommended = fallback_recommendations(plan.instances, verdicts, config.consecutive_runs)

    findings = check_links(facts, link_policy(config), load_from_probe(probe))
    findings += probe_error_findings(probe)
    findings += drift_findings(plan, facts, verdicts, recommended, config.consecutive_runs)
    findings = override_severities(findings, config.finding_severity, "finding_severity")
    drift = sum(1 for verdict in verdicts if not verdict.usable) + planned_gpus_lost(plan, facts)

    write_json_atomic(str(state_dir / STATE_NAME), state)
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
    write_json_atomic(str(state_dir / REPORT_NAME), report)
    text = render_metrics(metric_families(report))
    report["metrics_path"] = write_textfile(config.textfile_dir, config.textfile_name, text)
    return report
