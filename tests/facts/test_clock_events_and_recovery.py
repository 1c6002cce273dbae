"""Clock event reasons judged over several readings (gpu/throttle.py) and the driver's GPU
recovery action (gpu/recovery_action.py): the readers in facts/nvml.py against stand-in
bindings, the findings, and both end to end through the lab's libnvidia-ml."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from facts_support import SMI_COMMAND, boot_lab_node, load_profile

from lingbot_fleet.audit.evaluate import AuditPolicy, evaluate_node
from lingbot_fleet.audit.node_document import collect_node
from lingbot_fleet.facts import gather_facts
from lingbot_fleet.facts.nvml import (
    FIELD_GPU_RECOVERY_ACTION,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NvmlReader,
)
from lingbot_fleet.gpu.linkcheck import LinkPolicy, check_links
from lingbot_fleet.gpu.recovery_action import recovery_action_findings
from lingbot_fleet.gpu.throttle import clock_event_findings, sustained

GPU = {"index": 2, "bus_id": "0000:c1:00.0", "uuid": "GPU-cccc"}
CLOCK_CODES = (
    "GPU_CLOCKS_HW_SLOWDOWN",
    "GPU_CLOCKS_POWER_BRAKE",
    "GPU_CLOCKS_THERMAL_SLOWDOWN",
    "GPU_CLOCK_EVENT_REASON_UNKNOWN",
    "GPU_CLOCK_EVENTS_UNKNOWN",
)
RECOVERY_CODES = ("GPU_RECOVERY_ACTION_REQUIRED", "GPU_RECOVERY_ACTION_UNKNOWN")


def clock_gpu(
    reasons: dict[str, int],
    answered: int = 4,
    taken: int = 4,
    unknown_bits: dict[str, int] | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    return {
        **GPU,
        "clock_events": {
            "readings_answered": answered,
            "readings_taken": taken,
            "reasons": reasons,
            "unknown_bits": unknown_bits or {},
            "error": error,
        },
    }


def codes(findings: list[Any]) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in findings]


# ---- sustained, not one sample ----------------------------------------------------


@pytest.mark.parametrize(
    ("count", "answered", "expected"),
    [(4, 4, True), (3, 4, True), (2, 4, False), (1, 4, False), (2, 2, True), (1, 1, False)],
)
def test_a_reason_is_sustained_in_three_quarters_and_at_least_two(
    count: int, answered: int, expected: bool
) -> None:
    assert sustained(count, answered) is expected


def test_one_sample_of_hw_slowdown_raises_nothing_and_three_of_four_do() -> None:
    assert clock_event_findings(clock_gpu({"hw_slowdown": 1, "gpu_idle": 4})) == []
    assert clock_event_findings(clock_gpu({"hw_slowdown": 2})) == []
    [finding] = clock_event_findings(clock_gpu({"hw_slowdown": 3}))
    assert (finding.code, finding.severity, finding.subject) == (
        "GPU_CLOCKS_HW_SLOWDOWN",
        "error",
        GPU["bus_id"],
    )
    assert finding.message.startswith("GPU 2 (0000:c1:00.0, GPU-cccc): the hardware cut")
    assert "HW slowdown in 3 of 4 readings" in finding.message
    assert "the driver names no cause" in finding.message
    assert finding.evidence["reasons"] == {"hw_slowdown": 3}
    assert (finding.evidence["readings_answered"], finding.evidence["readings_taken"]) == (4, 4)
    assert (finding.evidence["index"], finding.evidence["uuid"]) == (2, "GPU-cccc")
    assert "nvidia-smi -q -d TEMPERATURE,PERFORMANCE -i 2" in finding.fix


def test_hw_thermal_slowdown_names_the_temperature() -> None:
    [finding] = clock_event_findings(clock_gpu({"hw_slowdown": 4, "hw_thermal_slowdown": 4}))
    assert finding.code == "GPU_CLOCKS_HW_SLOWDOWN"
    assert "the temperature is too high (HW thermal slowdown in 4 of 4 readings" in finding.message
    assert "power supplies" not in finding.fix


def test_the_power_brake_has_its_own_finding_and_explains_hw_slowdown() -> None:
    brake = clock_event_findings(clock_gpu({"hw_slowdown": 4, "hw_power_brake_slowdown": 4}))
    assert codes(brake) == [("GPU_CLOCKS_POWER_BRAKE", "error")]
    assert "HW power brake slowdown in 4 of 4 readings" in brake[0].message
    assert "ipmitool sel list" in brake[0].fix
    both = clock_event_findings(
        clock_gpu({"hw_slowdown": 4, "hw_power_brake_slowdown": 4, "hw_thermal_slowdown": 3})
    )
    assert codes(both) == [("GPU_CLOCKS_HW_SLOWDOWN", "error"), ("GPU_CLOCKS_POWER_BRAKE", "error")]


def test_sw_thermal_slowdown_is_a_warning() -> None:
    [finding] = clock_event_findings(clock_gpu({"sw_thermal_slowdown": 4}))
    assert (finding.code, finding.severity) == ("GPU_CLOCKS_THERMAL_SLOWDOWN", "warning")
    assert "SW thermal slowdown in 4 of 4 readings" in finding.message


def test_idle_application_clocks_and_the_sw_power_cap_are_how_a_gpu_runs() -> None:
    reasons = {
        "gpu_idle": 4,
        "applications_clocks_setting": 4,
        "sw_power_cap": 4,
        "sync_boost": 4,
        "display_clock_setting": 4,
    }
    assert clock_event_findings(clock_gpu(reasons)) == []


def test_an_unknown_bit_is_a_note_naming_it() -> None:
    [finding] = clock_event_findings(clock_gpu({}, unknown_bits={"0x400": 4, "0x800": 1}))
    assert (finding.code, finding.severity) == ("GPU_CLOCK_EVENT_REASON_UNKNOWN", "info")
    assert "0x400 in 4 of 4" in finding.message
    assert "0x800" not in finding.message


def test_readings_that_could_not_be_taken_are_unknown_never_healthy() -> None:
    [none] = clock_event_findings(clock_gpu({}, answered=0, error="Not Supported"))
    assert (none.code, none.severity) == ("GPU_CLOCK_EVENTS_UNKNOWN", "info")
    assert "NVML answered 0 of 4 clock event readings (Not Supported)" in none.message
    [one] = clock_event_findings(clock_gpu({"hw_slowdown": 1}, answered=1, error="Timeout"))
    assert one.code == "GPU_CLOCK_EVENTS_UNKNOWN"
    assert clock_event_findings(GPU) == []


# ---- the recovery action ----------------------------------------------------------


def recovery_gpu(value: int | None, supported: bool | None = True) -> dict[str, Any]:
    return {
        **GPU,
        "recovery_action": {"value": value, "name": "x", "supported": supported, "note": None},
    }


@pytest.mark.parametrize(
    ("value", "severity", "words"),
    [
        (1, "critical", "nvidia-smi -r -i 2"),
        (2, "critical", "reboot"),
        (3, "error", "UVM persistence mode"),
        (4, "critical", "then reset it (nvidia-smi -r -i 2)"),
        (5, "error", "nvidia-imex"),
        (6, "critical", "reset the GPU's bus"),
        (7, "critical", "power-cycle"),
    ],
)
def test_each_recovery_action_is_required(value: int, severity: str, words: str) -> None:
    [finding] = recovery_action_findings(recovery_gpu(value))
    assert (finding.code, finding.severity, finding.subject) == (
        "GPU_RECOVERY_ACTION_REQUIRED",
        severity,
        GPU["bus_id"],
    )
    assert finding.message.startswith("GPU 2 (0000:c1:00.0, GPU-cccc): the driver asks for")
    assert finding.evidence["recovery_action"] == value
    assert words in finding.fix


def test_no_action_an_older_driver_or_no_reading_raise_nothing() -> None:
    assert recovery_action_findings(recovery_gpu(0)) == []
    assert recovery_action_findings(recovery_gpu(None, supported=False)) == []
    assert recovery_action_findings(recovery_gpu(None, supported=None)) == []
    assert recovery_action_findings(GPU) == []


def test_an_unknown_recovery_action_is_a_note_naming_the_value() -> None:
    [finding] = recovery_action_findings(recovery_gpu(9))
    assert (finding.code, finding.severity) == ("GPU_RECOVERY_ACTION_UNKNOWN", "info")
    assert "recovery action 9" in finding.message


# ---- the readers, against stand-in bindings ---------------------------------------


class FakeNvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_field(status: int, value_type: int = 1) -> SimpleNamespace:
    """An nvmlFieldValue_t as pynvml gives it: its return, value type and value union."""
    return SimpleNamespace(
        nvmlReturn=status, valueType=value_type, value=SimpleNamespace(uiVal=2, ullVal=2)
    )


class FakeNvml:
    """Just what NvmlReader.clock_events calls: a driver library without the newer name
    (FUNCTION_NOT_FOUND), the older name answering ``masks`` in turn (a negative one: that
    NVML error)."""

    NVMLError = FakeNvmlError

    def __init__(self, masks: list[int], names: bool = True) -> None:
        self.masks = list(masks)
        self.calls: list[str] = []
        if names:
            self.nvmlDeviceGetCurrentClocksEventReasons = self._events
            self.nvmlDeviceGetCurrentClocksThrottleReasons = self._throttle

    def _events(self, handle: Any) -> int:
        self.calls.append(f"event {handle}")
        raise FakeNvmlError(NVML_ERROR_FUNCTION_NOT_FOUND)

    def _throttle(self, handle: Any) -> int:
        self.calls.append(f"throttle {handle}")
        mask = self.masks.pop(0)
        if mask < 0:
            raise FakeNvmlError(-mask)
        return mask


def test_four_readings_one_wait_a_round_and_the_older_name_when_the_newer_is_missing() -> None:
    nvml = FakeNvml([0x1, 0x8 | 0x400, 0x8, 0x8, 0x8, -NVML_ERROR_NOT_SUPPORTED, 0x8, 0x1])
    reader = NvmlReader(nvml)
    reader.handles = ["h0", None, "h2"]
    gpus: list[dict[str, Any]] = [{"index": 0}, {"index": 1, "lost": True}, {"index": 2}]
    waits: list[float] = []
    reader.clock_events(gpus, sleep=waits.append)
    assert waits == [0.1, 0.1, 0.1]
    assert nvml.calls[:3] == ["event h0", "throttle h0", "throttle h2"]
    assert "clock_events" not in gpus[1]
    assert gpus[0]["clock_events"] == {
        "readings_answered": 4,
        "readings_taken": 4,
        "reasons": {"gpu_idle": 1, "hw_slowdown": 3},
        "unknown_bits": {},
        "error": None,
    }
    assert gpus[2]["clock_events"] == {
        "readings_answered": 3,
        "readings_taken": 4,
        "reasons": {"hw_slowdown": 2, "gpu_idle": 1},
        "unknown_bits": {"0x400": 1},
        "error": f"NVML error {NVML_ERROR_NOT_SUPPORTED}",
    }


def test_a_binding_without_either_call_leaves_the_reasons_unknown() -> None:
    reader = NvmlReader(FakeNvml([], names=False))
    reader.handles = ["h0"]
    gpus: list[dict[str, Any]] = [{"index": 0}]
    reader.clock_events(gpus, sleep=pytest.fail)
    assert gpus[0]["clock_events"]["readings_taken"] == 0
    assert "has neither" in gpus[0]["clock_events"]["error"]
    [note] = clock_event_findings({**GPU, **gpus[0]})
    assert note.code == "GPU_CLOCK_EVENTS_UNKNOWN"


class FieldNvml:
    """Just what NvmlReader.recovery_action calls: nvmlDeviceGetFieldValues answering
    ``answer`` (a field, or an NVML error it raises)."""

    NVMLError = FakeNvmlError

    def __init__(self, answer: SimpleNamespace | FakeNvmlError) -> None:
        self.answer = answer
        self.asked: list[list[int]] = []
        self.nvmlDeviceGetFieldValues = self._field_values

    def _field_values(self, _handle: Any, field_ids: list[int]) -> list[SimpleNamespace]:
        self.asked.append(field_ids)
        if isinstance(self.answer, FakeNvmlError):
            raise self.answer
        return [self.answer]


def test_the_recovery_action_field_is_read_by_its_value_type() -> None:
    nvml = FieldNvml(fake_field(0, value_type=3))
    assert NvmlReader(nvml).recovery_action("h") == {
        "value": 2,
        "name": "node_reboot",
        "supported": True,
        "note": None,
    }
    assert nvml.asked == [[FIELD_GPU_RECOVERY_ACTION]]


def test_an_older_driver_says_not_supported_in_a_note() -> None:
    for answer in (fake_field(NVML_ERROR_NOT_SUPPORTED), FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)):
        reading = NvmlReader(FieldNvml(answer)).recovery_action("h")
        assert (reading["value"], reading["supported"]) == (None, False)
        assert "a driver before R570" in reading["note"]
    other = NvmlReader(FieldNvml(fake_field(999))).recovery_action("h")
    assert (other["supported"], other["note"]) == (
        None,
        "the GPU recovery action could not be read: NVML error 999",
    )


# ---- end to end through the lab's libnvidia-ml ------------------------------------


def lab_facts(
    tmp_path: Path, lab_env: Any, *faults: dict[str, Any], driver: str | None = None
) -> dict[str, Any]:
    profile = copy.deepcopy(load_profile("pcie-4gpu-two-switches"))
    profile["faults"] = list(faults)
    if driver is not None:
        profile.setdefault("driver", {})["version"] = driver
    node = boot_lab_node(profile, tmp_path)
    lab_env(node)
    return gather_facts(root=str(node.root), use_nvml=True)


def health_codes(facts: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (f.code, f.severity, f.subject)
        for f in check_links(facts, LinkPolicy())
        if f.code in CLOCK_CODES + RECOVERY_CODES
    ]


def test_a_healthy_lab_gpu_idles_and_its_driver_has_no_recovery_field(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    facts = lab_facts(tmp_path, lab_env)
    gpu = facts["gpus"][0]
    assert gpu["clock_events"] == {
        "readings_answered": 4,
        "readings_taken": 4,
        "reasons": {"gpu_idle": 4},
        "unknown_bits": {},
        "error": None,
    }
    assert gpu["recovery_action"]["supported"] is False
    assert health_codes(facts) == []


def test_lab_faults_are_named_sustained_only(tmp_path: Path, lab_env: Any, lab_pynvml: Any) -> None:
    facts = lab_facts(
        tmp_path,
        lab_env,
        {"kind": "clock_throttle", "gpu": 0, "reasons": ["hw_slowdown", "hw_thermal_slowdown"]},
        {"kind": "clock_throttle", "gpu": 1, "reasons": ["sw_thermal_slowdown"], "every": 4},
        {"kind": "clock_throttle", "gpu": 2, "reasons": ["hw_power_brake_slowdown", 0x400]},
        {"kind": "recovery_action", "gpu": 3, "action": "drain_and_reset"},
        driver="570.86.15",
    )
    bus = [gpu["bus_id"] for gpu in facts["gpus"]]
    assert facts["gpus"][1]["clock_events"]["reasons"] == {"gpu_idle": 4, "sw_thermal_slowdown": 1}
    assert [gpu["recovery_action"]["name"] for gpu in facts["gpus"]] == [
        "none",
        "none",
        "none",
        "drain_and_reset",
    ]
    assert health_codes(facts) == [
        ("GPU_CLOCKS_HW_SLOWDOWN", "error", bus[0]),
        ("GPU_CLOCKS_POWER_BRAKE", "error", bus[2]),
        ("GPU_CLOCK_EVENT_REASON_UNKNOWN", "info", bus[2]),
        ("GPU_RECOVERY_ACTION_REQUIRED", "critical", bus[3]),
    ]


def test_a_gpu_that_must_be_reset_is_left_out_of_the_plan(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    profile = copy.deepcopy(load_profile("pcie-4gpu-two-switches"))
    profile["faults"] = [{"kind": "recovery_action", "gpu": 1, "action": "gpu_reset"}]
    node = boot_lab_node(profile, tmp_path)
    lab_env(node)
    record = evaluate_node(
        collect_node(root=str(node.root), use_nvml=True, smi_command=SMI_COMMAND), AuditPolicy()
    )
    required = [f for f in record["findings"] if f["code"] == "GPU_RECOVERY_ACTION_REQUIRED"]
    assert [(f["severity"], f["subject"]) for f in required] == [
        ("critical", record["facts"]["gpus"][1]["bus_id"])
    ]
    planned = {index for instance in record["plan"]["instances"] for index in instance["gpus"]}
    assert 1 not in planned
    assert planned, record["plan"]
