"""The driver's parts in step: the loaded kernel module (/proc/driver/nvidia/version)
against NVML's driver version, and on NVSwitch systems the fabric manager running at the
driver's version (facts/driver_versions.py, gpu/driver_versions.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from facts_support import boot_lab_node, load_profile

from lingbot_fleet.facts import driver_versions as facts_versions
from lingbot_fleet.facts import gather_facts
from lingbot_fleet.facts.driver_versions import (
    nvswitch_system,
    parse_fabric_manager_version,
    parse_module_version,
    read_fabric_manager,
    read_kernel_module_version,
)
from lingbot_fleet.facts.schema import schema_problems
from lingbot_fleet.gpu.driver_versions import driver_version_findings
from lingbot_fleet.gpu.linkcheck import LinkPolicy, check_links

PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n"
)
OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:20:15 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n"
)
H100 = "h100-sxm-nvswitch"
FM_UNIT_ANSWERS = {
    "active": (0, "active\n", ""),
    "failed": (3, "failed\n", ""),
    "no_systemd": (
        1,
        "",
        "System has not been booted with systemd as init system (PID 1). Can't operate.\n",
    ),
}


# --- the kernel module's version ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (PROPRIETARY, "550.54.15"),
        (OPEN, "550.54.15"),
        ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  535.161.08  Tue Feb 20\n", "535.161.08"),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  560.28.03  Release\n",
            "560.28.03",
        ),
        ("NVRM version: something else entirely\n", None),
        ("", None),
    ],
)
def test_the_module_version_is_read_from_either_flavour(text: str, expected: str | None) -> None:
    assert parse_module_version(text) == expected


def _root_with_version_file(tmp_path: Path, text: str | None) -> Path:
    if text is not None:
        path = tmp_path / "proc/driver/nvidia/version"
        path.parent.mkdir(parents=True)
        path.write_text(text)
    return tmp_path


def test_the_version_file_under_the_facts_root(tmp_path: Path) -> None:
    assert read_kernel_module_version(_root_with_version_file(tmp_path, OPEN)) == (
        "550.54.15",
        None,
    )


def test_an_absent_version_file_is_unknown_with_a_note(tmp_path: Path) -> None:
    version, note = read_kernel_module_version(_root_with_version_file(tmp_path, None))
    assert version is None
    assert note == (
        "driver.kernel_module_version unknown: /proc/driver/nvidia/version is absent or "
        "unreadable (the NVIDIA kernel module is not loaded)"
    )


def test_a_version_file_this_reader_cannot_parse_is_unknown_and_quoted(tmp_path: Path) -> None:
    version, note = read_kernel_module_version(
        _root_with_version_file(tmp_path, "NVRM: a future format 999\n")
    )
    assert version is None
    assert note is not None
    assert "'NVRM: a future format 999'" in note


# --- the module against NVML ----------------------------------------------------------------


def _facts(module: str | None, reported: str | None, **extra: Any) -> dict[str, Any]:
    return {
        "sources": {"gpus": "nvml"},
        "driver_version": reported,
        "driver": {"state": "answers", "evidence": [], "kernel_module_version": module},
        "gpus": [],
        **extra,
    }


def test_a_module_of_another_version_than_nvml_says_is_critical() -> None:
    [finding] = driver_version_findings(_facts("550.54.15", "550.90.07"))
    assert (finding.code, finding.severity, finding.subject) == (
        "GPU_DRIVER_MODULE_MISMATCH",
        "critical",
        "node",
    )
    assert finding.message.startswith(
        "the loaded NVIDIA kernel module is 550.54.15 (/proc/driver/nvidia/version) but nvml "
        "reports driver 550.90.07"
    )
    assert finding.evidence == {
        "kernel_module_version": "550.54.15",
        "driver_version": "550.90.07",
        "source": "nvml",
    }
    assert "/proc/driver/nvidia/version" in finding.fix
    assert "reboot" in finding.fix


@pytest.mark.parametrize(
    ("module", "reported"),
    [("550.54.15", "550.54.15"), (None, "550.54.15"), ("550.54.15", None), (None, None)],
)
def test_versions_in_step_or_unknown_are_no_mismatch(
    module: str | None, reported: str | None
) -> None:
    assert driver_version_findings(_facts(module, reported)) == []


def test_an_older_document_without_the_module_version_is_not_judged() -> None:
    facts = {"driver_version": "550.54.15", "driver": {"state": "answers", "evidence": []}}
    assert driver_version_findings(facts) == []
    assert driver_version_findings({"driver_version": "550.54.15"}) == []


# --- the fabric manager: reading it ---------------------------------------------------------


def fake_runner(
    monkeypatch: pytest.MonkeyPatch,
    unit: tuple[int | None, str, str],
    version: tuple[int | None, str, str] = (0, "Fabric Manager version is : 550.54.15\n", ""),
) -> list[list[str]]:
    calls: list[list[str]] = []

    def run(argv: Sequence[str]) -> tuple[int | None, str, str]:
        calls.append(list(argv))
        return unit if argv[1] == "is-active" else version

    monkeypatch.setattr(facts_versions, "run_command", run)
    return calls


def test_a_running_fabric_manager_at_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_runner(monkeypatch, FM_UNIT_ANSWERS["active"])
    facts = read_fabric_manager(tmp_path, "/usr/bin/systemctl", "/usr/bin/nv-fabricmanager")
    assert facts == {
        "unit": "nvidia-fabricmanager.service",
        "state": "active",
        "active": True,
        "version": "550.54.15",
        "evidence": [
            "systemctl is-active nvidia-fabricmanager.service: active (exit 0)",
            "nv-fabricmanager --version: Fabric Manager version is : 550.54.15 (exit 0)",
        ],
    }
    # The programs of the facts' root.
    assert calls == [
        [str(tmp_path / "usr/bin/systemctl"), "is-active", "nvidia-fabricmanager.service"],
        [str(tmp_path / "usr/bin/nv-fabricmanager"), "--version"],
    ]


def test_a_failed_unit_is_not_active(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_runner(monkeypatch, FM_UNIT_ANSWERS["failed"])
    facts = read_fabric_manager(tmp_path, "/usr/bin/systemctl", "/usr/bin/nv-fabricmanager")
    assert (facts["state"], facts["active"]) == ("failed", False)


def test_no_systemd_or_no_systemctl_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_runner(monkeypatch, FM_UNIT_ANSWERS["no_systemd"])
    facts = read_fabric_manager(tmp_path, "/usr/bin/systemctl", "/usr/bin/nv-fabricmanager")
    assert (facts["state"], facts["active"]) == (None, None)
    assert "System has not been booted with systemd" in facts["evidence"][0]
    facts = read_fabric_manager(tmp_path, None, None)
    assert (facts["active"], facts["version"]) == (None, None)
    assert facts["evidence"] == [
        "systemctl is-active nvidia-fabricmanager.service: no systemctl on the node",
        "nv-fabricmanager --version: nv-fabricmanager is not installed",
    ]


def test_the_version_line_and_output_without_one() -> None:
    assert parse_fabric_manager_version("Fabric Manager version is : 535.161.08\n") == (
        "535.161.08"
    )
    assert parse_fabric_manager_version("nv-fabricmanager: unrecognized option\n") is None


def test_the_runner_reports_a_program_it_cannot_run(tmp_path: Path) -> None:
    returncode, stdout, error = facts_versions.run_command([str(tmp_path / "missing")])
    assert (returncode, stdout) == (None, "")
    assert "missing" in error


def test_an_nvswitch_system_is_one_whose_gpus_report_a_fabric() -> None:
    assert nvswitch_system([{"fabric": "completed"}, {"fabric": "completed"}])
    assert nvswitch_system([{"fabric": "not_started"}])
    assert not nvswitch_system([{"fabric": "not_supported"}, {"fabric": None}, {}])
    assert not nvswitch_system([])


# --- the fabric manager: findings -----------------------------------------------------------


def _manager(active: bool | None, version: str | None, state: str | None = None) -> dict:
    if state is None:
        state = {True: "active", False: "failed", None: None}[active]
    return {
        "unit": "nvidia-fabricmanager.service",
        "state": state,
        "active": active,
        "version": version,
        "evidence": ["systemctl is-active nvidia-fabricmanager.service: ..."],
    }


def _codes(facts: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in driver_version_findings(facts)]


def test_a_running_fabric_manager_at_the_drivers_version_is_no_finding() -> None:
    assert (
        _codes(_facts("550.54.15", "550.54.15", fabric_manager=_manager(True, "550.54.15"))) == []
    )


def test_a_fabric_manager_not_running_is_critical() -> None:
    facts = _facts("550.54.15", "550.54.15", fabric_manager=_manager(False, "550.54.15"))
    [finding] = driver_version_findings(facts)
    assert (finding.code, finding.severity, finding.subject) == (
        "FABRIC_MANAGER_NOT_RUNNING",
        "critical",
        "node",
    )
    assert "is failed, not running" in finding.message
    assert finding.evidence["state"] == "failed"
    assert "systemctl enable --now nvidia-fabricmanager" in finding.fix
    assert "journalctl -u nvidia-fabricmanager" in finding.fix


def test_a_fabric_manager_of_another_version_is_critical_and_names_the_package() -> None:
    facts = _facts("550.54.15", "550.54.15", fabric_manager=_manager(True, "550.90.07"))
    [finding] = driver_version_findings(facts)
    assert (finding.code, finding.severity) == ("FABRIC_MANAGER_VERSION_MISMATCH", "critical")
    assert finding.message.startswith(
        "the NVSwitch fabric manager is version 550.90.07 but the driver is 550.54.15"
    )
    assert "nvidia-fabricmanager-550" in finding.fix
    assert "nvidia-fabricmanager-550=550.54.15-1" in finding.fix
    assert finding.evidence["driver_version"] == "550.54.15"


def test_the_loaded_module_is_the_version_the_fabric_manager_must_match() -> None:
    facts = _facts("550.54.15", None, fabric_manager=_manager(True, "550.54.15"))
    assert _codes(facts) == []
    facts = _facts(None, "550.54.15", fabric_manager=_manager(True, "550.54.15"))
    assert _codes(facts) == []


@pytest.mark.parametrize(
    ("manager", "module", "unknown"),
    [
        (_manager(None, "550.54.15"), "550.54.15", "whether it runs"),
        (_manager(True, None), "550.54.15", "its version"),
        (_manager(True, "550.54.15"), None, "the driver's version"),
    ],
)
def test_what_is_unknown_is_a_note_never_ok(
    manager: dict, module: str | None, unknown: str
) -> None:
    [finding] = driver_version_findings(_facts(module, None, fabric_manager=manager))
    assert (finding.code, finding.severity, finding.subject) == (
        "FABRIC_MANAGER_UNKNOWN",
        "info",
        "node",
    )
    assert finding.message.endswith(f"not judged on what is not known: {unknown}")


def test_not_running_and_not_installed_names_the_package_to_install() -> None:
    facts = _facts("550.54.15", "550.54.15", fabric_manager=_manager(False, None, "inactive"))
    assert _codes(facts) == [
        ("FABRIC_MANAGER_NOT_RUNNING", "critical"),
        ("FABRIC_MANAGER_UNKNOWN", "info"),
    ]
    assert "nvidia-fabricmanager-550" in driver_version_findings(facts)[0].fix


def test_a_system_without_nvswitch_has_no_fabric_manager_finding() -> None:
    assert _codes(_facts("550.54.15", "550.54.15")) == []


# --- through the facts, on lab nodes ---------------------------------------------------------


def test_a_pcie_node_has_the_module_version_and_no_fabric_manager(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(argv: Sequence[str]) -> Any:
        raise AssertionError(f"ran {argv} on a system without NVSwitch")

    monkeypatch.setattr(facts_versions, "run_command", refuse)
    node = boot_lab_node(load_profile("a6000-phb"), tmp_path)
    lab_env(node)
    facts = gather_facts(root=str(node.root), use_nvml=True)
    assert facts["driver"]["kernel_module_version"] == "550.54.15"
    assert facts["driver_version"] == "550.54.15"
    assert "fabric_manager" not in facts
    assert schema_problems(facts) == []
    codes = {f.code for f in check_links(facts, LinkPolicy())}
    assert not codes & {"GPU_DRIVER_MODULE_MISMATCH", "FABRIC_MANAGER_UNKNOWN"}


def test_a_node_whose_driver_is_not_loaded_has_no_module_version(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    profile = load_profile("a6000-phb")
    profile["faults"] = [{"kind": "driver_not_loaded"}]
    node = boot_lab_node(profile, tmp_path)
    lab_env(node)
    facts = gather_facts(root=str(node.root), use_nvml=True, smi_command=("false",))
    assert facts["driver"]["kernel_module_version"] is None
    assert any(note.startswith("driver.kernel_module_version unknown:") for note in facts["notes"])
    assert "fabric_manager" not in facts


def h100_findings(tmp_path: Path, lab_env: Any, faults: list[dict[str, Any]]) -> Any:
    profile = load_profile(H100)
    profile["faults"] = faults
    node = boot_lab_node(profile, tmp_path)
    lab_env(node)
    facts = gather_facts(root=str(node.root), use_nvml=True)
    assert schema_problems(facts) == []
    findings = [f for f in check_links(facts, LinkPolicy()) if "FABRIC_MANAGER" in f.code]
    return facts, findings


def test_the_lab_fabric_manager_runs_at_the_drivers_version(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    facts, findings = h100_findings(tmp_path, lab_env, [])
    assert facts["fabric_manager"]["active"] is True
    assert facts["fabric_manager"]["version"] == "550.54.15"
    assert findings == []


def test_the_lab_fabric_manager_of_another_version_refuses_to_start(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    """Fault test: a fabric manager of another version than the driver's (an update of one
    package without the other) refuses to start, so the fabric never comes up."""
    faults = [{"kind": "fabric_manager_version", "version": "550.90.07"}]
    facts, findings = h100_findings(tmp_path, lab_env, faults)
    assert [(f.code, f.severity) for f in findings] == [
        ("FABRIC_MANAGER_NOT_RUNNING", "critical"),
        ("FABRIC_MANAGER_VERSION_MISMATCH", "critical"),
    ]
    assert facts["fabric_manager"]["version"] == "550.90.07"
    assert {gpu["fabric"] for gpu in facts["gpus"]} == {"not_started"}


def test_the_lab_fabric_manager_down_is_a_failed_unit(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    _, findings = h100_findings(tmp_path, lab_env, [{"kind": "fabric_manager_down"}])
    assert [(f.code, f.evidence["state"]) for f in findings] == [
        ("FABRIC_MANAGER_NOT_RUNNING", "failed")
    ]
