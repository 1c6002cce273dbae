"""Rollout gates: what a node must pass after its change before the next batch starts.

The gates (docs in roles/rollout_gate/README.md), judged after a node's change:

- `change`: the change itself completed (no task of it failed);
- `measure`: the gate's own measurements (fresh probe, link check) completed;
- `lingbot_health`: every planned LingBot instance answered its health check;
- `link_check`: no link finding at or above the severity limit (default `error`; `never`
  skips the gate);
- `probe_paths`: every GPU pair the plan uses for peer access, on the fresh probe, has
  peer access, is at or above the instance's threshold and passed the data check, and
  every GPU the plan uses was measured without error;
- `probe_regression`: no host bandwidth (h2d, d2h) or P2P bandwidth of the fresh probe is
  below the node's previous probe by more than the tolerance. Skipped, with a note, when
  there is no previous probe, it cannot be read, or it was taken on other GPUs;
- `service_load`: under the synthetic chat load of module lingbot_chat_load
  (`lingbot_fleet.lingbot.chat_load`), measured before and after the change, no instance (nor the
  node, pooled) has an error rate above the limit after the change, and no P95 latency or
  P95 first-token time after it is above the one before by more than the tolerance and
  the floor (both must be exceeded). Skipped, with a note, when there is no load after the
  change (check mode); the comparison alone is skipped when there was none before (the
  node's first rollout: nothing was running).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..gpu.probe import figure_parameters

GATES: tuple[str, ...] = (
    "change",
    "measure",
    "lingbot_health",
    "link_check",
    "probe_paths",
    "probe_regression",
    "service_load",
)
SEVERITIES: tuple[str, ...] = ("info", "warning", "error", "critical")
LINK_FAIL_ON_CHOICES: tuple[str, ...] = (*SEVERITIES, "never")


@dataclass(frozen=True)
class GateFailure:
    gate: str
    evidence: str

    def to_dict(self) -> dict[str, str]:
        return {"gate": self.gate, "evidence": self.evidence}


@dataclass(frozen=True)
class HealthResult:
    instance: str
    healthy: bool
    evidence: str = ""


@dataclass(frozen=True)
class GatePolicy:
    regression_tolerance_percent: float = 10.0
    link_fail_on: str = "error"
    latency_tolerance_percent: float = 25.0
    latency_tolerance_floor_ms: float = 15.0
    max_error_rate_percent: float = 0.5

    def problems(self) -> list[str]:
        problems = []
        if not 0 <= self.regression_tolerance_percent < 100:
            problems.append(
                "rollout_gate_regression_tolerance_percent must be from 0 to below 100, not "
                f"{self.regression_tolerance_percent}"
            )
        if self.link_fail_on not in LINK_FAIL_ON_CHOICES:
            problems.append(
                f"rollout_gate_link_fail_on must be one of {', '.join(LINK_FAIL_ON_CHOICES)}, not "
                f"{self.link_fail_on!r}"
            )
        if not _is_number(self.latency_tolerance_percent) or not (
            0 <= self.latency_tolerance_percent <= 1000
        ):
            problems.append(
                "rollout_gate_latency_tolerance_percent must be from 0 to 1000, not "
                f"{self.latency_tolerance_percent!r}"
            )
        if not _is_number(self.latency_tolerance_floor_ms) or not (
            0 <= self.latency_tolerance_floor_ms <= 60000
        ):
            problems.append(
                "rollout_gate_latency_tolerance_floor_ms must be from 0 to 60000 (ms), not "
                f"{self.latency_tolerance_floor_ms!r}"
            )
        if not _is_number(self.max_error_rate_percent) or not (
            0 <= self.max_error_rate_percent <= 100
        ):
            problems.append(
                "rollout_gate_max_error_rate_percent must be from 0 to 100, not "
                f"{self.max_error_rate_percent!r}"
            )
        return problems


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class GateInputs:
    """What a node's gate judges. `previous_probe` is the saved probe read before this run
    changed anything (None: there was none); `previous_probe_problem` says why it could not
    be read. `change_failure` is the failed task's name and message when the change broke;
    `measure_failure` the same when the gate's own measurements broke. `service_before`
    and `service_after` are the `load` results of module lingbot_chat_load ({instances:
    {name: result}, node: pooled}) measured before and after the change (None: not
    measured)."""

    plan: Mapping[str, Any] | None = None
    fresh_probe: Mapping[str, Any] | None = None
    previous_probe: Mapping[str, Any] | None = None
    previous_probe_problem: str | None = None
    link_findings: Sequence[Mapping[str, Any]] = ()
    health: Sequence[HealthResult] = ()
    change_failure: str | None = None
    measure_failure: str | None = None
    service_before: Mapping[str, Any] | None = None
    service_after: Mapping[str, Any] | None = None


@dataclass
class GateReport:
    failures: list[GateFailure] = field(default_factory=list)
    gates: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def record(self, gate: str, failures: list[GateFailure]) -> None:
        self.failures.extend(failures)
        self.gates[gate] = "failed" if failures else "passed"

    def skip(self, gate: str, note: str) -> None:
        self.gates[gate] = "skipped"
        self.notes.append(f"{gate} skipped: {note}")

    def message(self, host: str) -> str:
        if self.passed:
            return f"{host} passed every rollout gate"
        lines = "; ".join(f"[{f.gate}] {f.evidence}" for f in self.failures)
        return f"{host} failed rollout gate(s) {', '.join(self.failed_gates())}: {lines}"

    def failed_gates(self) -> list[str]:
        return [gate for gate in GATES if self.gates.get(gate) == "failed"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failures": [failure.to_dict() for failure in self.failures],
            "gates": dict(self.gates),
            "notes": list(self.notes),
        }


def _figure(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _pair_key(pair: Mapping[str, Any]) -> tuple[int, int]:
    return int(pair["src"]), int(pair["dst"])


def _p2p_gbytes_per_s(pair: Mapping[str, Any]) -> float | None:
    enabled = pair.get("p2p_enabled") or {}
    return _figure(enabled.get("unidirectional_gbytes_per_s"))


def _probe_label(probe: Mapping[str, Any]) -> str:
    return f"probe of {probe.get('timestamp') or 'unknown time'}"


def health_gate(health: Sequence[HealthResult]) -> list[GateFailure]:
    return [
        GateFailure(
            "lingbot_health",
            f"lingbot@{result.instance}.service is not healthy: {result.evidence or 'no answer'}",
        )
        for result in health
        if not result.healthy
    ]


def link_gate(findings: Sequence[Mapping[str, Any]], fail_on: str) -> list[GateFailure]:
    limit = SEVERITIES.index(fail_on)
    failures = []
    for finding in findings:
        severity = str(finding.get("severity", "critical"))
        rank = SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)
        if rank >= limit:
            evidence = json.dumps(finding.get("evidence", {}), sort_keys=True)
            failures.append(
                GateFailure(
                    "link_check",
                    f"{severity} {finding.get('code')} {finding.get('subject')}: "
                    f"{finding.get('message')} (evidence {evidence})",
                )
            )
    return failures


def _used_gpus(plan: Mapping[str, Any]) -> list[int]:
    return sorted({int(gpu) for instance in plan.get("instances", []) for gpu in instance["gpus"]})


def _threshold(plan: Mapping[str, Any], instance: Mapping[str, Any]) -> float:
    value = instance.get("peer_access_threshold_gbytes_per_s")
    if value is None:
        value = (plan.get("policy") or {}).get("p2p_min_gbytes_per_s", 0.0)
    return float(value)


def _kept_down_to(plan: Mapping[str, Any], threshold: float) -> float:
    """The figure a used pair may fall to and stay used: the threshold less the planner's
    p2p_hysteresis_percent band (plan/grouping.py bandwidth_bar), so the gate does not fail
    a pair the next plan would keep."""
    band_percent = _figure((plan.get("policy") or {}).get("p2p_hysteresis_percent")) or 0.0
    return threshold * (1 - band_percent / 100)


def _pair_failure(
    used: Mapping[str, Any],
    measured: Mapping[str, Any] | None,
    threshold: float,
    label: str,
    kept_down_to: float,
) -> str | None:
    """Why the fresh probe's pair fails the plan's use of it (None: it does not)."""
    if measured is None:
        return "was not measured by the fresh probe"
    if measured.get("skipped"):
        return None  # left out on purpose (check mode: the GPUs serve LingBot)
    if measured.get("error"):
        return f"could not be measured: {measured['error']}"
    figure = _p2p_gbytes_per_s(measured)
    if not measured.get("can_access_peer") or figure is None:
        return f"has no peer access on the fresh {label}"
    problems = []
    floor = min(threshold, kept_down_to)
    if figure < floor:
        band = "" if floor == threshold else f" less its hysteresis band ({floor:g} GB/s)"
        problems.append(
            f"{figure:g} GB/s is below the threshold {threshold:g} GB/s{band} "
            f"(planned on {_figure(used.get('gbytes_per_s')) or 0:g} GB/s)"
        )
    if measured.get("data_check") != "passed":
        problems.append(
            f"data check {measured.get('data_check')} (peer writes did not arrive intact)"
        )
    return "; ".join(problems) or None


def probe_paths_gate(
    plan: Mapping[str, Any], fresh_probe: Mapping[str, Any] | None
) -> list[GateFailure]:
    if fresh_probe is None:
        return [GateFailure("probe_paths", "no fresh probe result to check the plan's paths on")]
    label = _probe_label(fresh_probe)
    failures = []
    gpus = {int(gpu["index"]): gpu for gpu in fresh_probe.get("gpus", [])}
    for index in _used_gpus(plan):
        gpu = gpus.get(index)
        if gpu is None:
            failures.append(GateFailure("probe_paths", f"GPU {index} is missing from the {label}"))
        elif gpu.get("error") and not gpu.get("skipped"):
            failures.append(
                GateFailure("probe_paths", f"GPU {index} failed on the {label}: {gpu['error']}")
            )
    pairs = {_pair_key(pair): pair for pair in fresh_probe.get("pairs", [])}
    for instance in plan.get("instances", []):
        threshold = _threshold(plan, instance)
        kept_down_to = _kept_down_to(plan, threshold)
        for used in instance.get("peer_access_pairs", []):
            key = _pair_key(used)
            why = _pair_failure(used, pairs.get(key), threshold, label, kept_down_to)
            if why is not None:
                failures.append(
                    GateFailure(
                        "probe_paths",
                        f"pair {key[0]}->{key[1]} used by instance {instance['name']} {why} "
                        f"({label})",
                    )
                )
    return failures


def _gpu_ids(probe: Mapping[str, Any]) -> list[str]:
    return sorted(str(gpu.get("uuid") or gpu.get("index")) for gpu in probe.get("gpus", []))


def _regressed(before: float, after: float | None, tolerance_percent: float) -> str | None:
    """How `after` regressed from `before` beyond the tolerance (None: it did not)."""
    if after is None:
        return f"{before:g} GB/s before, not measured now"
    if before <= 0 or after >= before * (1 - tolerance_percent / 100.0):
        return None
    drop_percent = (before - after) / before * 100.0
    return f"{before:g} -> {after:g} GB/s (-{drop_percent:.1f}%)"


def _gpu_regressions(
    previous: Mapping[str, Any], fresh: Mapping[str, Any], tolerance_percent: float
) -> list[str]:
    fresh_gpus = {str(gpu.get("uuid") or gpu.get("index")): gpu for gpu in fresh.get("gpus", [])}
    lines = []
    for gpu in previous.get("gpus", []):
        now = fresh_gpus.get(str(gpu.get("uuid") or gpu.get("index")), {})
        for key, word in (("h2d_gbytes_per_s", "h2d"), ("d2h_gbytes_per_s", "d2h")):
            before = _figure(gpu.get(key))
            if before is None:
                continue
            why = _regressed(before, _figure(now.get(key)), tolerance_percent)
            if why is not None:
                lines.append(f"GPU {gpu.get('index')} {word} {why}")
    return lines


def _pair_regressions(
    previous: Mapping[str, Any],
    fresh: Mapping[str, Any],
    tolerance_percent: float,
    notes: list[str],
) -> list[str]:
    fresh_pairs = {_pair_key(pair): pair for pair in fresh.get("pairs", [])}
    lines = []
    for pair in previous.get("pairs", []):
        before = _p2p_gbytes_per_s(pair)
        if before is None:
            continue
        key = _pair_key(pair)
        now = fresh_pairs.get(key)
        if now is None:
            notes.append(f"pair {key[0]}->{key[1]} was not measured by the fresh probe")
            continue
        why = _regressed(before, _p2p_gbytes_per_s(now), tolerance_percent)
        if why is not None:
            lines.append(f"pair {key[0]}->{key[1]} P2P {why}")
    return lines


def regression_gate(
    previous: Mapping[str, Any],
    fresh: Mapping[str, Any],
    tolerance_percent: float,
    notes: list[str],
) -> list[GateFailure]:
    lines = _gpu_regressions(previous, fresh, tolerance_percent) + _pair_regressions(
        previous, fresh, tolerance_percent, notes
    )
    where = (
        f"(fresh {_probe_label(fresh)} against the previous {_probe_label(previous)}, "
        f"tolerance {tolerance_percent:g}%)"
    )
    return [GateFailure("probe_regression", f"{line} {where}") for line in lines]


# --- service_load -----------------------------------------------------------------------

# (key in a chat load result, words in the evidence)
_SERVICE_TIMES = (("latency_ms", "latency"), ("first_token_ms", "first-token time"))


def _ms_text(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"


def _load_instances(load: Mapping[str, Any] | None) -> Mapping[str, Mapping[str, Any]]:
    instances = (load or {}).get("instances") or {}
    if not isinstance(instances, Mapping):
        raise TypeError("a service load's instances must be a mapping of name to result")
    return instances


def _load_node(load: Mapping[str, Any] | None) -> Mapping[str, Any]:
    node = (load or {}).get("node") or {}
    if not isinstance(node, Mapping):
        raise TypeError("a service load's node result must be a mapping")
    return node


def _load_errors(result: Mapping[str, Any]) -> int:
    return sum(int(result.get(key) or 0) for key in ("server_errors", "no_answer", "client_errors"))


def _measured(load: Mapping[str, Any] | None) -> bool:
    """Whether a load result holds any request (an empty load: no LingBot was running)."""
    return bool(_load_instances(load)) or bool(_load_node(load).get("requests_sent"))


def _error_failure(
    subject: str, result: Mapping[str, Any], limit_percent: float
) -> GateFailure | None:
    rate = _figure(result.get("error_rate_percent"))
    if rate is None or rate <= limit_percent:
        return None
    first = "; ".join(str(line) for line in result.get("first_errors") or [])
    return GateFailure(
        "service_load",
        f"{subject}: {_load_errors(result)} of {result.get('requests_sent')} chat requests "
        f"failed after the change ({rate:g}%, limit {limit_percent:g}%): "
        f"{result.get('server_errors', 0)} server errors (5xx), "
        f"{result.get('no_answer', 0)} without answer, "
        f"{result.get('client_errors', 0)} refused (4xx)" + (f"; first: {first}" if first else ""),
    )


def _p95(result: Mapping[str, Any], key: str) -> float | None:
    times = result.get(key) or {}
    if not isinstance(times, Mapping) or not times.get("count"):
        return None
    return _figure(times.get("p95"))


def _time_regressions(
    subject: str,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    policy: GatePolicy,
) -> list[GateFailure]:
    failures = []
    tolerance, floor_ms = policy.latency_tolerance_percent, policy.latency_tolerance_floor_ms
    for key, words in _SERVICE_TIMES:
        then, now = _p95(before, key), _p95(after, key)
        if then is None or now is None:
            continue
        if now <= then * (1 + tolerance / 100.0) or now - then <= floor_ms:
            continue
        rise = f"+{(now - then) / then * 100.0:.0f}%" if then > 0 else f"+{now - then:g} ms"
        failures.append(
            GateFailure(
                "service_load",
                f"{subject}: P95 {words} {_ms_text(now)} ms after the change against "
                f"{_ms_text(then)} ms before ({rise}, tolerance {tolerance:g}% and "
                f"{floor_ms:g} ms)",
            )
        )
    return failures


def service_load_gate(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any],
    policy: GatePolicy,
    notes: list[str],
) -> list[GateFailure]:
    """Error rates after the change (each instance, then the node pooled when no instance
    failed), and P95 latency and first-token time after against before (each instance in
    both, then the node pooled when no instance regressed, so renamed or split instances
    are still compared)."""
    after_instances, after_node = _load_instances(after), _load_node(after)
    failures = []
    for name in sorted(after_instances):
        failure = _error_failure(
            f"instance {name}", after_instances[name], policy.max_error_rate_percent
        )
        if failure is not None:
            failures.append(failure)
    if not failures:
        failure = _error_failure("node (all instances)", after_node, policy.max_error_rate_percent)
        if failure is not None:
            failures.append(failure)
    if not _measured(before):
        notes.append(
            "service_load: no service load before the change (nothing was running: the "
            "node's first rollout); latency not compared, error rate judged"
        )
        return failures
    before_instances, before_node = _load_instances(before), _load_node(before)
    for name in sorted(before_instances):
        errors = _load_errors(before_instances[name])
        if errors:
            notes.append(
                f"service_load: instance {name} already had {errors} failed of "
                f"{before_instances[name].get('requests_sent')} chat requests before the "
                "change (the baseline was unhealthy)"
            )
    added = sorted(set(after_instances) - set(before_instances))
    gone = sorted(set(before_instances) - set(after_instances))
    if added:
        notes.append(
            f"service_load: instance(s) {', '.join(added)} not measured before the change; "
            "compared only in the node's pooled figures"
        )
    if gone:
        notes.append(
            f"service_load: instance(s) {', '.join(gone)} measured before the change but not after"
        )
    regressions = []
    for name in sorted(set(before_instances) & set(after_instances)):
        regressions += _time_regressions(
            f"instance {name}", before_instances[name], after_instances[name], policy
        )
    if not regressions:
        regressions = _time_regressions("node (all instances)", before_node, after_node, policy)
    return failures + regressions


def _regression_skip_reason(inputs: GateInputs) -> str | None:  # noqa: PLR0911 - one return per reason the probes cannot be compared
    if inputs.previous_probe_problem:
        return f"the previous probe could not be read: {inputs.previous_probe_problem}"
    if inputs.previous_probe is None:
        return "no previous probe on this node (its first probe); nothing to compare with"
    if inputs.fresh_probe is None:
        return "no fresh probe result"
    if _gpu_ids(inputs.previous_probe) != _gpu_ids(inputs.fresh_probe):
        return (
            "the previous probe was taken on other GPUs "
            f"({', '.join(_gpu_ids(inputs.previous_probe))}); nothing comparable"
        )
    before, now = figure_parameters(inputs.previous_probe), figure_parameters(inputs.fresh_probe)
    if before != now:
        return (
            f"the previous probe was measured with other parameters ({before}, now {now}); "
            "bandwidths of other sizes are not comparable"
        )
    entries = [*inputs.fresh_probe.get("gpus", []), *inputs.fresh_probe.get("pairs", [])]
    if any(entry.get("skipped") for entry in entries):
        return "the fresh probe left GPUs out (check mode: they serve LingBot)"
    return None


def evaluate_gates(inputs: GateInputs, policy: GatePolicy | None = None) -> GateReport:
    """Judge every gate for one node; the report lists each failure with its evidence."""
    policy = policy or GatePolicy()
    problems = policy.problems()
    if problems:
        raise ValueError("; ".join(problems))
    report = GateReport()
    if inputs.change_failure is not None:
        report.record("change", [GateFailure("change", inputs.change_failure)])
        for gate in GATES[1:]:
            report.skip(gate, "the change did not complete")
        return report
    report.record("change", [])
    measure = [GateFailure("measure", inputs.measure_failure)] if inputs.measure_failure else []
    report.record("measure", measure)
    report.record("lingbot_health", health_gate(inputs.health))
    if not inputs.health:
        report.notes.append("lingbot_health: no LingBot instance was checked")
    if policy.link_fail_on == "never":
        report.skip("link_check", "rollout_gate_link_fail_on is never")
    else:
        report.record("link_check", link_gate(inputs.link_findings, policy.link_fail_on))
    if inputs.plan is None:
        report.record(
            "probe_paths",
            [GateFailure("probe_paths", "no LingBot plan for this node (fact lingbot_plan)")],
        )
    else:
        report.record("probe_paths", probe_paths_gate(inputs.plan, inputs.fresh_probe))
    skip_reason = _regression_skip_reason(inputs)
    if skip_reason is not None:
        report.skip("probe_regression", skip_reason)
    else:
        assert inputs.previous_probe is not None and inputs.fresh_probe is not None
        report.record(
            "probe_regression",
            regression_gate(
                inputs.previous_probe,
                inputs.fresh_probe,
                policy.regression_tolerance_percent,
                report.notes,
            ),
        )
    _judge_service_load(inputs, policy, report)
    return report


def _judge_service_load(inputs: GateInputs, policy: GatePolicy, report: GateReport) -> None:
    """Record the service_load gate, or why it is skipped."""
    if inputs.service_after is None:
        report.skip("service_load", "no service load after the change")
    elif not _measured(inputs.service_after):
        before = sorted(_load_instances(inputs.service_before))
        report.skip(
            "service_load",
            "no LingBot instance was measured after the change"
            + (f" (before it: {', '.join(before)})" if before else ""),
        )
    else:
        report.record(
            "service_load",
            service_load_gate(inputs.service_before, inputs.service_after, policy, report.notes),
        )


def gate_failures(inputs: GateInputs, policy: GatePolicy | None = None) -> list[dict[str, str]]:
    """The failures only, as `{gate, evidence}` mappings (empty: the node passed)."""
    return [failure.to_dict() for failure in evaluate_gates(inputs, policy).failures]
