"""Xid events: the kernel log reader (/dev/kmsg records), the findings per GPU and code, and
the lab's kernel log (faults gpu_lost and xid at boot, lingbot-lab-incident while it runs)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from facts_support import boot_lab_node, load_profile

from lingbot_fleet.facts import gather_facts
from lingbot_fleet.facts.kernel_log import (
    UNPARSED_LINES_KEPT,
    XID_EVENTS_KEPT,
    normalize_xid_bus_id,
    parse_xid_line,
    read_kernel_log,
)
from lingbot_fleet.gpu.linkcheck import LinkPolicy, check_links
from lingbot_fleet.gpu.xid import XID_RECENT_S, xid_findings

XID_CODES_PREFIX = "GPU_XID_"
GPUS = [
    {"index": 0, "bus_id": "0000:41:00.0", "uuid": "GPU-aaaa"},
    {"index": 1, "bus_id": "0000:c1:00.0", "uuid": "GPU-bbbb"},
]


def kmsg_root(tmp_path: Path, *texts: str, uptime_s: float = 1000.0) -> Path:
    """A node root whose /dev/kmsg holds ``texts`` at 1 s, 2 s, ... after boot."""
    (tmp_path / "dev").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "uptime").write_text(f"{uptime_s} 1.0\n")
    records = "".join(
        f"3,{sequence},{(sequence + 1) * 1_000_000},-;{text}\n"
        for sequence, text in enumerate(texts)
    )
    (tmp_path / "dev" / "kmsg").write_text(records)
    return tmp_path


def codes(findings: list[Any]) -> list[tuple[str, str, str]]:
    return [(f.code, f.severity, f.subject) for f in findings]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus.",
            {
                "xid": 79,
                "bus_id": "0000:41:00",
                "pid": None,
                "process": None,
                "message": "GPU has fallen off the bus.",
            },
        ),
        (
            "NVRM: Xid (PCI:0000:C1:00): 13, pid=4242, name=python3, Graphics Exception: ESR",
            {
                "xid": 13,
                "bus_id": "0000:c1:00",
                "pid": "4242",
                "process": "python3",
                "message": "Graphics Exception: ESR",
            },
        ),
        (
            "NVRM: Xid (0000:41:00): 48, An uncorrectable double bit error",
            {
                "xid": 48,
                "bus_id": "0000:41:00",
                "pid": None,
                "process": None,
                "message": "An uncorrectable double bit error",
            },
        ),
        ("NVRM: Xid (PCI:zz:41:00): 79, GPU has fallen off the bus.", None),
        ("NVRM: Xid (PCI:0000:41:00): seventy-nine", None),
        ("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15", None),
    ],
)
def test_xid_lines_parse_in_each_driver_format(line: str, expected: Any) -> None:
    assert parse_xid_line(line) == expected


def test_bus_ids_normalize_to_the_kernel_log_form() -> None:
    assert normalize_xid_bus_id("00000000:41:00.0") == "0000:41:00"
    assert normalize_xid_bus_id("41:00") == "0000:41:00"
    assert normalize_xid_bus_id("0000:41") is None
    assert normalize_xid_bus_id("0000:41:99") is None


def test_the_log_gives_each_xid_with_its_gpu_and_time(tmp_path: Path) -> None:
    root = kmsg_root(
        tmp_path,
        "Linux version 6.1.0-18-amd64",
        "NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:41:00): nonsense",
        uptime_s=100.0,
    )
    log = read_kernel_log(root, now_s=1_000_000.0)
    assert log["readable"] is True
    assert log["error"] is None
    assert log["xid_event_count"] == 1
    [event] = log["xid_events"]
    assert event["xid"] == 79
    assert event["bus_id"] == "0000:41:00"
    assert event["seconds_since_boot"] == 2.0
    assert event["age_s"] == 98.0
    assert event["time"] == "1970-01-12T13:45:02Z"
    assert log["unparsed"] == ["NVRM: Xid (PCI:0000:41:00): nonsense"]


def test_an_unreadable_or_empty_log_is_unknown_never_no_xid(tmp_path: Path) -> None:
    missing = read_kernel_log(tmp_path)
    assert missing["readable"] is False
    assert "/dev/kmsg" in missing["error"]
    empty = kmsg_root(tmp_path / "empty")
    (empty / "dev" / "kmsg").write_text("")
    log = read_kernel_log(empty)
    assert log["readable"] is False
    assert log["error"] == "/dev/kmsg: the kernel log gave no records"
    [note] = xid_findings({"gpus": GPUS, "kernel_log": log})
    assert (note.code, note.severity) == ("KERNEL_LOG_UNREADABLE", "info")
    assert "unknown, not absent" in note.message
    # A node without GPUs has no Xid to miss.
    assert xid_findings({"gpus": [], "kernel_log": log}) == []


def test_the_newest_events_and_unparsed_lines_are_kept_within_bounds(tmp_path: Path) -> None:
    lines = [f"NVRM: Xid (PCI:0000:41:00): {13 + n % 2}, event {n}" for n in range(100)]
    lines += [f"NVRM: Xid (PCI:0000:41:00): bad {n}" for n in range(20)]
    log = read_kernel_log(kmsg_root(tmp_path, *lines, uptime_s=500.0))
    assert log["xid_event_count"] == 100
    assert len(log["xid_events"]) == XID_EVENTS_KEPT
    assert log["xid_events"][-1]["message"] == "event 99"
    assert len(log["unparsed"]) == UNPARSED_LINES_KEPT
    assert log["unparsed"][-1] == "NVRM: Xid (PCI:0000:41:00): bad 19"


def test_findings_group_by_gpu_and_code_and_name_the_gpu(tmp_path: Path) -> None:
    root = kmsg_root(
        tmp_path,
        "NVRM: Xid (PCI:0000:41:00): 13, pid=7, name=lingbot, Graphics Exception",
        "NVRM: Xid (PCI:0000:41:00): 13, pid=8, name=lingbot, Graphics Exception again",
        "NVRM: Xid (PCI:0000:c1:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:99:00): 31, pid=9, name=x, MMU Fault",
        "NVRM: Xid (PCI:0000:41:00): 999, something new",
    )
    findings = xid_findings({"gpus": GPUS, "kernel_log": read_kernel_log(root)})
    assert codes(findings) == [
        ("GPU_XID_13", "warning", "0000:41:00.0"),
        ("GPU_XID_79", "critical", "0000:c1:00.0"),
        ("GPU_XID_31", "warning", "0000:99:00"),
        ("GPU_XID_999", "info", "0000:41:00.0"),
    ]
    graphics, lost, unknown_device, unknown_code = findings
    assert graphics.evidence["count"] == 2
    assert graphics.evidence["last_process"] == "lingbot"
    assert graphics.evidence["uuid"] == "GPU-aaaa"
    assert lost.message.startswith("GPU 1 (0000:c1:00.0, GPU-bbbb): Xid 79 (GPU has fallen off")
    assert lost.evidence["index"] == 1
    assert "reboot" in lost.fix
    assert "no GPU the driver or the PCI bus lists" in unknown_device.message
    assert "does not know" in unknown_code.message
    assert "Xid catalogue" in unknown_code.fix


def test_old_events_are_history_and_raise_nothing(tmp_path: Path) -> None:
    root = kmsg_root(
        tmp_path,
        "NVRM: Xid (PCI:0000:41:00): 79, GPU has fallen off the bus.",
        uptime_s=XID_RECENT_S + 10.0,
    )
    assert xid_findings({"gpus": GPUS, "kernel_log": read_kernel_log(root)}) == []


def test_hostile_saved_facts_do_not_crash_the_check() -> None:
    kernel_log = {
        "readable": True,
        "xid_events": [{"xid": "79", "bus_id": None}, {"xid": True}, {}],
        "unparsed": [],
    }
    assert xid_findings({"gpus": GPUS, "kernel_log": kernel_log}) == []
    assert xid_findings({"gpus": GPUS}) == []


def test_unparsed_xid_lines_are_named(tmp_path: Path) -> None:
    root = kmsg_root(tmp_path, "NVRM: Xid (GPU-0): whatever the driver writes next")
    [note] = xid_findings({"gpus": GPUS, "kernel_log": read_kernel_log(root)})
    assert (note.code, note.severity) == ("XID_LINE_UNPARSED", "info")
    assert "whatever the driver writes next" in note.message


def lab_node(tmp_path: Path, lab_env: Any, *faults: dict[str, Any]) -> Any:
    profile = copy.deepcopy(load_profile("pcie-4gpu-two-switches"))
    profile["faults"] = list(faults)
    node = boot_lab_node(profile, tmp_path)
    lab_env(node)
    return node


def xid_codes(facts: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (f.code, f.severity, f.subject)
        for f in check_links(facts, LinkPolicy())
        if f.code.startswith(XID_CODES_PREFIX) or f.code == "KERNEL_LOG_UNREADABLE"
    ]


def test_a_healthy_lab_node_logs_its_driver_and_no_xid(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    facts = gather_facts(root=str(lab_node(tmp_path, lab_env).root), use_nvml=True)
    assert facts["kernel_log"]["readable"] is True
    assert facts["kernel_log"]["xid_events"] == []
    assert xid_codes(facts) == []


def test_boot_faults_log_their_xid_lines(tmp_path: Path, lab_env: Any, lab_pynvml: Any) -> None:
    node = lab_node(
        tmp_path,
        lab_env,
        {"kind": "gpu_lost", "gpu": 1},
        {"kind": "xid", "gpu": 3, "code": 48, "message": "An uncorrectable double bit error"},
    )
    facts = gather_facts(root=str(node.root), use_nvml=True)
    bus = [gpu["bus_id"] for gpu in facts["gpus"]]
    assert xid_codes(facts) == [
        ("GPU_XID_79", "critical", bus[1]),
        ("GPU_XID_48", "error", bus[3]),
    ]


def test_an_incident_while_the_node_runs_loses_the_gpu_and_logs_it(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    from lingbot_lab import incident

    node = lab_node(tmp_path, lab_env)
    opt = node.lab_root / "opt" / "lingbot-lab"
    opt.mkdir(parents=True)
    (opt / "profile.json").write_text(json.dumps(node.profile))
    lab = node.lab_root / "run" / "lingbot-lab"
    state_before = json.loads((lab / "state.json").read_text())
    assert not any(gpu["lost"] for gpu in state_before["gpus"])

    # lab_env pointed LINGBOT_LAB_ROOT at the node, as on a lab node's own root.
    assert incident.main(["gpu-lost", "--gpu", "2"]) == 0
    assert incident.main(["xid", "--gpu", "0", "--code", "31", "--message", "MMU Fault"]) == 0
    assert incident.main(["xid", "--gpu", "9", "--code", "31"]) == 1

    state = json.loads((lab / "state.json").read_text())
    assert [gpu["lost"] for gpu in state["gpus"]] == [False, False, True, False]
    facts = gather_facts(root=str(node.root), use_nvml=True)
    bus = [gpu["bus_id"] for gpu in facts["gpus"]]
    assert facts["gpus"][2]["lost"] is True
    assert xid_codes(facts) == [
        ("GPU_XID_79", "critical", bus[2]),
        ("GPU_XID_31", "warning", bus[0]),
    ]
    assert [f["kind"] for f in json.loads((lab / "incidents.json").read_text())] == [
        "gpu_lost",
        "xid",
    ]


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ({"kind": "xid", "gpu": 0}, "faults[0].code"),
        ({"kind": "xid", "gpu": 0, "code": 0}, "faults[0].code"),
        ({"kind": "xid", "gpu": 0, "code": 79, "message": "two\nlines"}, "faults[0].message"),
    ],
)
def test_a_bad_xid_fault_is_refused_naming_it(fault: dict[str, Any], words: str) -> None:
    from lingbot_lab.profile import validate_profile

    profile = copy.deepcopy(load_profile("pcie-4gpu-two-switches"))
    profile["faults"] = [fault]
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        validate_profile(profile)
