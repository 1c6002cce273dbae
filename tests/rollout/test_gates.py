"""The rollout gates: one test per way a node fails, and the cases that pass or skip."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from lingbot_fleet.rollout import (
    GateInputs,
    GatePolicy,
    HealthResult,
    evaluate_gates,
    failure_text,
    gate_failures,
    health_from_results,
    parse_previous_probe,
    summarize,
)
from lingbot_fleet.rollout.summary import LOST_TEXT

UUID_0 = "GPU-3b5d6f1e-8a2c-4e7b-9d10-2f4a6c8e0b11"
UUID_1 = "GPU-11540733-53c6-4b27-9b89-a46dfe945aec"


def probe(
    p2p_gbytes_per_s: float = 28.4,
    h2d_gbytes_per_s: float = 24.6,
    data_check: str = "passed",
    timestamp: str = "2026-01-02T00:00:00Z",
) -> dict[str, Any]:
    def pair(src: int, dst: int) -> dict[str, Any]:
        return {
            "src": src,
            "dst": dst,
            "can_access_peer": True,
            "p2p_enabled": {
                "unidirectional_gbytes_per_s": p2p_gbytes_per_s,
                "bidirectional_gbytes_per_s": 52.0,
                "latency_ns": 1320,
            },
            "p2p_disabled": {
                "unidirectional_gbytes_per_s": 12.8,
                "bidirectional_gbytes_per_s": 14.5,
                "latency_ns": 8800,
            },
            "data_check": data_check,
            "error": None,
        }

    return {
        "schema_version": 1,
        "timestamp": timestamp,
        "gpus": [
            {
                "index": index,
                "uuid": uuid,
                "h2d_gbytes_per_s": h2d_gbytes_per_s,
                "d2h_gbytes_per_s": 26.2,
                "error": None,
            }
            for index, uuid in ((0, UUID_0), (1, UUID_1))
        ],
        "pairs": [pair(0, 1), pair(1, 0)],
        "errors": [],
        "notes": [],
    }


def plan() -> dict[str, Any]:
    used = {"path_type": "PHB", "gbytes_per_s": 28.4, "latency_ns": 1320.0, "data_check": "passed"}
    return {
        "schema_version": 1,
        "policy": {"p2p_min_gbytes_per_s": 25.0},
        "instances": [
            {
                "name": "main",
                "gpus": [0, 1],
                "peer_access_threshold_gbytes_per_s": 25.0,
                "peer_access_pairs": [{"src": 0, "dst": 1, **used}, {"src": 1, "dst": 0, **used}],
            }
        ],
    }


def load_result(
    p95_latency_ms: float = 220.0,
    p95_first_token_ms: float = 40.0,
    *,
    requests_sent: int = 30,
    server_errors: int = 0,
    no_answer: int = 0,
    client_errors: int = 0,
    first_errors: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One result of lingbot_chat_load (20 reference and 10 first-token requests)."""
    errors = server_errors + no_answer + client_errors
    first_token_count = max(0, 10 - errors)
    latency_count = requests_sent - errors - first_token_count

    def times(p95_ms: float, count: int) -> dict[str, Any]:
        if not count:
            return {"p50": None, "p95": None, "max": None, "count": 0}
        return {"p50": round(p95_ms * 0.8, 1), "p95": p95_ms, "max": p95_ms * 1.1, "count": count}

    return {
        "requests_sent": requests_sent,
        "ok": requests_sent - errors,
        "server_errors": server_errors,
        "no_answer": no_answer,
        "client_errors": client_errors,
        "error_rate_percent": round(errors / requests_sent * 100, 3) if requests_sent else None,
        "latency_ms": times(p95_latency_ms, latency_count),
        "first_token_ms": times(p95_first_token_ms, first_token_count),
        "first_errors": list(first_errors),
        "not_sent": 0,
        "duration_s": 2.5,
    }


def service_load(
    instances: dict[str, dict[str, Any]] | None = None, node: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The `load` of lingbot_chat_load; the node's pooled figures default to the only
    instance's (or a healthy result)."""
    instances = {"main": load_result()} if instances is None else instances
    if node is None:
        node = next(iter(instances.values())) if len(instances) == 1 else load_result()
    return {"instances": instances, "node": node}


def healthy_inputs(**changes: Any) -> GateInputs:
    values: dict[str, Any] = {
        "plan": plan(),
        "fresh_probe": probe(),
        "previous_probe": probe(timestamp="2026-01-01T00:00:00Z"),
        "link_findings": [],
        "health": [HealthResult("main", True)],
        "service_before": service_load(),
        "service_after": service_load(),
    }
    values.update(changes)
    return GateInputs(**values)


def test_a_healthy_node_passes_every_gate() -> None:
    report = evaluate_gates(healthy_inputs())
    assert report.passed
    assert report.failures == []
    assert report.gates == {
        "change": "passed",
        "measure": "passed",
        "lingbot_health": "passed",
        "link_check": "passed",
        "probe_paths": "passed",
        "probe_regression": "passed",
        "service_load": "passed",
    }
    assert report.notes == []
    assert report.message("node-1") == "node-1 passed every rollout gate"


def test_an_unhealthy_instance_fails_lingbot_health() -> None:
    inputs = healthy_inputs(
        health=[HealthResult("main", False, "did not answer on port 8000 within 60 s")]
    )
    assert gate_failures(inputs) == [
        {
            "gate": "lingbot_health",
            "evidence": "lingbot@main.service is not healthy: did not answer on port 8000 "
            "within 60 s",
        }
    ]


def test_a_link_finding_at_error_fails_link_check() -> None:
    finding = {
        "code": "PCIE_WIDTH_BELOW_EXPECTED",
        "severity": "error",
        "subject": "0000:41:00.0",
        "message": "link x8, expected x16",
        "evidence": {"width": 8, "expected_width": 16},
    }
    assert gate_failures(healthy_inputs(link_findings=[finding])) == [
        {
            "gate": "link_check",
            "evidence": "error PCIE_WIDTH_BELOW_EXPECTED 0000:41:00.0: link x8, expected x16 "
            '(evidence {"expected_width": 16, "width": 8})',
        }
    ]


def test_a_warning_passes_link_check_unless_the_limit_is_lower() -> None:
    finding = {"code": "LINK_X", "severity": "warning", "subject": "node", "message": "m"}
    assert gate_failures(healthy_inputs(link_findings=[finding])) == []
    failures = gate_failures(
        healthy_inputs(link_findings=[finding]), GatePolicy(link_fail_on="warning")
    )
    assert [failure["gate"] for failure in failures] == ["link_check"]


def test_link_fail_on_never_skips_the_link_gate() -> None:
    finding = {"code": "LINK_X", "severity": "critical", "subject": "node", "message": "m"}
    report = evaluate_gates(
        healthy_inputs(link_findings=[finding]), GatePolicy(link_fail_on="never")
    )
    assert report.passed
    assert report.gates["link_check"] == "skipped"
    assert report.notes == ["link_check skipped: rollout_gate_link_fail_on is never"]


def test_a_broken_measurement_fails_the_measure_gate() -> None:
    report = evaluate_gates(
        healthy_inputs(measure_failure="task 'Measure the GPU paths' failed: cannot save")
    )
    assert report.failed_gates() == ["measure"]
    assert report.failures[0].evidence == "task 'Measure the GPU paths' failed: cannot save"


def test_a_used_pair_below_the_threshold_fails_probe_paths() -> None:
    failures = gate_failures(
        healthy_inputs(
            fresh_probe=probe(p2p_gbytes_per_s=9.6),
            previous_probe=None,
        )
    )
    label = "(probe of 2026-01-02T00:00:00Z)"
    assert failures == [
        {
            "gate": "probe_paths",
            "evidence": f"pair {src}->{dst} used by instance main 9.6 GB/s is below the "
            f"threshold 25 GB/s (planned on 28.4 GB/s) {label}",
        }
        for src, dst in ((0, 1), (1, 0))
    ]


def test_a_used_pair_within_the_planners_hysteresis_band_passes_probe_paths() -> None:
    # The planner keeps a used pair down to the threshold less p2p_hysteresis_percent
    # (25 GB/s less 5 %: 23.75 GB/s); the gate does not fail what the next plan keeps.
    banded = plan()
    banded["policy"]["p2p_hysteresis_percent"] = 5.0
    kept = healthy_inputs(
        plan=banded, fresh_probe=probe(p2p_gbytes_per_s=24.0), previous_probe=None
    )
    assert gate_failures(kept) == []
    below = gate_failures(
        healthy_inputs(plan=banded, fresh_probe=probe(p2p_gbytes_per_s=23.5), previous_probe=None)
    )
    assert below[0]["evidence"].startswith(
        "pair 0->1 used by instance main 23.5 GB/s is below the threshold 25 GB/s less its"
        " hysteresis band (23.75 GB/s) (planned on 28.4 GB/s)"
    )


def test_a_failed_data_check_fails_probe_paths() -> None:
    failures = gate_failures(healthy_inputs(fresh_probe=probe(data_check="failed")))
    assert failures[0] == {
        "gate": "probe_paths",
        "evidence": "pair 0->1 used by instance main data check failed (peer writes did not "
        "arrive intact) (probe of 2026-01-02T00:00:00Z)",
    }
    assert len(failures) == 2


def test_a_pair_without_peer_access_or_a_failed_gpu_fails_probe_paths() -> None:
    fresh = probe()
    fresh["pairs"][0]["can_access_peer"] = False
    fresh["pairs"][0]["p2p_enabled"] = None
    fresh["gpus"][1]["error"] = "GPU 1: cuInit failed: CUDA_ERROR_DEVICE_UNAVAILABLE (46)"
    del fresh["pairs"][1]
    evidence = [
        f["evidence"] for f in gate_failures(healthy_inputs(fresh_probe=fresh, previous_probe=None))
    ]
    assert evidence == [
        "GPU 1 failed on the probe of 2026-01-02T00:00:00Z: GPU 1: cuInit failed: "
        "CUDA_ERROR_DEVICE_UNAVAILABLE (46)",
        "pair 0->1 used by instance main has no peer access on the fresh probe of "
        "2026-01-02T00:00:00Z (probe of 2026-01-02T00:00:00Z)",
        "pair 1->0 used by instance main was not measured by the fresh probe "
        "(probe of 2026-01-02T00:00:00Z)",
    ]


def test_unused_pairs_do_not_count_for_probe_paths() -> None:
    single = plan()
    single["instances"][0]["gpus"] = [0]
    single["instances"][0]["peer_access_pairs"] = []
    report = evaluate_gates(
        healthy_inputs(plan=single, fresh_probe=probe(p2p_gbytes_per_s=3.0), previous_probe=None)
    )
    assert report.passed


def test_no_fresh_probe_fails_probe_paths() -> None:
    failures = gate_failures(healthy_inputs(fresh_probe=None))
    assert failures == [
        {"gate": "probe_paths", "evidence": "no fresh probe result to check the plan's paths on"}
    ]


def test_a_regression_beyond_the_tolerance_fails_probe_regression() -> None:
    previous = probe(h2d_gbytes_per_s=30.0, timestamp="2026-01-01T00:00:00Z")
    failures = gate_failures(healthy_inputs(previous_probe=previous))
    where = (
        "(fresh probe of 2026-01-02T00:00:00Z against the previous probe of "
        "2026-01-01T00:00:00Z, tolerance 10%)"
    )
    assert failures == [
        {
            "gate": "probe_regression",
            "evidence": f"GPU {index} h2d 30 -> 24.6 GB/s (-18.0%) {where}",
        }
        for index in (0, 1)
    ]


def test_a_drop_within_the_tolerance_passes() -> None:
    previous = probe(p2p_gbytes_per_s=31.0, h2d_gbytes_per_s=27.0)
    report = evaluate_gates(healthy_inputs(previous_probe=previous))
    assert report.passed
    tight = evaluate_gates(
        healthy_inputs(previous_probe=previous), GatePolicy(regression_tolerance_percent=5)
    )
    assert tight.failed_gates() == ["probe_regression"]
    assert [f.evidence.split(" (")[0] for f in tight.failures] == [
        "GPU 0 h2d 27 -> 24.6 GB/s",
        "GPU 1 h2d 27 -> 24.6 GB/s",
        "pair 0->1 P2P 31 -> 28.4 GB/s",
        "pair 1->0 P2P 31 -> 28.4 GB/s",
    ]


def test_lost_peer_access_is_a_regression() -> None:
    fresh = probe()
    fresh["pairs"][0]["p2p_enabled"] = None
    single = plan()
    single["instances"][0]["peer_access_pairs"] = []
    failures = gate_failures(healthy_inputs(plan=single, fresh_probe=fresh))
    assert [f["evidence"].split(" (")[0] for f in failures] == [
        "pair 0->1 P2P 28.4 GB/s before, not measured now"
    ]


def test_missing_previous_probe_skips_the_regression_gate_with_a_note() -> None:
    report = evaluate_gates(healthy_inputs(previous_probe=None))
    assert report.passed
    assert report.gates["probe_regression"] == "skipped"
    assert report.notes == [
        "probe_regression skipped: no previous probe on this node (its first probe); nothing "
        "to compare with"
    ]


def test_unreadable_or_foreign_previous_probe_skips_the_regression_gate() -> None:
    previous, problem = parse_previous_probe("{not json")
    assert previous is None
    assert problem is not None and problem.startswith("latest.json is not JSON")
    report = evaluate_gates(healthy_inputs(previous_probe=None, previous_probe_problem=problem))
    assert report.gates["probe_regression"] == "skipped"
    assert report.notes[0].startswith(
        "probe_regression skipped: the previous probe could not be read: latest.json is not JSON"
    )
    other = probe(h2d_gbytes_per_s=99.0)
    other["gpus"][1]["uuid"] = "GPU-other"
    report = evaluate_gates(healthy_inputs(previous_probe=other))
    assert report.passed
    assert report.notes == [
        f"probe_regression skipped: the previous probe was taken on other GPUs ({UUID_0}, "
        "GPU-other); nothing comparable"
    ]


def test_saved_probe_text_round_trips() -> None:
    assert parse_previous_probe(json.dumps(probe())) == (probe(), None)
    assert parse_previous_probe("") == (None, None)
    assert parse_previous_probe('{"a": 1}') == (
        None,
        "latest.json is not a probe document (no gpus list)",
    )


def test_a_failed_change_fails_the_change_gate_and_skips_the_others() -> None:
    report = evaluate_gates(healthy_inputs(change_failure="task 'Write config' failed: boom"))
    assert report.failed_gates() == ["change"]
    assert report.gates["probe_paths"] == "skipped"
    assert report.message("node-2") == (
        "node-2 failed rollout gate(s) change: [change] task 'Write config' failed: boom"
    )


def test_every_failing_gate_is_named_in_the_message() -> None:
    inputs = healthy_inputs(
        health=[HealthResult("main", False, "down")],
        fresh_probe=probe(p2p_gbytes_per_s=9.6),
    )
    report = evaluate_gates(inputs)
    assert report.failed_gates() == ["lingbot_health", "probe_paths", "probe_regression"]
    assert report.message("n").startswith(
        "n failed rollout gate(s) lingbot_health, probe_paths, probe_regression: "
        "[lingbot_health] lingbot@main.service is not healthy: down; [probe_paths] pair 0->1"
    )


def test_no_plan_fails_probe_paths() -> None:
    assert gate_failures(healthy_inputs(plan=None)) == [
        {"gate": "probe_paths", "evidence": "no LingBot plan for this node (fact lingbot_plan)"}
    ]


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (GatePolicy(regression_tolerance_percent=100), "rollout_gate_regression_tolerance_percent"),
        (GatePolicy(link_fail_on="fatal"), "rollout_gate_link_fail_on must be one of"),
    ],
)
def test_bad_gate_policy_is_refused(policy: GatePolicy, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        evaluate_gates(healthy_inputs(), policy)


def test_health_failure_text_keeps_the_message_and_the_last_journal_lines() -> None:
    message = [
        "lingbot@main.service did not answer on port 8000 within 60\n s (Status code was -1).",
        [f"line {n}" for n in range(1, 9)],
    ]
    assert failure_text(message) == (
        "lingbot@main.service did not answer on port 8000 within 60 s (Status code was -1). "
        "| journal: line 4 / line 5 / line 6 / line 7 / line 8"
    )
    result = {"item": {"name": "main", "port": 8000}, "failed": False, "msg": message}
    assert health_from_results([result])[0] == HealthResult("main", False, failure_text(message))


def test_summary_names_the_node_the_gate_the_evidence_and_who_was_not_reached() -> None:
    batch_plan = {"batches": [["n1"], ["n2", "n3"], ["n4"]]}
    failed = {
        "passed": False,
        "failures": [{"gate": "probe_paths", "evidence": "pair 0->1 9.6 GB/s"}],
        "notes": [],
        "rollback": "rolled back: generation 3 undone",
    }
    passed = {"passed": True, "failures": [], "notes": ["probe_regression skipped: x"]}
    summary = summarize(batch_plan, {"n1": passed, "n2": copy.deepcopy(passed), "n3": failed})
    assert summary["lines"] == [
        "batch 1/3 (canary) n1: passed (probe_regression skipped: x)",
        "batch 2/3 n2: passed (probe_regression skipped: x)",
        "batch 2/3 n3: FAILED gate probe_paths: pair 0->1 9.6 GB/s -> rolled back: generation "
        "3 undone",
        "batch 3/3 n4: not reached",
        "rollout stopped after batch 2/3: a node failed its gate and was rolled back; the "
        "nodes not reached are unchanged",
    ]
    assert summary["stopped_after_batch"] == 2
    assert [row["outcome"] for row in summary["rows"]] == [
        "passed",
        "passed",
        "failed",
        "not_reached",
    ]


def test_summary_tells_a_lost_node_from_one_not_reached() -> None:
    batch_plan = {"batches": [["n1"], ["n2", "n3"], ["n4"]]}
    passed = {"passed": True, "failures": [], "notes": []}
    summary = summarize(batch_plan, {"n1": passed, "n2": passed}, reached={"n1", "n2", "n3"})
    assert [row["outcome"] for row in summary["rows"]] == [
        "passed",
        "passed",
        "lost",
        "not_reached",
    ]
    assert summary["lost"] == ["n3"]
    assert summary["stopped_after_batch"] == 2
    assert summary["lines"][2] == "batch 2/3 n3: " + LOST_TEXT
    assert summary["lines"][-1] == (
        "rollout stopped after batch 2/3: n3 became unreachable; the nodes not reached are "
        "unchanged"
    )


def test_a_previous_probe_of_other_sizes_is_not_compared() -> None:
    def sized(size_mib: int, **changes: Any) -> dict[str, Any]:
        document = probe(**changes)
        document["parameters"] = {
            "size_bytes": size_mib << 20,
            "repetitions": 3,
            "copies_per_sample": 1,
            "warmup_copies": 1,
            "latency_size_bytes": 4,
            "latency_repetitions": 50,
        }
        return document

    # 16 MiB copies read lower than 256 MiB ones on real links: not a regression.
    report = evaluate_gates(
        healthy_inputs(fresh_probe=sized(16, p2p_gbytes_per_s=20.0), previous_probe=sized(256))
    )
    assert report.gates["probe_regression"] == "skipped"
    assert report.notes[0].startswith(
        "probe_regression skipped: the previous probe was measured with other parameters"
    )
    same = evaluate_gates(
        healthy_inputs(fresh_probe=sized(256, p2p_gbytes_per_s=20.0), previous_probe=sized(256))
    )
    assert same.gates["probe_regression"] == "failed"


def test_gpus_left_out_in_check_mode_fail_no_gate() -> None:
    fresh = probe()
    fresh["gpus"][1] |= {"h2d_gbytes_per_s": None, "skipped": "serves LingBot"}
    for pair in fresh["pairs"]:
        pair |= {"p2p_enabled": None, "p2p_disabled": None, "skipped": "GPU 1 is left out"}
    report = evaluate_gates(healthy_inputs(fresh_probe=fresh))
    assert report.gates["probe_paths"] == "passed"
    assert report.gates["probe_regression"] == "skipped"
    assert "the fresh probe left GPUs out" in report.notes[-1]
