"""Fault nvlink_errors: the profile checks, the state it gives (counters that rise with the
wall clock from the boot, or from the incident that starts them), and the lab's
libnvidia-ml answering nvmlDeviceGetNvLinkErrorCounter from that state; the profile checks
of fault pages_retired too."""

from __future__ import annotations

import copy
import ctypes
import json
import time
from pathlib import Path
from typing import Any

import pytest
from labmodel_support import REPO_ROOT, read_profile_yaml

from lingbot_lab.hwstate import compute_state, flatten_state
from lingbot_lab.profile import validate_profile

NVML_LIBRARY = REPO_ROOT / "lab" / "native" / "build" / "libnvidia-ml.so.1"
CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 ro quiet"
REPLAY, RECOVERY = 0, 1


def h100_with(*faults: dict[str, Any]) -> dict[str, Any]:
    raw = copy.deepcopy(read_profile_yaml("h100-sxm-nvswitch"))
    raw["faults"] = list(faults)
    return raw


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (
            {
                **read_profile_yaml("a6000-phb"),
                "faults": [
                    {"kind": "nvlink_errors", "gpu": 0, "counter": "replay", "per_minute": 1}
                ],
            },
            "faults[0].gpu: gpus[0] has no NVLinks, so it has no NVLink error counters; fix: "
            "give the fault to a GPU with nvlinks",
        ),
        (
            h100_with({"kind": "nvlink_errors", "gpu": 0, "counter": "crc", "per_minute": 1}),
            "faults[0].counter: 'crc' is not one of replay, recovery, crc_flit, crc_data, ecc_data",
        ),
        (
            h100_with({"kind": "nvlink_errors", "gpu": 0, "counter": "replay"}),
            "faults[0].per_minute: missing",
        ),
        (
            h100_with({"kind": "nvlink_errors", "gpu": 0, "counter": "replay", "per_minute": 0}),
            "faults[0].per_minute: 0 is not an integer in 1..1048576",
        ),
        (
            h100_with(
                {
                    "kind": "nvlink_errors",
                    "gpu": 0,
                    "counter": "replay",
                    "per_minute": 1,
                    "count": -1,
                }
            ),
            "faults[0].count: -1 is not an integer",
        ),
        (
            h100_with({"kind": "pages_retired", "gpu": 0, "pending": "yes"}),
            "faults[0].pending: 'yes' is not true or false; fix: write true",
        ),
        (
            h100_with({"kind": "pages_retired", "gpu": 0, "double_bit": -2}),
            "faults[0].double_bit: -2 is not an integer in 0..65536",
        ),
        (
            h100_with({"kind": "pages_retired", "gpu": 9}),
            "faults[0].gpu: 9 is not an integer in 0..7",
        ),
    ],
)
def test_bad_faults_are_refused_naming_the_field_and_the_fix(
    raw: dict[str, Any], words: str
) -> None:
    with pytest.raises(ValueError, match="profile ") as refused:
        validate_profile(raw)
    assert words in str(refused.value)


def test_the_state_counts_from_the_boot_unless_the_fault_says_since() -> None:
    raw = h100_with(
        {"kind": "nvlink_errors", "gpu": 1, "counter": "recovery", "per_minute": 6},
        {"kind": "nvlink_errors", "gpu": 1, "counter": "replay", "per_minute": 60, "count": 9},
    )
    profile = validate_profile(raw)
    profile["faults"][1]["since_unix_s"] = 1500.0
    state = compute_state(profile, CMDLINE, 1000.0)
    assert state["boot"]["booted_unix_s"] == 1000.0
    assert state["gpus"][0]["nvlink_errors"] == []
    assert state["gpus"][1]["nvlink_errors"] == [
        {"counter": RECOVERY, "count": 0, "per_minute": 6, "since_unix_s": 1000.0},
        {"counter": REPLAY, "count": 9, "per_minute": 60, "since_unix_s": 1500.0},
    ]
    assert "gpu.1.nvlink_errors.1.since_unix_s 1500.0\n" in flatten_state(state)


@pytest.fixture
def nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """pynvml on the lab's libnvidia-ml, initialized on an H100 node whose GPU 2 has had
    replays rising 600 a minute for 10 s, and GPU 3 90 recoveries that stand still."""
    pynvml = pytest.importorskip("pynvml")
    monkeypatch.setattr(pynvml, "nvmlLib", ctypes.CDLL(str(NVML_LIBRARY)))
    monkeypatch.setenv("LINGBOT_LAB_ROOT", str(tmp_path))
    raw = h100_with(
        {"kind": "nvlink_errors", "gpu": 2, "counter": "replay", "per_minute": 600},
        {"kind": "nvlink_errors", "gpu": 3, "counter": "recovery", "per_minute": 1, "count": 90},
    )
    state = compute_state(validate_profile(raw), CMDLINE, time.time() - 10)
    state["gpus"][3]["nvlink_errors"][0]["since_unix_s"] = time.time() + 3600
    run_dir = tmp_path / "run" / "lingbot-lab"
    run_dir.mkdir(parents=True)
    (run_dir / "state.txt").write_text(flatten_state(state))
    (run_dir / "state.json").write_text(json.dumps(state))
    pynvml.nvmlInit()
    yield pynvml
    pynvml.nvmlShutdown()


def test_the_counter_rises_on_the_first_link_with_the_wall_clock(nvml: Any) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex(2)
    first = nvml.nvmlDeviceGetNvLinkErrorCounter(handle, 0, REPLAY)
    assert 99 <= first <= 400  # ten seconds at ten a second, and the read's own delay
    time.sleep(0.3)
    assert nvml.nvmlDeviceGetNvLinkErrorCounter(handle, 0, REPLAY) >= first + 2
    assert nvml.nvmlDeviceGetNvLinkErrorCounter(handle, 1, REPLAY) == 0
    assert nvml.nvmlDeviceGetNvLinkErrorCounter(handle, 0, RECOVERY) == 0
    # Before its start (an incident's since in the future) a counter holds its count.
    standing = nvml.nvmlDeviceGetHandleByIndex(3)
    assert nvml.nvmlDeviceGetNvLinkErrorCounter(standing, 0, RECOVERY) == 90


def test_links_and_counters_nvml_does_not_have_are_refused(nvml: Any) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetNvLinkErrorCounter(handle, 18, REPLAY)  # links are 0..17
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetNvLinkErrorCounter(handle, 0, 5)
