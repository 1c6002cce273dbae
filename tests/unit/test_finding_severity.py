"""The fleet's severity per finding code (lingbot_fleet_finding_severity): checked with the
exact messages, applied before every decision that depends on a severity (the audit's
planner and exit status, gpu_checks' fail_on, the monitor, the doctor) and shown in the
reports as "info (default critical)"."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml
from malformed_support import role_module, run_module
from plan_support import lab_inputs

from lingbot_fleet.audit import doctor
from lingbot_fleet.audit.evaluate import AuditPolicy, evaluate_node
from lingbot_fleet.audit.fleet import (
    EXIT_COMPLIANT,
    EXIT_FINDINGS,
    AuditOutcome,
    build_fleet,
    exit_status,
)
from lingbot_fleet.audit.reports import render_html, render_junit, render_markdown
from lingbot_fleet.cli import build_parser
from lingbot_fleet.controller.policy import check_policy, load_role_specs
from lingbot_fleet.monitor.config import MonitorConfig, MonitorConfigError
from lingbot_fleet.node.findings import (
    FINDING_SEVERITY_VARIABLE,
    Finding,
    is_finding_code,
    override_severities,
    severity_label,
    severity_overrides,
)
from lingbot_fleet.node.values import ValueRefusedError

REPO = Path(__file__).resolve().parents[2]
NARROW = "PCIE_WIDTH_BELOW_EXPECTED"  # error: a6000-x8's second GPU sits in an x8 slot
CODE_RULE = (
    "give the code as findings carry it, in UPPER_SNAKE_CASE (e.g. PCIE_WIDTH_BELOW_EXPECTED; "
    "docs/audit.md lists the codes)"
)
NOT_A_SEVERITY = "is not a severity; give one of info, warning, error, critical"


def finding(code: str = NARROW, severity: str = "error") -> Finding:
    return Finding(code, severity, "0000:02:00.0", "x8 of x16", {"width": 8}, "another slot")


# ---- the mapping and the overrides --------------------------------------------------------


def test_an_override_sets_the_severity_and_keeps_the_default_in_the_evidence() -> None:
    [judged] = override_severities([finding()], {NARROW: "info"}, "test")
    assert judged.severity == "info"
    assert judged.evidence == {"severity_default": "error", "width": 8}
    assert (judged.code, judged.subject, judged.message, judged.fix) == (
        NARROW,
        "0000:02:00.0",
        "x8 of x16",
        "another slot",
    )
    [row] = override_severities([finding().to_dict()], {NARROW: "critical"}, "test")
    assert row["severity"] == "critical"
    assert row["evidence"] == {"severity_default": "error", "width": 8}
    assert severity_label(row) == "critical (default error)"


def test_codes_not_overridden_and_overrides_to_the_same_severity_are_untouched() -> None:
    other = finding("PCIE_GPU_BEHIND_CHIPSET", "warning")
    same = finding(NARROW, "info")
    assert override_severities([other, same], {NARROW: "info"}, "test") == [other, same]
    assert severity_label(other.to_dict()) == "warning"
    assert override_severities([other], {}, "test") == [other]


def test_a_finding_overridden_twice_keeps_its_checks_severity() -> None:
    once = override_severities([finding()], {NARROW: "info"}, "test")
    [twice] = override_severities(once, {NARROW: "warning"}, "test")
    assert (twice.severity, twice.evidence["severity_default"]) == ("warning", "error")


def test_finding_codes_are_upper_snake_case() -> None:
    for code in ("PCIE_WIDTH_BELOW_EXPECTED", "P2P_DATA_CHECK_FAILED", "GPU_XID_79"):
        assert is_finding_code(code)
    for text in ("pcie_gen", "PCIE__GEN", "_PCIE", "PCIE_", "2P", "PCIE-GEN", "", None, 7):
        assert not is_finding_code(text)


@pytest.mark.parametrize(
    ("mapping", "variable", "reason"),
    [
        ({NARROW: "fatal"}, f"{FINDING_SEVERITY_VARIABLE}.{NARROW}", f"'fatal' {NOT_A_SEVERITY}"),
        ({NARROW: "ERROR"}, f"{FINDING_SEVERITY_VARIABLE}.{NARROW}", f"'ERROR' {NOT_A_SEVERITY}"),
        ({NARROW: None}, f"{FINDING_SEVERITY_VARIABLE}.{NARROW}", f"None {NOT_A_SEVERITY}"),
        (
            {"pcie_width_below_expected": "info"},
            FINDING_SEVERITY_VARIABLE,
            f"'pcie_width_below_expected' is not a finding code; {CODE_RULE}",
        ),
        ({3: "info"}, FINDING_SEVERITY_VARIABLE, f"3 is not a finding code; {CODE_RULE}"),
        (
            [NARROW],
            FINDING_SEVERITY_VARIABLE,
            "is a list, not a mapping; give each finding code with the severity it should "
            "have, e.g. {PROBE_MISSING: warning}, or {} for none",
        ),
        (
            None,
            FINDING_SEVERITY_VARIABLE,
            "is null, not a mapping; give each finding code with the severity it should "
            "have, e.g. {PROBE_MISSING: warning}, or {} for none",
        ),
    ],
    ids=["unknown", "upper case", "null", "lower case code", "number", "list", "null mapping"],
)
def test_a_bad_mapping_is_refused_with_the_exact_message(
    mapping: Any, variable: str, reason: str
) -> None:
    with pytest.raises(ValueRefusedError) as refused:
        severity_overrides(mapping, FINDING_SEVERITY_VARIABLE)
    assert (refused.value.variable, refused.value.reason) == (variable, reason)
    assert str(refused.value) == f"{variable}: {reason}"
    with pytest.raises(ValueRefusedError):
        override_severities([finding()], mapping, FINDING_SEVERITY_VARIABLE)


def test_the_policy_play_refuses_a_bad_mapping_and_passes_a_good_one() -> None:
    specs = load_role_specs(REPO / "roles")
    assert check_policy({FINDING_SEVERITY_VARIABLE: {NARROW: "info"}}, specs) == []
    assert check_policy({FINDING_SEVERITY_VARIABLE: {}}, specs) == []
    problems = check_policy({FINDING_SEVERITY_VARIABLE: {NARROW: "low"}}, specs)
    assert [str(p) for p in problems] == [
        f"{FINDING_SEVERITY_VARIABLE}.{NARROW}: 'low' {NOT_A_SEVERITY}"
    ]
    near = check_policy({"lingbot_fleet_finding_severty": {}}, specs)
    assert "did you mean lingbot_fleet_finding_severity?" in str(near[0])


def test_every_role_that_judges_findings_declares_the_variable() -> None:
    specs = load_role_specs(REPO / "roles")
    for role in ("gpu_checks", "topo_monitor"):
        assert specs[role][FINDING_SEVERITY_VARIABLE]["type"] == "dict"
        defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
        assert defaults[FINDING_SEVERITY_VARIABLE] == {}


# ---- the audit -----------------------------------------------------------------------------


def audited_node() -> dict[str, Any]:
    """What lingbot_audit_node reads on a6000-x8 (two GPUs, the second at x8), completed."""
    facts, probe = lab_inputs("a6000-x8")
    words = ["iommu=pt"]
    kernel = {"running": words, "next_boot": words, "next_boot_source": "grub.cfg"}
    return {
        "facts": facts,
        "probe": probe,
        "kernel": {**kernel, "grub_defaults": None},
        "lingbot": {"configs": {}},
        "generations": [],
    }


def audit(overrides: dict[str, str]) -> dict[str, Any]:
    policy = AuditPolicy.from_vars({FINDING_SEVERITY_VARIABLE: overrides})
    outcome = AuditOutcome(hosts=["gpu1"], records={"gpu1": evaluate_node(audited_node(), policy)})
    return build_fleet(outcome, inventory="hosts.yml", limit=None, threshold="error")


def test_the_audit_exit_status_follows_the_overridden_severity() -> None:
    assert exit_status(audit({})) == EXIT_FINDINGS
    fleet = audit({NARROW: "warning"})
    assert exit_status(fleet) == EXIT_COMPLIANT
    [narrow] = [f for f in fleet["nodes"][0]["findings"] if f["code"] == NARROW]
    assert (narrow["severity"], narrow["evidence"]["severity_default"]) == ("warning", "error")
    assert fleet["summary"]["findings_by_severity"]["error"] == 0
    assert exit_status(audit({"PERSISTENCE_MODE_OFF": "critical", NARROW: "info"})) == (
        EXIT_FINDINGS
    )


def test_the_planner_judges_the_gpus_by_the_overridden_severity() -> None:
    def planned(overrides: dict[str, str]) -> list[int]:
        plan = audit(overrides)["nodes"][0]["plan"]
        return sorted(index for instance in plan["instances"] for index in instance["gpus"])

    # A finding at lingbot_service_ineligible_finding_severity (critical) leaves its GPU out.
    assert planned({}) == [0, 1]
    assert planned({NARROW: "critical"}) == [0]


def test_the_reports_show_the_overridden_severity_with_the_default() -> None:
    fleet = audit({NARROW: "critical"})
    shown = "critical (default error)"
    assert f"- **{shown}** `{NARROW}` 0000:02:00.0:" in render_markdown(fleet)
    assert f'<td class="sev-critical">{shown}</td><td>{NARROW}</td>' in render_html(fleet)
    assert f"{shown} {NARROW} 0000:02:00.0:" in render_junit(fleet)
    assert '<td class="sev-warning">warning</td><td>PERSISTENCE_MODE_OFF</td>' in render_html(fleet)


def test_the_audit_policy_refuses_a_bad_mapping() -> None:
    with pytest.raises(ValueError, match=r"\.PCIE_WIDTH_BELOW_EXPECTED: 'low' is not a severity"):
        AuditPolicy.from_vars({FINDING_SEVERITY_VARIABLE: {NARROW: "low"}})


# ---- gpu_checks ------------------------------------------------------------------------------


def test_gpu_checks_fail_on_follows_the_overridden_severity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = role_module("gpu_checks", "gpu_link_check")
    facts, _probe = lab_inputs("a6000-x8")
    failing = run_module(monkeypatch, module, {"facts": facts})
    assert failing["failed"] is True
    assert failing["msg"].startswith(f"1 finding(s) at or above error: {NARROW} 0000:02:00.0")
    args = {"facts": facts, "finding_severity": {NARROW: "warning"}}
    passing = run_module(monkeypatch, module, args)
    assert passing["failed"] is False
    assert passing["failure"] is None
    assert passing["counts"] == {"info": 0, "warning": 1, "error": 0, "critical": 0}
    [row] = passing["findings"]
    assert (row["severity"], row["evidence"]["severity_default"]) == ("warning", "error")
    assert passing["ansible_facts"]["lingbot_link_findings"] == passing["findings"]
    assert passing["summary"][0].startswith(f"warning (default error) {NARROW} 0000:02:00.0: ")
    raised = run_module(monkeypatch, module, {**args, "finding_severity": {NARROW: "critical"}})
    assert raised["msg"].startswith(f"1 finding(s) at or above error: {NARROW} 0000:02:00.0")


def test_gpu_checks_refuses_a_bad_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    module = role_module("gpu_checks", "gpu_link_check")
    facts, _probe = lab_inputs("a6000-x8")
    refused = run_module(monkeypatch, module, {"facts": facts, "finding_severity": {NARROW: "x"}})
    assert refused["failed"] is True
    assert refused["msg"] == f"finding_severity.{NARROW}: 'x' {NOT_A_SEVERITY}"


def test_the_role_passes_the_inventory_variable_to_the_module() -> None:
    tasks = yaml.safe_load((REPO / "roles" / "gpu_checks" / "tasks" / "main.yml").read_text())
    [task] = tasks
    expected = "{{ lingbot_fleet_finding_severity }}"
    assert task["gpu_link_check"]["finding_severity"] == expected


# ---- the monitor -----------------------------------------------------------------------------


def test_the_monitor_configuration_checks_finding_severity() -> None:
    assert MonitorConfig.from_mapping({}).finding_severity == {}
    config = MonitorConfig.from_mapping({"finding_severity": {"MONITOR_NO_PLAN": "warning"}})
    assert config.finding_severity == {"MONITOR_NO_PLAN": "warning"}
    with pytest.raises(MonitorConfigError) as refused:
        MonitorConfig.from_mapping({"finding_severity": {"MONITOR_NO_PLAN": "loud"}})
    assert str(refused.value) == (
        f"finding_severity.MONITOR_NO_PLAN: 'loud' {NOT_A_SEVERITY} (fix it in "
        "lingbot_fleet_finding_severity)"
    )
    with pytest.raises(MonitorConfigError) as refused:
        MonitorConfig.from_mapping({"finding_severity": ["MONITOR_NO_PLAN"]})
    assert str(refused.value) == (
        "finding_severity: ['MONITOR_NO_PLAN'] is a list, expected dict (fix it in the "
        "topo_monitor role variables)"
    )


def test_the_role_writes_finding_severity_into_monitor_json() -> None:
    role_vars = yaml.safe_load((REPO / "roles" / "topo_monitor" / "vars" / "main.yml").read_text())
    config = role_vars["__topo_monitor_config"]
    assert config["finding_severity"] == "{{ lingbot_fleet_finding_severity }}"
    assert set(config) == set(MonitorConfig.__dataclass_fields__)


# ---- the doctor ------------------------------------------------------------------------------


def doctor_args(*words: str) -> argparse.Namespace:
    return build_parser().parse_args(["doctor", *words])


def test_doctor_severity_is_parsed_repeatable_and_checked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert doctor_args().severity == []
    args = doctor_args("--severity", f"{NARROW}=info", "--severity", "PROBE_MISSING=error")
    assert dict(args.severity) == {NARROW: "info", "PROBE_MISSING": "error"}
    for word, message in (
        (f"{NARROW}=low", f"'{NARROW}=low': 'low' {NOT_A_SEVERITY}"),
        ("pcie=info", f"'pcie=info': 'pcie' is not a finding code; {CODE_RULE}"),
        (NARROW, f"'{NARROW}' is not CODE=LEVEL; give e.g. --severity PROBE_MISSING=warning"),
    ):
        with pytest.raises(SystemExit) as stopped:
            doctor_args("--severity", word)
        assert stopped.value.code == 2
        assert f"error: argument --severity: {message}\n" in capsys.readouterr().err


def test_the_doctors_verdict_follows_the_overridden_severity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(doctor, "collect_node", lambda **_options: audited_node())
    assert doctor.examine(probe=False)["status"] == "findings"
    document = doctor.examine(probe=False, finding_severity={NARROW: "warning"})
    assert document["status"] == "ok"
    assert document["finding_severity"] == {NARROW: "warning"}
    assert f"  warning (default error) {NARROW} 0000:02:00.0: " in doctor.render_text(document)
