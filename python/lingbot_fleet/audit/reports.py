"""Report writers: fleet.md, fleet.html (self-contained) and junit.xml, all from fleet.json."""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..findings import severity_rank

REPORT_FILES = ("fleet.json", "fleet.md", "fleet.html", "junit.xml")


def _link_text(link: Mapping[str, Any]) -> str:
    def part(gen: Any, width: Any) -> str:
        return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"

    return (
        f"{part(link.get('current_gen'), link.get('current_width'))} "
        f"(max {part(link.get('max_gen'), link.get('max_width'))})"
    )


def _gbytes(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f}"


def _failing(node: Mapping[str, Any], threshold: str) -> list[Mapping[str, Any]]:
    limit = severity_rank(threshold)
    return [f for f in node.get("findings") or [] if severity_rank(f["severity"]) >= limit]


# --- Markdown -------------------------------------------------------------------------


def _md_cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(fleet: Mapping[str, Any]) -> str:
    summary = fleet["summary"]
    lines = [
        "# LingBot fleet audit",
        "",
        f"Generated {fleet['generated_at']} from `{fleet['inventory']}`"
        + (f" (limit `{fleet['limit']}`)" if fleet.get("limit") else "")
        + f"; findings count from severity `{fleet['severity_threshold']}`.",
        "",
        "| nodes | ok | findings | unreachable | failed | pending reboot | drifted |",
        "|---|---|---|---|---|---|---|",
        f"| {summary['nodes']} | {summary['ok']} | {summary['findings']} | "
        f"{summary['unreachable']} | {summary['failed']} | {summary['pending_reboot']} | "
        f"{summary['drifted']} |",
        "",
        "## Findings by code",
        "",
    ]
    if fleet["findings_by_code"]:
        lines += ["| code | severity | count | nodes |", "|---|---|---|---|"]
        lines += [
            f"| {row['code']} | {row['severity']} | {row['count']} | {', '.join(row['nodes'])} |"
            for row in fleet["findings_by_code"]
        ]
    else:
        lines.append("No findings.")
    lines += ["", "## Nodes", ""]
    for node in fleet["nodes"]:
        lines += _md_node(node)
    return "\n".join(lines) + "\n"


def _md_node(node: Mapping[str, Any]) -> list[str]:
    lines = [f"### {node['host']}: {node['status']}", ""]
    if node["status"] in ("unreachable", "failed"):
        return [*lines, f"Reason: {node['reason']}", ""]
    facts = node.get("facts") or {}
    if facts.get("gpus"):
        lines += ["| GPU | model | bus id | NUMA | link |", "|---|---|---|---|---|"]
        lines += [
            f"| {g['index']} | {_md_cell(g['model'])} | {g['bus_id']} | {g['numa_node']} | "
            f"{'lost' if g['lost'] else _link_text(g['link'])} |"
            for g in facts["gpus"]
        ]
        lines.append("")
    plan = node.get("plan")
    if plan:
        lines.append(f"Plan: {plan['summary']} {plan['mode_reason']}")
    elif node.get("plan_error"):
        lines.append(f"Plan: none ({node['plan_error']})")
    kernel = node.get("kernel") or {}
    if kernel.get("pending_reboot"):
        changes = [f"+{w}" for w in kernel["added_on_reboot"]]
        changes += [f"-{w}" for w in kernel["removed_on_reboot"]]
        lines.append(f"Pending reboot: {' '.join(changes)}")
    for finding in node.get("findings") or []:
        lines.append(
            f"- **{finding['severity']}** `{finding['code']}` {finding['subject']}: "
            f"{_md_cell(finding['message'])} Fix: {_md_cell(finding['fix'])}"
        )
    lines.append("")
    return lines


# --- HTML -----------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#1d2330;max-width:1200px}
h1{margin-bottom:.2rem}table{border-collapse:collapse;margin:.5rem 0 1rem}
th,td{border:1px solid #c9ced8;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#eef1f6}.muted{color:#5b6475}
.status-ok{color:#176c2f}.status-findings{color:#9a5b00}
.status-unreachable,.status-failed{color:#b3261e}
.sev-critical,.sev-error{color:#b3261e;font-weight:600}.sev-warning{color:#9a5b00}
.sev-info{color:#3d5a99}td.heat{text-align:right;font-variant-numeric:tabular-nums}
details{border:1px solid #c9ced8;border-radius:4px;padding:.5rem 1rem;margin:.5rem 0}
summary{cursor:pointer;font-weight:600}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def heat_colour(value: float | None, best: float) -> str:
    """Background for a GB/s cell: red (slow) to green (the node's best)."""
    if value is None or best <= 0:
        return "#e4e6eb"
    hue = round(120 * max(0.0, min(1.0, value / best)))
    return f"hsl({hue},70%,78%)"


def _heat_map(probe: Mapping[str, Any]) -> str:
    indices = probe["gpu_indices"]
    matrix = probe["p2p_gbytes_per_s"]
    values = [v for row in matrix for v in row if v is not None]
    best = max(values) if values else 0.0
    rows = ["<tr><th>src \\ dst</th>" + "".join(f"<th>GPU {i}</th>" for i in indices) + "</tr>"]
    for src, row in zip(indices, matrix, strict=True):
        cells = []
        for dst, value in zip(indices, row, strict=True):
            if src == dst:
                cells.append('<td class="heat muted">X</td>')
            else:
                colour = heat_colour(value, best)
                cells.append(
                    f'<td class="heat" style="background:{colour}" '
                    f'title="GPU {src} to GPU {dst}">{_gbytes(value)}</td>'
                )
        rows.append(f"<tr><th>GPU {src}</th>{''.join(cells)}</tr>")
    return (
        f"<p>P2P bandwidth, peer access on (GB/s), probe {_e(probe['source'])} "
        f'{_e(probe["timestamp"])}</p><table class="heatmap">{"".join(rows)}</table>'
    )


def _html_findings(findings: Sequence[Mapping[str, Any]]) -> str:
    if not findings:
        return "<p>No findings.</p>"
    rows = "".join(
        f'<tr><td class="sev-{_e(f["severity"])}">{_e(f["severity"])}</td><td>{_e(f["code"])}</td>'
        f"<td>{_e(f['subject'])}</td><td>{_e(f['message'])}</td><td>{_e(f['fix'])}</td></tr>"
        for f in findings
    )
    return (
        "<table><tr><th>severity</th><th>code</th><th>subject</th><th>message</th>"
        f"<th>fix</th></tr>{rows}</table>"
    )


def _html_plan(node: Mapping[str, Any]) -> str:
    plan = node.get("plan")
    if not plan:
        return f"<p>No plan: {_e(node.get('plan_error') or 'no facts')}</p>"
    parts = [f"<p><b>{_e(plan['summary'])}</b> {_e(plan['mode_reason'])}</p>"]
    for instance in plan["instances"]:
        reasons = "".join(
            f"<tr><th>{_e(key)}</th><td>{_e(text)}</td></tr>"
            for key, text in instance["reasons"].items()
        )
        parts.append(
            f"<p>Instance <b>{_e(instance['name'])}</b>: GPUs {_e(instance['gpus'])}, NUMA node "
            f"{_e(instance['numa_node'])}, port {_e(instance['port'])}, KV cache "
            f"{_e(instance['kv_cache_strategy'])}</p><table>{reasons}</table>"
        )
    parts += [f"<p>Unused GPU {_e(u['index'])}: {_e(u['reason'])}</p>" for u in plan["unused_gpus"]]
    parts += [f'<p class="muted">Note: {_e(note)}</p>' for note in plan["notes"]]
    return "".join(parts)


def _html_node(node: Mapping[str, Any]) -> str:
    status = node["status"]
    head = (
        f'<details id="node-{_e(node["host"])}"{" open" if status != "ok" else ""}>'
        f'<summary>{_e(node["host"])}: <span class="status-{status}">{status}</span></summary>'
    )
    if status in ("unreachable", "failed"):
        return f"{head}<p>{_e(node['reason'])}</p></details>"
    parts = [head]
    facts = node.get("facts") or {}
    if facts:
        gpu_rows = "".join(
            f"<tr><td>{_e(g['index'])}</td><td>{_e(g['model'])}</td><td>{_e(g['bus_id'])}</td>"
            f"<td>{_e(g['numa_node'])}</td>"
            f"<td>{'lost' if g['lost'] else _e(_link_text(g['link']))}</td>"
            f"<td>{_e(g['upstream_port'])}</td><td>{_e(g['persistence_mode'])}</td></tr>"
            for g in facts.get("gpus") or []
        )
        parts.append(
            f"<p>Driver {_e(facts.get('driver_version'))}, IOMMU {_e(facts.get('iommu_mode'))}, "
            f"NUMA nodes {_e(facts.get('numa_node_count'))}</p>"
            "<table><tr><th>GPU</th><th>model</th><th>bus id</th><th>NUMA</th><th>link</th>"
            f"<th>upstream port</th><th>persistence</th></tr>{gpu_rows}</table>"
        )
    if node.get("probe"):
        parts.append(_heat_map(node["probe"]))
    else:
        parts.append("<p>No probe result on the node.</p>")
    parts.append("<h4>Plan</h4>" + _html_plan(node))
    kernel = node.get("kernel") or {}
    if kernel:
        pending = kernel.get("pending_reboot")
        parts.append(
            f"<p>Kernel: running <code>{_e(' '.join(kernel.get('running') or []))}</code>; "
            f"pending reboot: {_e(pending)}"
            + (
                f" (+{_e(' +'.join(kernel['added_on_reboot']))} "
                f"-{_e(' -'.join(kernel['removed_on_reboot']))})"
                if pending
                else ""
            )
            + "</p>"
        )
    drift = node.get("drift") or {}
    if drift.get("deployed"):
        parts.append(
            "<p>Deployed LingBot: "
            + ", ".join(f"{_e(i['name'])} {_e(i['status'])}" for i in drift["instances"])
            + "</p>"
        )
    generations = node.get("generations") or []
    parts.append(
        f"<p>Generations: {len(generations)}"
        + (f", newest {_e(generations[-1]['generation'])}" if generations else "")
        + "</p>"
    )
    parts.append("<h4>Findings</h4>" + _html_findings(node.get("findings") or []))
    parts.append("</details>")
    return "".join(parts)


def render_html(fleet: Mapping[str, Any]) -> str:
    summary = fleet["summary"]
    counts = "".join(
        f"<tr><th>{_e(label)}</th><td>{_e(summary[key])}</td></tr>"
        for label, key in (
            ("nodes", "nodes"),
            ("ok", "ok"),
            (f"findings at or above {fleet['severity_threshold']}", "findings"),
            ("unreachable", "unreachable"),
            ("failed", "failed"),
            ("pending reboot", "pending_reboot"),
            ("LingBot config drifted", "drifted"),
            ("GPUs", "gpus"),
        )
    )
    code_rows = "".join(
        f'<tr><td>{_e(r["code"])}</td><td class="sev-{_e(r["severity"])}">{_e(r["severity"])}'
        f"</td><td>{_e(r['count'])}</td><td>"
        + ", ".join(f'<a href="#node-{_e(h)}">{_e(h)}</a>' for h in r["nodes"])
        + "</td></tr>"
        for r in fleet["findings_by_code"]
    )
    codes = (
        "<table><tr><th>code</th><th>severity</th><th>count</th><th>nodes</th></tr>"
        f"{code_rows}</table>"
        if code_rows
        else "<p>No findings.</p>"
    )
    scope = _e(fleet["inventory"]) + (f", limit {_e(fleet['limit'])}" if fleet.get("limit") else "")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<title>LingBot fleet audit</title>"
        f"<style>{_CSS}</style></head><body>"
        "<h1>LingBot fleet audit</h1>"
        f'<p class="muted">{_e(fleet["generated_at"])}, inventory {scope}, '
        f"schema {_e(fleet['schema_version'])}</p>"
        f"<h2>Fleet</h2><table>{counts}</table>"
        f"<h2>Findings by code</h2>{codes}"
        "<h2>Nodes</h2>" + "".join(_html_node(node) for node in fleet["nodes"]) + "</body></html>\n"
    )


# --- JUnit ----------------------------------------------------------------------------


def render_junit(fleet: Mapping[str, Any]) -> str:
    """One testsuite, one testcase per node: failure for findings, error for lost nodes."""
    threshold = fleet["severity_threshold"]
    summary = fleet["summary"]
    suite = ET.Element(
        "testsuite",
        {
            "name": "lingbot-fleet audit",
            "tests": str(summary["nodes"]),
            "failures": str(summary["findings"]),
            "errors": str(summary["unreachable"] + summary["failed"]),
            "skipped": "0",
            "timestamp": fleet["generated_at"],
            "time": str(fleet.get("duration_s") or 0),
        },
    )
    for node in fleet["nodes"]:
        case = ET.SubElement(suite, "testcase", {"classname": "fleet", "name": node["host"]})
        if node["status"] in ("unreachable", "failed"):
            error = ET.SubElement(
                case, "error", {"type": node["status"], "message": node["reason"]}
            )
            error.text = node["reason"]
            continue
        failing = _failing(node, threshold)
        if failing:
            failure = ET.SubElement(
                case,
                "failure",
                {
                    "type": ",".join(sorted({f["code"] for f in failing})),
                    "message": f"{len(failing)} finding(s) at or above {threshold}",
                },
            )
            failure.text = "\n".join(
                f"{f['severity']} {f['code']} {f['subject']}: {f['message']} Fix: {f['fix']}"
                for f in failing
            )
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, "unicode") + "\n"


def write_reports(fleet: Mapping[str, Any], report_dir: Path) -> list[Path]:
    """fleet.json, fleet.md, fleet.html and junit.xml in report_dir (created if needed)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    texts = {
        "fleet.json": json.dumps(fleet, indent=2, sort_keys=False) + "\n",
        "fleet.md": render_markdown(fleet),
        "fleet.html": render_html(fleet),
        "junit.xml": render_junit(fleet),
    }
    written = []
    for name in REPORT_FILES:
        path = report_dir / name
        path.write_text(texts[name], encoding="utf-8")
        written.append(path)
    return written
