"""The service_load gate: error rates after the change, P95 times after against before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_gates import healthy_inputs, load_result, service_load

from lingbot_fleet.rollout import GATES, GatePolicy, evaluate_gates, gate_failures

REPO = Path(__file__).resolve().parents[2]


def service_failures(before: Any, after: Any, policy: GatePolicy | None = None) -> list[str]:
    failures = gate_failures(healthy_inputs(service_before=before, service_after=after), policy)
    assert {failure["gate"] for failure in failures} <= {"service_load"}
    return [failure["evidence"] for failure in failures]


def two_instances(latency_ms: float = 220.0, first_token_ms: float = 40.0) -> dict[str, Any]:
    return service_load(
        {
            "numa0": load_result(latency_ms, first_token_ms),
            "numa1": load_result(230.0, 42.0),
        },
        node=load_result(max(latency_ms, 230.0), max(first_token_ms, 42.0), requests_sent=60),
    )


def test_service_load_is_the_last_gate() -> None:
    assert GATES[-1] == "service_load"


def test_a_node_as_fast_as_before_passes() -> None:
    report = evaluate_gates(
        healthy_inputs(service_before=two_instances(), service_after=two_instances(235.0))
    )
    assert report.passed
    assert report.gates["service_load"] == "passed"
    assert report.notes == []


def test_an_instance_whose_p95_latency_rose_fails_with_both_figures() -> None:
    assert service_failures(two_instances(219.0), two_instances(482.0)) == [
        "instance numa0: P95 latency 482 ms after the change against 219 ms before (+120%, "
        "tolerance 25% and 15 ms)"
    ]


def test_an_instance_whose_p95_first_token_time_rose_fails() -> None:
    assert service_failures(
        two_instances(first_token_ms=40.0), two_instances(first_token_ms=80.0)
    ) == [
        "instance numa0: P95 first-token time 80.0 ms after the change against 40.0 ms before "
        "(+100%, tolerance 25% and 15 ms)"
    ]


def test_renamed_instances_are_judged_on_the_pooled_node_figures() -> None:
    before = service_load({"main": load_result(200.0, 40.0)})
    after = service_load(
        {"gpu01": load_result(390.0, 41.0), "gpu23": load_result(410.0, 39.0)},
        node=load_result(410.0, 41.0, requests_sent=60),
    )
    report = evaluate_gates(healthy_inputs(service_before=before, service_after=after))
    assert [failure.evidence for failure in report.failures] == [
        "node (all instances): P95 latency 410 ms after the change against 200 ms before "
        "(+105%, tolerance 25% and 15 ms)"
    ]
    assert report.notes == [
        "service_load: instance(s) gpu01, gpu23 not measured before the change; compared only "
        "in the node's pooled figures",
        "service_load: instance(s) main measured before the change but not after",
    ]


def test_the_floor_keeps_small_rises_on_fast_requests_from_failing() -> None:
    # +200% but only 8 ms: jitter on a fast request, not a regression.
    assert (
        service_failures(
            service_load({"main": load_result(4.0, 2.0)}),
            service_load({"main": load_result(12.0, 17.0)}),
        )
        == []
    )
    # The rise must exceed both: 15 ms exactly is within the floor.
    assert (
        service_failures(
            service_load({"main": load_result(20.0, 2.0)}),
            service_load({"main": load_result(35.0, 2.0)}),
        )
        == []
    )
    assert service_failures(
        service_load({"main": load_result(20.0, 2.0)}),
        service_load({"main": load_result(35.5, 2.0)}),
    ) == [
        "instance main: P95 latency 35.5 ms after the change against 20.0 ms before (+78%, "
        "tolerance 25% and 15 ms)"
    ]


def test_the_tolerance_and_floor_come_from_the_policy() -> None:
    before, after = two_instances(200.0), two_instances(240.0)
    assert service_failures(before, after) == []
    assert service_failures(before, after, GatePolicy(latency_tolerance_percent=10.0)) == [
        "instance numa0: P95 latency 240 ms after the change against 200 ms before (+20%, "
        "tolerance 10% and 15 ms)"
    ]
    assert (
        service_failures(
            before,
            after,
            GatePolicy(latency_tolerance_percent=10.0, latency_tolerance_floor_ms=50.0),
        )
        == []
    )


def test_an_error_rate_above_the_limit_fails_with_the_counts_and_first_errors() -> None:
    broken = load_result(
        server_errors=2,
        no_answer=1,
        first_errors=(
            "reference request: status 503: overloaded",
            "first-token request: no answer",
        ),
    )
    after = service_load(
        {"numa0": broken, "numa1": load_result()}, node=load_result(requests_sent=60)
    )
    assert service_failures(two_instances(), after) == [
        "instance numa0: 3 of 30 chat requests failed after the change (10%, limit 0.5%): 2 "
        "server errors (5xx), 1 without answer, 0 refused (4xx); first: reference request: "
        "status 503: overloaded; first-token request: no answer"
    ]


def test_an_error_rate_at_the_limit_passes_and_the_limit_comes_from_the_policy() -> None:
    at_limit = service_load({"main": load_result(requests_sent=200, client_errors=1)})
    assert service_failures(service_load(), at_limit) == []
    failures = service_failures(service_load(), at_limit, GatePolicy(max_error_rate_percent=0.0))
    assert failures == [
        "instance main: 1 of 200 chat requests failed after the change (0.5%, limit 0%): 0 "
        "server errors (5xx), 0 without answer, 1 refused (4xx)"
    ]


def test_the_pooled_error_rate_is_judged_when_no_instance_is_listed() -> None:
    after = {"instances": {}, "node": load_result(requests_sent=30, no_answer=30)}
    assert service_failures(service_load(), after) == [
        "node (all instances): 30 of 30 chat requests failed after the change (100%, limit "
        "0.5%): 0 server errors (5xx), 30 without answer, 0 refused (4xx)"
    ]


def test_without_a_load_before_only_the_error_rate_is_judged() -> None:
    empty_before = {"instances": {}, "node": load_result(requests_sent=0)}
    for before in (None, empty_before):
        slow = service_load({"main": load_result(900.0)})
        report = evaluate_gates(healthy_inputs(service_before=before, service_after=slow))
        assert report.passed
        assert report.gates["service_load"] == "passed"
        assert report.notes == [
            "service_load: no service load before the change (nothing was running: the "
            "node's first rollout); latency not compared, error rate judged"
        ]
        failing = service_load({"main": load_result(900.0, server_errors=5)})
        failures = service_failures(before, failing)
        assert len(failures) == 1
        assert failures[0].startswith("instance main: 5 of 30 chat requests failed")


def test_without_a_load_after_the_gate_is_skipped() -> None:
    report = evaluate_gates(healthy_inputs(service_after=None))
    assert report.passed
    assert report.gates["service_load"] == "skipped"
    assert report.notes == ["service_load skipped: no service load after the change"]
    empty = {"instances": {}, "node": load_result(requests_sent=0)}
    report = evaluate_gates(healthy_inputs(service_after=empty))
    assert report.gates["service_load"] == "skipped"
    assert report.notes == [
        "service_load skipped: no LingBot instance was measured after the change (before it: main)"
    ]


def test_a_baseline_with_errors_is_noted_not_failed() -> None:
    before = service_load({"main": load_result(server_errors=2)})
    report = evaluate_gates(healthy_inputs(service_before=before, service_after=service_load()))
    assert report.passed
    assert report.notes == [
        "service_load: instance main already had 2 failed of 30 chat requests before the "
        "change (the baseline was unhealthy)"
    ]


def test_a_failed_change_skips_the_service_load_gate() -> None:
    report = evaluate_gates(healthy_inputs(change_failure="task 'Write config' failed: boom"))
    assert report.gates["service_load"] == "skipped"
    assert "service_load skipped: the change did not complete" in report.notes


def test_a_malformed_load_is_refused() -> None:
    with pytest.raises(TypeError, match="instances must be a mapping"):
        evaluate_gates(healthy_inputs(service_after={"instances": ["main"], "node": {}}))


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        (
            GatePolicy(latency_tolerance_percent=-1.0),
            "rollout_gate_latency_tolerance_percent must be from 0 to 1000, not -1.0",
        ),
        (
            GatePolicy(latency_tolerance_floor_ms=float("nan")),
            "rollout_gate_latency_tolerance_floor_ms must be from 0 to 60000 (ms), not nan",
        ),
        (
            GatePolicy(max_error_rate_percent=101.0),
            "rollout_gate_max_error_rate_percent must be from 0 to 100, not 101.0",
        ),
    ],
)
def test_policy_problems_name_the_variable(policy: GatePolicy, problem: str) -> None:
    assert policy.problems() == [problem]
    with pytest.raises(ValueError, match=problem.partition(" must")[0]):
        evaluate_gates(healthy_inputs(), policy)


def test_the_seed_policy_has_no_problem() -> None:
    policy = GatePolicy()
    assert policy.problems() == []
    assert (
        policy.latency_tolerance_percent,
        policy.latency_tolerance_floor_ms,
        policy.max_error_rate_percent,
    ) == (25.0, 15.0, 0.5)


def test_the_action_plugin_passes_the_loads_and_the_policy(tmp_path: Path) -> None:
    before = service_load({"main": load_result(200.0)})
    after = service_load({"main": load_result(240.0)})
    args = {
        "plan": {"instances": []},
        "fresh_probe": {"gpus": [], "pairs": []},
        "health": [{"item": {"name": "main"}, "readiness": {"main": {"ready": True}}}],
        # The registered results of action rollout_gate_reading before and after the change.
        "before": {"previous_probe": {"document": None, "problem": None}, "service_load": before},
        "after": {"service_load": after},
        "latency_tolerance_percent": "10",
        "latency_tolerance_floor_ms": 5,
        "max_error_rate_percent": 0.5,
    }
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-m",
            "rollout_gate",
            "-a",
            json.dumps(args),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
        env={
            **os.environ,
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_ACTION_PLUGINS": str(REPO / "roles" / "rollout_gate" / "action_plugins"),
            "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
            "PYTHONPATH": str(REPO / "python"),
        },
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The ad-hoc output: "localhost | SUCCESS => {result}".
    result = json.loads(done.stdout.partition("=>")[2])
    assert result["gate"]["gates"]["service_load"] == "failed"
    assert result["gate"]["failures"] == [
        {
            "gate": "service_load",
            "evidence": "instance main: P95 latency 240 ms after the change against 200 ms "
            "before (+20%, tolerance 10% and 5 ms)",
        }
    ]
