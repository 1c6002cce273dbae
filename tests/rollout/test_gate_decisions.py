"""The rollout gate's decisions from the raw results Ansible hands the role's actions: the
previous probe (slurp, and stat when the slurp failed), a failed task, the readiness loop,
the node readings, the rollback sentence, the kept result, the playbook's settings."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from test_gates import probe

from lingbot_fleet.rollout import (
    HealthResult,
    NodeReading,
    batch_plan_of_hosts,
    gate_result,
    health_from_results,
    max_fail_percentage_problem,
    node_reading,
    previous_probe_reading,
    rollback_text,
    task_failure,
)

PATH = "/var/lib/lingbot-fleet/probe/latest.json"


def slurped(text: str) -> dict[str, Any]:
    return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64"}


def slurp_failed(message: str) -> dict[str, Any]:
    return {"failed": True, "msg": message}


def stat_of(exists: bool) -> dict[str, Any]:
    return {"changed": False, "stat": {"exists": exists}}


# --- previous probe -------------------------------------------------------------------


def test_a_saved_probe_is_the_previous_probe() -> None:
    document = probe()
    assert previous_probe_reading(slurped(json.dumps(document))) == (document, None)


def test_a_probe_the_stat_finds_missing_is_no_previous_probe_and_no_problem() -> None:
    # Whatever the slurp's words: the file's state decides.
    assert previous_probe_reading(slurp_failed("anything at all"), stat_of(False)) == (None, None)


def test_a_probe_that_exists_but_cannot_be_read_is_a_problem_named_by_the_slurp() -> None:
    # The old text test took "not found" in the message for a missing file.
    failed = slurp_failed(f"File is not readable: {PATH} (not found in the cache)")
    assert previous_probe_reading(failed, stat_of(True)) == (
        None,
        f"File is not readable: {PATH} (not found in the cache)",
    )


def test_a_slurp_failure_the_stat_cannot_explain_is_a_problem() -> None:
    failed = slurp_failed(f"File not found: {PATH}")
    assert previous_probe_reading(failed) == (None, f"File not found: {PATH}")
    assert previous_probe_reading(failed, {"failed": True, "msg": "permission denied"}) == (
        None,
        f"File not found: {PATH}",
    )


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        (slurped("{not json"), "latest.json is not JSON"),
        (slurped('{"schema_version": 1}'), "latest.json is not a probe document (no gpus list)"),
        ({"content": "%%%"}, "latest.json is not UTF-8 text"),
        ({"encoding": "base64"}, "latest.json was read but no content came back"),
    ],
)
def test_a_saved_probe_that_is_not_a_probe_is_a_problem(
    result: dict[str, Any], problem: str
) -> None:
    document, found = previous_probe_reading(result)
    assert document is None
    assert found is not None and found.startswith(problem)


# --- failed tasks and readiness ---------------------------------------------------------


def test_a_failed_task_is_named_with_its_message_on_one_line() -> None:
    assert task_failure("Write grub", {"failed": True, "msg": "grub did\n  not validate"}) == (
        "task 'Write grub' failed: grub did not validate"
    )
    assert task_failure(None, {}) == "task 'unknown task' failed: failed without a message"
    assert task_failure("Write grub", None) == "task 'Write grub' failed: failed without a message"


def ready(name: str) -> dict[str, Any]:
    return {
        "__lingbot_service_instance": {"name": name, "port": 8000},
        "ansible_loop_var": "__lingbot_service_instance",
        "failed": False,
        "readiness": {name: {"ready": True, "port": 8000}},
    }


def test_readiness_results_say_which_instance_is_healthy() -> None:
    not_ready = {
        "item": {"name": "b", "port": 8001},
        "failed": False,
        "msg": "lingbot@b.service is not ready\non port 8001",
        "journal": ["x"],
    }
    unreachable = ready("c") | {"unreachable": True, "msg": "ssh: connection refused"}
    assert health_from_results([ready("a"), not_ready, unreachable]) == [
        HealthResult("a", True, ""),
        HealthResult("b", False, "lingbot@b.service is not ready on port 8001"),
        HealthResult("c", False, "ssh: connection refused"),
    ]


def test_a_readiness_result_of_another_instance_is_not_health() -> None:
    other = ready("a") | {"readiness": {"z": {"ready": True}}}
    assert health_from_results([other]) == [HealthResult("a", False, "no answer")]


def test_a_readiness_result_without_its_instance_is_refused() -> None:
    with pytest.raises(TypeError, match="needs its loop item"):
        health_from_results([{"failed": False, "readiness": {}}])


# --- node readings ----------------------------------------------------------------------


def test_a_node_reading_gives_the_previous_probe_and_the_load() -> None:
    load = {"instances": {}, "node": {"requests_sent": 0}}
    document = probe()
    reading = node_reading(
        {"previous_probe": {"document": document, "problem": None}, "service_load": load}
    )
    assert reading == NodeReading(document, None, load)
    assert node_reading({"previous_probe": {"document": None, "problem": "bad"}}) == NodeReading(
        None, "bad", None
    )
    assert node_reading(None) == NodeReading()


def test_a_node_reading_that_is_not_one_is_refused() -> None:
    with pytest.raises(TypeError, match="rollout_gate_reading"):
        node_reading("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="load mapping of lingbot_chat_load"):
        node_reading({"service_load": [1]})


# --- outcome ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ((None,), "nothing to roll back: this run changed no file on the node"),
        (("",), "nothing to roll back: this run changed no file on the node"),
        (
            (3, 4),
            "rolled back: generation 3 undone, node back to generation 2 (the rollback "
            "recorded as generation 4)",
        ),
        (
            ("3", None),
            "rolled back: generation 3 undone, node back to generation 2 (the rollback "
            "recorded as generation -)",
        ),
        (
            (3, 4, True, "never"),
            "rolled back: generation 3 undone, node back to generation 2 (the rollback "
            "recorded as generation 4), reboot required",
        ),
        (
            (3, 4, True, "if_required"),
            "rolled back: generation 3 undone, node back to generation 2 (the rollback "
            "recorded as generation 4)",
        ),
    ],
)
def test_the_rollback_sentence(arguments: tuple[Any, ...], text: str) -> None:
    assert rollback_text(*arguments) == text


def test_the_kept_result_of_a_failed_node_carries_the_message_that_fails_it() -> None:
    gate = {"passed": False, "message": "n1 failed rollout gate(s) probe_paths: [x]", "host": "n1"}
    kept = gate_result(gate, "rolled back: generation 3 undone")
    assert kept["rollback"] == "rolled back: generation 3 undone"
    assert kept["failure"] == (
        "n1 failed rollout gate(s) probe_paths: [x]; rolled back: generation 3 undone"
    )
    assert kept["host"] == "n1"
    assert gate_result(gate, None)["failure"].endswith("; not rolled back")


def test_the_kept_result_of_a_node_that_passed_fails_nothing() -> None:
    kept = gate_result({"passed": True, "message": "n1 passed every rollout gate"}, None)
    assert kept["failure"] is None
    assert kept["rollback"] is None


@pytest.mark.parametrize("value", [0, 25, 100, "0", "40"])
def test_a_whole_percentage_is_a_max_fail_percentage(value: Any) -> None:
    assert max_fail_percentage_problem(value) is None


@pytest.mark.parametrize("value", [101, -1, "5%", 5.5, "ten", True, None])
def test_anything_else_is_refused_as_max_fail_percentage(value: Any) -> None:
    assert max_fail_percentage_problem(value) == (
        "rollout_max_fail_percentage must be a whole percentage from 0 to 100 (0 stops the "
        f"rollout at the first node that fails its gate); got {value}"
    )


def test_the_batch_plan_is_the_first_host_s_that_has_one() -> None:
    plan = {"batches": [["n1"]]}
    assert batch_plan_of_hosts([None, plan, {"batches": []}]) is plan
    assert batch_plan_of_hosts([None, "text"]) is None
    assert batch_plan_of_hosts([]) is None
