"""NVLink error counters rising between readings (gpu/nvlink.py nvlink_error_findings): the
reader in facts/nvml.py against a stand-in binding, the finding, the monitor's window since
its last run (monitor/state.py), and all of it end to end through the lab's libnvidia-ml
(fault nvlink_errors); the monitor's run over a lab node in
tests/monitor/test_monitor_nvlink_errors.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from facts_support import boot_lab_node, load_profile

from lingbot_fleet.facts import gather_facts
from lingbot_fleet.facts.nvml import NVLINK_ERROR_COUNTERS, NvmlReader
from lingbot_fleet.gpu.linkcheck import LinkPolicy, check_links
from lingbot_fleet.gpu.nvlink import nvlink_error_findings
from lingbot_fleet.monitor.state import nvlink_error_readings, widen_nvlink_error_windows

H100 = "h100-sxm-nvswitch"
CODES = ("NVLINK_ERRORS_RISING", "NVLINK_ERRORS_UNKNOWN")


def gpu_with(
    earlier: dict[str, int] | None, latest: dict[str, int] | None, active: int = 18
) -> dict[str, Any]:
    return {
        "index": 3,
        "bus_id": "0000:4b:00.0",
        "uuid": "GPU-3333",
        "model": "NVIDIA H100 80GB HBM3",
        "nvlink": {
            "links": 18,
            "active": active,
            "errors_earlier": earlier,
            "errors": latest,
            "errors_window_s": 0.3,
        },
    }


ZERO = dict.fromkeys(NVLINK_ERROR_COUNTERS, 0)


# ---- the finding --------------------------------------------------------------------


def test_replays_rising_are_a_warning_naming_the_gpu_the_counter_and_the_window() -> None:
    [finding] = nvlink_error_findings(gpu_with(ZERO, {**ZERO, "replay": 7, "crc_flit": 2}))
    assert (finding.code, finding.severity, finding.subject) == (
        "NVLINK_ERRORS_RISING",
        "warning",
        "0000:4b:00.0",
    )
    assert finding.message == (
        "GPU 3 (0000:4b:00.0, GPU-3333): NVLink error counters rose over 0.3 s "
        "(crc_flit +2, replay +7): its links retry data, which costs peer copies bandwidth"
    )
    assert finding.evidence["rises"] == {"crc_flit": 2, "replay": 7}
    assert "nvidia-smi nvlink -e -i 3" in finding.fix


def test_a_recovery_is_an_error() -> None:
    [finding] = nvlink_error_findings(gpu_with(ZERO, {**ZERO, "recovery": 1}))
    assert finding.severity == "error"
    assert "a link went down and retrained" in finding.message


@pytest.mark.parametrize(
    ("earlier", "latest"),
    [
        (ZERO, ZERO),  # nothing rose
        ({**ZERO, "replay": 90}, {**ZERO, "replay": 90}),  # old errors, not rising
        ({**ZERO, "replay": 90}, {**ZERO, "replay": 3, "crc_data": 3}),  # reset in between
    ],
)
def test_counters_that_stand_still_or_were_reset_raise_nothing(
    earlier: dict[str, int], latest: dict[str, int]
) -> None:
    assert nvlink_error_findings(gpu_with(earlier, latest)) == []


def test_counters_that_could_not_be_read_are_unknown_never_healthy() -> None:
    [finding] = nvlink_error_findings(gpu_with(None, None))
    assert (finding.code, finding.severity) == ("NVLINK_ERRORS_UNKNOWN", "info")
    # A GPU whose links are all down: NVLINK_LINKS_DOWN says so; no second note.
    assert nvlink_error_findings(gpu_with(None, None, active=0)) == []
    # Facts without the readings (an older facts document, nvidia-smi): not judged.
    assert nvlink_error_findings({"index": 0, "bus_id": "x", "nvlink": {"links": 18}}) == []


# ---- the reader ---------------------------------------------------------------------


class NvmlError(Exception):
    pass


def stand_in(counts: dict[tuple[int, int], int], links: int = 2) -> Any:
    """A binding with ``links`` NVLinks and per (link, counter) counts; others unsupported."""

    def state(_handle: Any, link: int) -> int:
        if link >= links:
            raise NvmlError("not supported")
        return 1

    def counter(_handle: Any, link: int, number: int) -> int:
        if (link, number) not in counts:
            raise NvmlError("not supported")
        return counts[(link, number)]

    return SimpleNamespace(
        NVMLError=NvmlError,
        nvmlDeviceGetNvLinkState=state,
        nvmlDeviceGetNvLinkErrorCounter=counter,
    )


def test_each_counter_is_summed_over_the_links_that_answer_it() -> None:
    reader = NvmlReader(stand_in({(0, 0): 5, (1, 0): 2, (1, 1): 1, (7, 0): 99}))
    assert reader.nvlink_error_counts("handle") == {"replay": 7, "recovery": 1}
    assert NvmlReader(stand_in({})).nvlink_error_counts("handle") is None
    without_call = stand_in({(0, 0): 1})
    del without_call.nvmlDeviceGetNvLinkErrorCounter
    assert NvmlReader(without_call).nvlink_error_counts("handle") is None


def test_two_readings_a_window_apart_land_in_the_facts() -> None:
    counts = {(0, 0): 5}
    reader = NvmlReader(stand_in(counts))
    reader.handles = ["h0", "h1", None]
    gpus: list[dict[str, Any]] = [
        {"index": 0, "nvlink": {"links": 2, "active": 2}},
        {"index": 1, "nvlink": None},  # a PCIe GPU
        {"index": 2, "lost": True},
    ]
    clock = iter([10.0, 10.25])
    second = reader.nvlink_errors(gpus, clock=lambda: next(clock))
    counts[(0, 0)] = 9
    second()
    assert gpus[0]["nvlink"] == {
        "links": 2,
        "active": 2,
        "errors_earlier": {"replay": 5},
        "errors": {"replay": 9},
        "errors_window_s": 0.25,
    }
    assert gpus[1] == {"index": 1, "nvlink": None}
    assert gpus[2] == {"index": 2, "lost": True}


# ---- the monitor's window since its last run ------------------------------------------


def facts_of(*gpus: dict[str, Any]) -> dict[str, Any]:
    return {"gpus": list(gpus)}


def test_the_monitor_judges_the_rise_since_its_last_run() -> None:
    earlier = facts_of({**gpu_with({"replay": 10}, {"replay": 10}), "uuid": "GPU-a"})
    previous = {"nvlink_errors": nvlink_error_readings(earlier, 1000.0)}
    assert previous["nvlink_errors"] == {"GPU-a": {"counts": {"replay": 10}, "unix_s": 1000.0}}
    # This run's own two readings show no rise; since the last run, 5 more replays.
    now = facts_of({**gpu_with({"replay": 15}, {"replay": 15}), "uuid": "GPU-a"})
    widen_nvlink_error_windows(now, previous, 1300.0)
    nvlink = now["gpus"][0]["nvlink"]
    assert (nvlink["errors_earlier"], nvlink["errors_window_s"]) == ({"replay": 10}, 300.0)
    [finding] = nvlink_error_findings(now["gpus"][0])
    assert "rose over 300.0 s (replay +5)" in finding.message


@pytest.mark.parametrize(
    ("reading", "unix_s"),
    [
        ({"counts": {"replay": 50}, "unix_s": 1000.0}, 1300.0),  # reset since: counters fell
        ({"counts": {"replay": 1}, "unix_s": 2000.0}, 1300.0),  # the clock went back
        ({"counts": {"replay": "many"}, "unix_s": 1000.0}, 1300.0),  # a damaged state
        ({"counts": None, "unix_s": 1000.0}, 1300.0),
    ],
)
def test_the_run_keeps_its_own_window_when_the_last_reading_does_not_hold(
    reading: dict[str, Any], unix_s: float
) -> None:
    now = facts_of({**gpu_with({"replay": 15}, {"replay": 15}), "uuid": "GPU-a"})
    widen_nvlink_error_windows(now, {"nvlink_errors": {"GPU-a": reading}}, unix_s)
    assert now["gpus"][0]["nvlink"]["errors_earlier"] == {"replay": 15}
    assert now["gpus"][0]["nvlink"]["errors_window_s"] == 0.3
    # Another GPU's reading (by UUID) is not this one's.
    other = facts_of({**gpu_with({"replay": 15}, {"replay": 15}), "uuid": "GPU-b"})
    widen_nvlink_error_windows(other, {"nvlink_errors": {"GPU-a": reading}}, unix_s)
    assert other["gpus"][0]["nvlink"]["errors_window_s"] == 0.3


# ---- end to end through the lab's libnvidia-ml ---------------------------------------


def h100_node(tmp_path: Path, lab_env: Any, faults: list[dict[str, Any]]) -> Any:
    profile = load_profile(H100)
    profile["faults"] = faults
    node = boot_lab_node(profile, tmp_path)
    lab_env(node)
    return node


def health(facts: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (f.code, f.severity, f.subject) for f in check_links(facts, LinkPolicy()) if f.code in CODES
    ]


def test_a_lab_gpu_whose_replays_rise_is_named_and_the_others_are_not(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    # 6000 a minute: 100 a second, so the facts' own window (the clock event readings,
    # three waits of 100 ms) sees about 30.
    faults = [
        {"kind": "nvlink_errors", "gpu": 2, "counter": "replay", "per_minute": 6000},
        {"kind": "nvlink_errors", "gpu": 5, "counter": "recovery", "per_minute": 6000},
    ]
    node = h100_node(tmp_path, lab_env, faults)
    facts = gather_facts(root=str(node.root), use_nvml=True)
    bus = [gpu["bus_id"] for gpu in facts["gpus"]]
    nvlink = facts["gpus"][2]["nvlink"]
    assert nvlink["errors_window_s"] >= 0.3
    assert nvlink["errors"]["replay"] > nvlink["errors_earlier"]["replay"]
    assert facts["gpus"][0]["nvlink"]["errors"] == dict.fromkeys(NVLINK_ERROR_COUNTERS, 0)
    assert health(facts) == [
        ("NVLINK_ERRORS_RISING", "warning", bus[2]),
        ("NVLINK_ERRORS_RISING", "error", bus[5]),
    ]


def test_errors_from_before_that_stand_still_are_no_finding(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    # 1 a minute from 40: the count stays 40 over the facts' window (well under a minute).
    faults = [
        {"kind": "nvlink_errors", "gpu": 1, "counter": "crc_flit", "per_minute": 1, "count": 40}
    ]
    node = h100_node(tmp_path, lab_env, faults)
    facts = gather_facts(root=str(node.root), use_nvml=True)
    assert facts["gpus"][1]["nvlink"]["errors"]["crc_flit"] == 40
    assert health(facts) == []
