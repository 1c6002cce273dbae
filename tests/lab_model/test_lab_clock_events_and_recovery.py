"""Faults clock_throttle and recovery_action: the profile checks, the state they give, and
the lab's libnvidia-ml answering pynvml from that state (clock event reasons under both call
names, the recovery action field)."""

from __future__ import annotations

import contextlib
import copy
import ctypes
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from labmodel_support import REPO_ROOT, read_profile_yaml

from lingbot_lab.hwstate import compute_state, flatten_state
from lingbot_lab.profile import validate_profile

NATIVE_DIR = REPO_ROOT / "lab" / "native"
NVML_LIBRARY = NATIVE_DIR / "build" / "libnvidia-ml.so.1"
CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 ro quiet"
GPU_IDLE, HW_SLOWDOWN, SW_THERMAL, HW_THERMAL = 0x1, 0x8, 0x20, 0x40
RECOVERY_ACTION_FIELD = 230
NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED = 0, 3


def profile_with(*faults: dict[str, Any], driver: str | None = None) -> dict[str, Any]:
    raw = copy.deepcopy(read_profile_yaml("a6000-phb"))
    raw["faults"] = list(faults)
    if driver is not None:
        raw.setdefault("driver", {})["version"] = driver
    return raw


def gpu_states(*faults: dict[str, Any], driver: str | None = None) -> list[dict[str, Any]]:
    return compute_state(validate_profile(profile_with(*faults, driver=driver)), CMDLINE)["gpus"]


# ---- profile checks ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ({"kind": "clock_throttle", "gpu": 0}, "faults[0].reasons: missing"),
        ({"kind": "clock_throttle", "gpu": 0, "reasons": []}, "is not a list of clock event"),
        (
            {"kind": "clock_throttle", "gpu": 0, "reasons": ["hw_slowdown", "too_hot"]},
            "faults[0].reasons[1]: 'too_hot' is not a clock event reason; fix: use one of",
        ),
        (
            {"kind": "clock_throttle", "gpu": 0, "reasons": [0x600]},
            "faults[0].reasons[0]: 1536 is not a clock event reason",
        ),
        (
            {"kind": "clock_throttle", "gpu": 0, "reasons": ["hw_slowdown"], "every": 0},
            "faults[0].every: 0 is not an integer in 1..1000",
        ),
        ({"kind": "clock_throttle", "gpu": 5, "reasons": ["hw_slowdown"]}, "faults[0].gpu"),
        ({"kind": "recovery_action", "gpu": 0}, "faults[0].action: missing"),
        (
            {"kind": "recovery_action", "gpu": 0, "action": "reformat"},
            "faults[0].action: 'reformat' is not a GPU recovery action; fix: use one of none, "
            "gpu_reset",
        ),
        ({"kind": "recovery_action", "gpu": 0, "action": -1}, "is not a GPU recovery action"),
    ],
)
def test_bad_faults_are_refused_naming_the_field_and_the_fix(
    fault: dict[str, Any], words: str
) -> None:
    with pytest.raises(ValueError, match="profile a6000-phb") as refused:
        validate_profile(profile_with(fault))
    assert words in str(refused.value)


def test_one_recovery_action_per_gpu() -> None:
    twice = [{"kind": "recovery_action", "gpu": 1, "action": action} for action in (1, 2)]
    with pytest.raises(ValueError, match="gpus\\[1\\] has 2 recovery_action faults"):
        validate_profile(profile_with(*twice))


# ---- the state --------------------------------------------------------------------


def test_the_state_carries_masks_and_the_recovery_action() -> None:
    gpus = gpu_states(
        {"kind": "clock_throttle", "gpu": 0, "reasons": ["hw_slowdown", "hw_thermal_slowdown"]},
        {"kind": "clock_throttle", "gpu": 0, "reasons": [0x400], "every": 2},
        {"kind": "recovery_action", "gpu": 1, "action": "drain_p2p"},
    )
    assert gpus[0]["clock_events"] == [
        {"mask": HW_SLOWDOWN | HW_THERMAL, "every": 1},
        {"mask": 0x400, "every": 2},
    ]
    assert gpus[1]["clock_events"] == []
    # Driver 550 has no recovery action field, unless a fault sets one.
    assert [gpu["recovery_action"] for gpu in gpus] == [None, 3]
    assert [gpu["recovery_action"] for gpu in gpu_states(driver="570.86.15")] == [0, 0]
    text = flatten_state({"gpus": gpus})
    assert "gpu.0.clock_events.count 2\n" in text
    assert f"gpu.0.clock_events.0.mask {HW_SLOWDOWN | HW_THERMAL}\n" in text
    assert "gpu.0.recovery_action -\n" in text
    assert "gpu.1.recovery_action 3\n" in text


# ---- the lab's libnvidia-ml, through pynvml ---------------------------------------


@pytest.fixture
def nvml_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[dict[str, Any]], AbstractContextManager[Any]]:
    """nvml_on(raw profile): a context in which pynvml, bound to the lab's libnvidia-ml,
    is initialized on that profile's state."""
    if not NVML_LIBRARY.exists():
        subprocess.run(["make", "-C", str(NATIVE_DIR)], check=False, capture_output=True)
    if not NVML_LIBRARY.exists():
        pytest.skip("lab/native/build/libnvidia-ml.so.1 is not built (make -C lab/native)")
    pynvml = pytest.importorskip("pynvml")
    monkeypatch.setattr(pynvml, "nvmlLib", ctypes.CDLL(str(NVML_LIBRARY)))
    monkeypatch.setenv("LINGBOT_LAB_ROOT", str(tmp_path))

    @contextlib.contextmanager
    def session(raw: dict[str, Any]) -> Iterator[Any]:
        run_dir = tmp_path / "run" / "lingbot-lab"
        run_dir.mkdir(parents=True, exist_ok=True)
        state = compute_state(validate_profile(raw), CMDLINE)
        (run_dir / "state.txt").write_text(flatten_state(state))
        pynvml.nvmlInit()
        try:
            yield pynvml
        finally:
            pynvml.nvmlShutdown()

    return session


def test_every_nth_reading_has_the_fault_s_reasons_under_both_names(nvml_on: Any) -> None:
    faults = (
        {"kind": "clock_throttle", "gpu": 0, "reasons": ["sw_thermal_slowdown"], "every": 2},
        {"kind": "clock_throttle", "gpu": 1, "reasons": ["hw_slowdown"]},
    )
    with nvml_on(profile_with(*faults)) as nvml:
        first, second = (nvml.nvmlDeviceGetHandleByIndex(index) for index in (0, 1))
        readings = [
            call(first)
            for call in (
                nvml.nvmlDeviceGetCurrentClocksEventReasons,
                nvml.nvmlDeviceGetCurrentClocksThrottleReasons,
            )
            * 2
        ]
        assert readings == [GPU_IDLE, GPU_IDLE | SW_THERMAL, GPU_IDLE, GPU_IDLE | SW_THERMAL]
        assert nvml.nvmlDeviceGetCurrentClocksEventReasons(second) == GPU_IDLE | HW_SLOWDOWN


def test_a_busy_gpu_is_not_idle(nvml_on: Any, tmp_path: Path) -> None:
    busy = tmp_path / "run" / "lingbot-lab" / "busy"
    busy.mkdir(parents=True)
    (busy / "1").write_text("99999999999\n")
    with nvml_on(profile_with()) as nvml:
        handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in (0, 1)]
        assert [nvml.nvmlDeviceGetCurrentClocksEventReasons(h) for h in handles] == [GPU_IDLE, 0]


def recovery_field(nvml: Any, index: int, field_id: int = RECOVERY_ACTION_FIELD) -> Any:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    [field] = nvml.nvmlDeviceGetFieldValues(handle, [field_id])
    return field


def test_the_recovery_action_field_follows_the_driver_and_the_fault(nvml_on: Any) -> None:
    reset_gpu_1 = {"kind": "recovery_action", "gpu": 1, "action": "gpu_reset"}
    with nvml_on(profile_with(reset_gpu_1)) as nvml:
        assert recovery_field(nvml, 0).nvmlReturn == NVML_ERROR_NOT_SUPPORTED
        reset = recovery_field(nvml, 1)
        assert (reset.nvmlReturn, reset.valueType, reset.value.uiVal) == (NVML_SUCCESS, 1, 1)
        assert (reset.fieldId, reset.timestamp > 0) == (RECOVERY_ACTION_FIELD, True)
        assert recovery_field(nvml, 1, field_id=231).nvmlReturn == NVML_ERROR_NOT_SUPPORTED


def test_a_570_driver_answers_none(nvml_on: Any) -> None:
    with nvml_on(profile_with(driver="570.86.15")) as nvml:
        field = recovery_field(nvml, 0)
        assert (field.nvmlReturn, field.value.uiVal) == (NVML_SUCCESS, 0)
