"""fleet.json model, exit codes and report writers on synthetic results."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from lingbot_fleet.audit.fleet import AuditOutcome, build_fleet, exit_status
from lingbot_fleet.audit.reports import (
    heat_colour,
    render_html,
    render_junit,
    render_markdown,
    write_reports,
)


def finding(code: str, severity: str, subject: str = "node") -> dict[str, Any]:
    return {
        "code": code,
        "severity": severity,
        "subject": subject,
        "message": f"{code} message",
        "evidence": {},
        "fix": f"{code} fix",
    }


def record(*findings: dict[str, Any]) -> dict[str, Any]:
    return {
        "facts": {
            "driver_version": "550.54.15",
            "iommu_mode": "passthrough",
            "numa_node_count": 1,
            "gpus": [
                {
                    "index": 0,
                    "model": "NVIDIA RTX A6000",
                    "uuid": "GPU-0",
                    "bus_id": "0000:41:00.0",
                    "numa_node": 0,
                    "lost": False,
                    "persistence_mode": True,
                    "link": {"current_gen": 4, "current_width": 8, "max_gen": 4, "max_width": 16},
                    "upstream_port": "0000:40:01.1",
                },
            ],
        },
        "findings": list(findings),
        "probe": {
            "source": "saved",
            "timestamp": "2026-01-01T00:00:00Z",
            "gpu_indices": [0, 1],
            "p2p_gbytes_per_s": [[None, 28.4], [14.2, None]],
        },
        "plan": None,
        "plan_error": "test",
        "drift": {"deployed": False, "drifted": False, "instances": []},
        "kernel": {
            "pending_reboot": True,
            "added_on_reboot": ["iommu=pt"],
            "removed_on_reboot": [],
        },
        "pending_reboot": True,
        "generations": [],
    }


def fleet_of(records: dict[str, dict[str, Any]], **outcome: Any) -> dict[str, Any]:
    hosts = sorted(
        set(records) | set(outcome.get("unreachable", {})) | set(outcome.get("hosts", []))
    )
    result = AuditOutcome(
        hosts=hosts,
        records=records,
        unreachable=outcome.get("unreachable", {}),
        failed=outcome.get("failed", {}),
    )
    return build_fleet(
        result, inventory="inv.yml", limit=None, threshold="error", generated_at="T", duration_s=1.0
    )


def test_compliant_fleet_exits_0() -> None:
    fleet = fleet_of({"a": record(finding("PROBE_MISSING", "info"))})
    assert fleet["nodes"][0]["status"] == "ok"
    assert exit_status(fleet) == 0


def test_findings_at_threshold_exit_1_and_count_by_code() -> None:
    fleet = fleet_of(
        {
            "a": record(finding("PCIE_WIDTH_BELOW_EXPECTED", "error", "0000:42:00.0")),
            "b": record(finding("PERSISTENCE_MODE_OFF", "warning")),
        }
    )
    assert [n["status"] for n in fleet["nodes"]] == ["findings", "ok"]
    assert fleet["findings_by_code"] == [
        {"code": "PCIE_WIDTH_BELOW_EXPECTED", "severity": "error", "count": 1, "nodes": ["a"]},
        {"code": "PERSISTENCE_MODE_OFF", "severity": "warning", "count": 1, "nodes": ["b"]},
    ]
    assert exit_status(fleet) == 1


def test_unreachable_and_silent_hosts_are_listed_and_take_precedence() -> None:
    fleet = fleet_of(
        {"a": record(finding("GPU_LOST", "critical"))},
        unreachable={"b": "ssh: connection refused"},
        hosts=["c"],
    )
    statuses = {n["host"]: (n["status"], n["reason"]) for n in fleet["nodes"]}
    assert statuses == {
        "a": ("findings", None),
        "b": ("unreachable", "ssh: connection refused"),
        "c": ("failed", "no result: the audit ended before this host reported"),
    }
    assert fleet["summary"]["nodes"] == 3
    assert exit_status(fleet) == 2


def test_junit_has_one_testcase_per_node_with_failures_and_errors() -> None:
    fleet = fleet_of(
        {"a": record(finding("GPU_LOST", "critical"), finding("PROBE_MISSING", "info"))},
        unreachable={"b": "refused"},
    )
    suite = ET.fromstring(render_junit(fleet))
    assert suite.tag == "testsuite"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "1")
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    failure = cases["a"].find("failure")
    assert failure is not None
    assert failure.get("type") == "GPU_LOST"
    assert failure.get("message") == "1 finding(s) at or above error"
    assert failure.text == "critical GPU_LOST node: GPU_LOST message Fix: GPU_LOST fix"
    error = cases["b"].find("error")
    assert error is not None and error.get("type") == "unreachable"


class _TagChecker(HTMLParser):
    VOID = frozenset({"meta", "br", "img", "hr", "input", "link"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("src", "href") and v and not v.startswith("#")]
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()


def test_html_is_well_formed_and_self_contained() -> None:
    fleet = fleet_of(
        {"a<b": record(finding("PCIE_WIDTH_BELOW_EXPECTED", "error"))},
        unreachable={"c": "refused"},
    )
    text = render_html(fleet)
    checker = _TagChecker()
    checker.feed(text)
    checker.close()
    assert checker.stack == []
    assert checker.urls == []
    assert "http://" not in text and "https://" not in text
    assert "a&lt;b" in text
    assert (
        '<td class="heat" style="background:hsl(120,70%,78%)" title="GPU 0 to GPU 1">28.4</td>'
        in text
    )
    assert (
        '<td class="heat" style="background:hsl(60,70%,78%)" title="GPU 1 to GPU 0">14.2</td>'
        in text
    )
    assert '<a href="#node-a&lt;b">a&lt;b</a>' in text


def test_heat_colour_scale() -> None:
    assert heat_colour(None, 10.0) == "#e4e6eb"
    assert heat_colour(0.0, 10.0) == "hsl(0,70%,78%)"
    assert heat_colour(10.0, 10.0) == "hsl(120,70%,78%)"


def test_markdown_fragments() -> None:
    fleet = fleet_of({"a": record(finding("PCIE_WIDTH_BELOW_EXPECTED", "error", "0000:42:00.0"))})
    text = render_markdown(fleet)
    assert "| 1 | 0 | 1 | 0 | 0 | 1 | 0 |" in text
    assert "| PCIE_WIDTH_BELOW_EXPECTED | error | 1 | a |" in text
    assert "| 0 | NVIDIA RTX A6000 | 0000:41:00.0 | 0 | Gen4 x8 (max Gen4 x16) |" in text
    assert "Pending reboot: +iommu=pt" in text
    assert (
        "- **error** `PCIE_WIDTH_BELOW_EXPECTED` 0000:42:00.0: PCIE_WIDTH_BELOW_EXPECTED "
        "message Fix: PCIE_WIDTH_BELOW_EXPECTED fix"
    ) in text


def test_write_reports_writes_the_four_files(tmp_path: Path) -> None:
    fleet = fleet_of({"a": record()})
    written = write_reports(fleet, tmp_path / "out")
    assert [p.name for p in written] == ["fleet.json", "fleet.md", "fleet.html", "junit.xml"]
    assert all(p.stat().st_size > 0 for p in written)


def test_unknown_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown severity 'bad'"):
        build_fleet(AuditOutcome(hosts=[]), inventory="i", limit=None, threshold="bad")


def test_the_fleets_driver_versions_name_the_nodes_out_of_step() -> None:
    older = record()
    older["facts"]["driver_version"] = "535.183.01"
    unknown = record()
    unknown["facts"]["driver_version"] = None
    fleet = fleet_of(
        {"a": record(), "b": older, "c": record(), "d": unknown},
        unreachable={"e": "ssh: connection refused"},
    )
    assert fleet["driver_versions"] == [
        {"version": "550.54.15", "count": 2, "nodes": ["a", "c"], "differs": False},
        {"version": "535.183.01", "count": 1, "nodes": ["b"], "differs": True},
        {"version": None, "count": 1, "nodes": ["d"], "differs": True},
    ]
    markdown = render_markdown(fleet)
    assert "| 550.54.15 | 2 | (the fleet's version) |" in markdown
    assert "| 535.183.01 | 1 | b |" in markdown
    assert "| unknown | 1 | d |" in markdown
    assert "<td>535.183.01</td><td>1</td><td>b</td>" in render_html(fleet)


def test_on_a_tie_the_newest_driver_is_the_fleets() -> None:
    older = record()
    older["facts"]["driver_version"] = "550.9.1"
    fleet = fleet_of({"a": record(), "b": older})
    assert [(row["version"], row["differs"]) for row in fleet["driver_versions"]] == [
        ("550.54.15", False),
        ("550.9.1", True),
    ]
