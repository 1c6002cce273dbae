"""Report writers: fleet.md, fleet.html (self-contained) and junit.xml, all from fleet.json."""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..node.findings import severity_label, severity_rank
from .evaluate import driver_parts_text
from .fleet import STATUS_FAILED, STATUS_FINDINGS, STATUS_OK, STATUS_UNREACHABLE

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


def _version_rows(rows: list[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(version, node count, the nodes out of step with the fleet) per driver version."""
    return [
        (
            row["version"] or "unknown",
            str(row["count"]),
            ", ".join(row["nodes"]) if row["differs"] else "(the fleet's version)",
        )
        for row in rows
    ]


def _md_driver_versions(rows: list[Mapping[str, Any]]) -> list[str]:
    if not rows:
        return ["No node reported its driver."]
    return [
        "| version | nodes | differing nodes |",
        "|---|---|---|",
        *(f"| {_md_cell(v)} | {n} | {_md_cell(who)} |" for v, n, who in _version_rows(rows)),
    ]


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
    lines += ["", "## NVIDIA driver versions", ""]
    lines += _md_driver_versions(fleet.get("driver_versions") or [])
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
            f"- **{severity_label(finding)}** `{finding['code']}` {finding['subject']}: "
            f"{_md_cell(finding['message'])} Fix: {_md_cell(finding['fix'])}"
        )
    lines.append("")
    return lines


# --- HTML -----------------------------------------------------------------------------

# Worst first: the overview shows the nodes that need someone before the healthy ones.
TILE_STATUS_ORDER = (STATUS_FAILED, STATUS_UNREACHABLE, STATUS_FINDINGS, STATUS_OK)
TILE_COLOURS = {
    STATUS_FAILED: "#f4c5c0",
    STATUS_UNREACHABLE: "#ddd3f1",
    STATUS_FINDINGS: "#fbe0a8",
    STATUS_OK: "#cdebd5",
}
TILE_BORDER_COLOURS = {
    STATUS_FAILED: "#b3261e",
    STATUS_UNREACHABLE: "#5e3ea1",
    STATUS_FINDINGS: "#b26a00",
    STATUS_OK: "#2e7d46",
}
# P2P cells against the node's threshold: one red below it, light to dark green from the
# threshold to twice the threshold and above, grey where the probe measured nothing.
P2P_BELOW_COLOUR = "#e0746a"
P2P_AT_THRESHOLD_COLOUR = "#e1f4e4"
P2P_TWICE_THRESHOLD_COLOUR = "#79c487"
P2P_MISSING_COLOUR = "#e4e6eb"
# Overview thumbnails of a node without a threshold: measured, not judged.
P2P_UNJUDGED_COLOUR = "#b4c4de"
BELOW_MARK = "\u25bc"

_CSS = (
    """
body{font-family:system-ui,sans-serif;margin:2rem;color:#1d2330;max-width:1200px}
h1{margin-bottom:.2rem}table{border-collapse:collapse;margin:.5rem 0 1rem}
th,td{border:1px solid #c9ced8;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#eef1f6}.muted{color:#5b6475}
.status-ok{color:#176c2f}.status-findings{color:#9a5b00}
.status-unreachable,.status-failed{color:#b3261e}
.sev-critical,.sev-error{color:#b3261e;font-weight:600}.sev-warning{color:#9a5b00}
.sev-info{color:#3d5a99}td.heat{text-align:right;font-variant-numeric:tabular-nums}
td.below{font-weight:600;outline:2px solid #8c1d18;outline-offset:-2px}
details{border:1px solid #c9ced8;border-radius:4px;padding:.5rem 1rem;margin:.5rem 0}
summary{cursor:pointer;font-weight:600}
.legend{font-size:.85rem}.swatch{display:inline-block;min-width:1.6em;padding:0 .2em;
margin:0 .2em 0 .6em;border:1px solid #8a93a6;text-align:center;font-size:.8rem}
.tile-group{font-size:1rem;margin:.8rem 0 .3rem}
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(10.5rem,1fr));gap:4px}
.tile{display:grid;grid-template-columns:minmax(0,1fr) auto;gap:4px;align-items:center;
padding:3px 6px;border:1px solid;border-left-width:5px;border-radius:3px;font-size:.75rem;
line-height:1.25;color:#1d2330;text-decoration:none}
.tile:hover,.tile:focus{outline:2px solid #1d2330}
.tile-text>span{display:block;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.tile-text>.tile-marks{white-space:normal}
.tile-host{display:-webkit-box;-webkit-box-orient:vertical;-webkit-line-clamp:2;
overflow:hidden;overflow-wrap:anywhere}
.mark{display:inline-block;margin-right:3px;padding:0 3px;border:1px solid #1d2330;
border-radius:2px;font-size:.65rem;background:#fff}
.thumb{display:grid;gap:1px;background:#fff;padding:1px;border:1px solid #8a93a6}
.thumb i{display:block}
"""
    + "".join(
        f".tile-{status},.swatch-{status}{{background:{TILE_COLOURS[status]};"
        f"border-color:{TILE_BORDER_COLOURS[status]}}}\n"
        for status in TILE_STATUS_ORDER
    )
    + f".t-below{{background:{P2P_BELOW_COLOUR}}}.t-ok{{background:{P2P_TWICE_THRESHOLD_COLOUR}}}"
    f".t-missing{{background:{P2P_MISSING_COLOUR}}}.t-unjudged{{background:{P2P_UNJUDGED_COLOUR}}}"
    ".t-self{background:#fff}\n"
)


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def heat_colour(value: float | None, best: float) -> str:
    """Background for a GB/s cell: red (slow) to green (the node's best)."""
    if value is None or best <= 0:
        return P2P_MISSING_COLOUR
    hue = round(120 * max(0.0, min(1.0, value / best)))
    return f"hsl({hue},70%,78%)"


def _mix(low: str, high: str, fraction: float) -> str:
    """The colour ``fraction`` (0 to 1) of the way from ``low`` to ``high`` (#rrggbb)."""
    channels = [
        round(
            int(low[i : i + 2], 16)
            + (int(high[i : i + 2], 16) - int(low[i : i + 2], 16)) * fraction
        )
        for i in (1, 3, 5)
    ]
    return "#" + "".join(f"{channel:02x}" for channel in channels)


def threshold_heat_colour(value: float | None, threshold_gbytes_per_s: float) -> str:
    """Background for a GB/s cell against the node's P2P threshold: P2P_BELOW_COLOUR below
    it, light (at the threshold) to dark green (twice the threshold and above), grey when
    not measured."""
    if value is None:
        return P2P_MISSING_COLOUR
    if value < threshold_gbytes_per_s:
        return P2P_BELOW_COLOUR
    above = max(0.0, min(1.0, value / threshold_gbytes_per_s - 1.0))
    return _mix(P2P_AT_THRESHOLD_COLOUR, P2P_TWICE_THRESHOLD_COLOUR, above)


def p2p_threshold_gbytes_per_s(node: Mapping[str, Any]) -> float | None:
    """The threshold the node's plan judged its pairs by (policy ``p2p_min_gbytes_per_s``,
    the node's ``lingbot_service_p2p_min_gbytes_per_s``); None without a plan."""
    value = ((node.get("plan") or {}).get("policy") or {}).get("p2p_min_gbytes_per_s")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def pairs_below(probe: Mapping[str, Any], threshold_gbytes_per_s: float) -> list[tuple[Any, Any]]:
    """The GPU pairs (lower index first) measured below the threshold in either direction,
    as the planner judges a pair by its slower direction."""
    below = set()
    indices = probe["gpu_indices"]
    for src, row in zip(indices, probe["p2p_gbytes_per_s"], strict=True):
        for dst, value in zip(indices, row, strict=True):
            if src != dst and value is not None and value < threshold_gbytes_per_s:
                below.add((min(src, dst), max(src, dst)))
    return sorted(below)


def _pair_count(indices: Sequence[Any]) -> int:
    return len(indices) * (len(indices) - 1) // 2


def _no_threshold_reason(node: Mapping[str, Any]) -> str:
    if node.get("plan"):
        return "the plan has no p2p_min_gbytes_per_s"
    return f"no plan: {node.get('plan_error') or 'no facts'}"


def _relative_cell(src: Any, dst: Any, value: float | None, best: float) -> str:
    return (
        f'<td class="heat" style="background:{heat_colour(value, best)}" '
        f'title="GPU {src} to GPU {dst}">{_gbytes(value)}</td>'
    )


def _threshold_cell(src: Any, dst: Any, value: float | None, threshold: float) -> str:
    colour = threshold_heat_colour(value, threshold)
    pair = f"GPU {src} to GPU {dst}"
    if value is None:
        return f'<td class="heat" style="background:{colour}" title="{pair}: not measured">-</td>'
    if value < threshold:
        return (
            f'<td class="heat below" style="background:{colour}" title="{pair}: '
            f'{value:.1f} GB/s, below the threshold {threshold:g} GB/s">'
            f"{BELOW_MARK} {_gbytes(value)}</td>"
        )
    return (
        f'<td class="heat" style="background:{colour}" title="{pair}: {value:.1f} GB/s, '
        f'at or above the threshold {threshold:g} GB/s">{_gbytes(value)}</td>'
    )


def _threshold_legend(threshold: float) -> str:
    return (
        '<p class="legend">'
        f'<span class="swatch" style="background:{P2P_BELOW_COLOUR}">{BELOW_MARK}</span>'
        f"below {threshold:g} GB/s"
        f'<span class="swatch" style="background:{P2P_AT_THRESHOLD_COLOUR}">&nbsp;</span>'
        f"at {threshold:g} GB/s"
        f'<span class="swatch" style="background:{P2P_TWICE_THRESHOLD_COLOUR}">&nbsp;</span>'
        f"{2 * threshold:g} GB/s and above"
        f'<span class="swatch" style="background:{P2P_MISSING_COLOUR}">-</span>not measured'
        '<span class="swatch">X</span>same GPU</p>'
    )


def _relative_legend() -> str:
    return (
        '<p class="legend">'
        f'<span class="swatch" style="background:{heat_colour(0.0, 1.0)}">&nbsp;</span>'
        "0 GB/s"
        f'<span class="swatch" style="background:{heat_colour(1.0, 1.0)}">&nbsp;</span>'
        "the node's best pair"
        f'<span class="swatch" style="background:{heat_colour(None, 1.0)}">-</span>not measured'
        '<span class="swatch">X</span>same GPU</p>'
    )


def _heat_map(
    probe: Mapping[str, Any],
    threshold_gbytes_per_s: float | None,
    no_threshold_reason: str,
) -> str:
    """The P2P matrix coloured against the node's threshold; without one, against the
    node's best pair (the caption says which)."""
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
            elif threshold_gbytes_per_s is None:
                cells.append(_relative_cell(src, dst, value, best))
            else:
                cells.append(_threshold_cell(src, dst, value, threshold_gbytes_per_s))
        rows.append(f"<tr><th>GPU {src}</th>{''.join(cells)}</tr>")
    caption = (
        f"<p>P2P bandwidth, peer access on (GB/s), probe {_e(probe['source'])} "
        f"{_e(probe['timestamp'])}"
    )
    if threshold_gbytes_per_s is None:
        caption += (
            f". No P2P threshold for this node ({_e(no_threshold_reason)}): colours are "
            "relative to the node's best pair, red slow to green best.</p>"
        )
        legend = _relative_legend()
    else:
        below = pairs_below(probe, threshold_gbytes_per_s)
        caption += (
            f", against the threshold {threshold_gbytes_per_s:g} GB/s (the plan's "
            f"<code>p2p_min_gbytes_per_s</code>): {len(below)} of {_pair_count(indices)} "
            f"pairs below in either direction"
            + (
                f" ({', '.join(f'{a}-{b}' for a, b in below)}), cells marked {BELOW_MARK}"
                if below
                else ""
            )
            + ".</p>"
        )
        legend = _threshold_legend(threshold_gbytes_per_s)
    return f'{caption}<table class="heatmap">{"".join(rows)}</table>{legend}'


# --- HTML: overview -------------------------------------------------------------------


def tile_order(nodes: Sequence[Mapping[str, Any]], threshold: str) -> list[Mapping[str, Any]]:
    """Failed, unreachable, findings (most findings at or above the threshold first), ok;
    by host within each."""
    rank = {status: position for position, status in enumerate(TILE_STATUS_ORDER)}
    return sorted(
        nodes,
        key=lambda node: (
            rank.get(node["status"], len(rank)),
            -len(_failing(node, threshold)),
            node["host"],
        ),
    )


def _thumbnail(probe: Mapping[str, Any], threshold_gbytes_per_s: float | None) -> str:
    """The P2P matrix as a few pixels a cell: below the threshold, at or above, missing."""
    indices = probe.get("gpu_indices") or []
    if not indices:
        return ""
    cell_px = max(2, min(6, 36 // len(indices)))
    cells = []
    for src, row in zip(indices, probe["p2p_gbytes_per_s"], strict=True):
        for dst, value in zip(indices, row, strict=True):
            if src == dst:
                kind = "self"
            elif value is None:
                kind = "missing"
            elif threshold_gbytes_per_s is None:
                kind = "unjudged"
            else:
                kind = "below" if value < threshold_gbytes_per_s else "ok"
            cells.append(f'<i class="t-{kind}"></i>')
    return (
        f'<span class="thumb" aria-hidden="true" style="grid-template-columns:'
        f'repeat({len(indices)},{cell_px}px);grid-auto-rows:{cell_px}px">{"".join(cells)}</span>'
    )


def shared_domain_suffix(hosts: Sequence[str]) -> str:
    """The domain (".example.internal") every one of two or more host names ends in after
    its first label, which the tiles leave out; "" when there is none or the names are
    IPv4 addresses."""
    if len(hosts) < 2 or not all("." in host for host in hosts):
        return ""
    domains = [host.split(".")[1:] for host in hosts]
    shared: list[str] = []
    for labels in zip(*(reversed(domain) for domain in domains), strict=False):
        if len(set(labels)) != 1 or not labels[0]:
            break
        shared.insert(0, labels[0])
    if not shared or shared[-1].isdigit():
        return ""
    return "." + ".".join(shared)


def _tile(node: Mapping[str, Any], threshold: str, domain_suffix: str) -> str:
    host, status = node["host"], node["status"]
    shown_host = host.removesuffix(domain_suffix) if domain_suffix else host
    described = [f"{host}: {status}"]
    marks = []
    thumbnail = ""
    if status in (STATUS_UNREACHABLE, STATUS_FAILED):
        detail = str(node.get("reason") or "")
        described.append(detail)
    else:
        failing = len(_failing(node, threshold))
        detail = f"{status}: {failing} \u2265 {threshold}" if failing else status
        described.append(f"{failing} finding(s) at or above {threshold}")
        if node.get("pending_reboot"):
            marks.append("reboot")
            described.append("pending reboot")
        if (node.get("drift") or {}).get("drifted"):
            marks.append("drift")
            described.append("LingBot config drifted")
        probe = node.get("probe")
        if probe:
            p2p_threshold = p2p_threshold_gbytes_per_s(node)
            thumbnail = _thumbnail(probe, p2p_threshold)
            below = len(pairs_below(probe, p2p_threshold)) if p2p_threshold else 0
            if below:
                marks.append(f"P2P {BELOW_MARK}{below}")
                described.append(f"{below} P2P pair(s) below {p2p_threshold:g} GB/s")
        else:
            marks.append("no probe")
            described.append("no probe result")
    mark_html = "".join(f'<span class="mark">{_e(mark)}</span>' for mark in marks)
    return (
        f'<a class="tile tile-{_e(status)}" href="#node-{_e(host)}" '
        f'title="{_e("; ".join(described))}"><span class="tile-text">'
        f'<b class="tile-host">{_e(shown_host)}</b><span class="tile-detail">{_e(detail)}</span>'
        + (f'<span class="tile-marks">{mark_html}</span>' if marks else "")
        + f"</span>{thumbnail}</a>"
    )


def _overview(fleet: Mapping[str, Any]) -> str:
    """One tile per node, grouped by status, worst group first."""
    threshold = fleet["severity_threshold"]
    ordered = tile_order(fleet["nodes"], threshold)
    suffix = shared_domain_suffix([node["host"] for node in ordered])
    groups = []
    for status in TILE_STATUS_ORDER:
        tiles = [_tile(node, threshold, suffix) for node in ordered if node["status"] == status]
        if tiles:
            groups.append(
                f'<h3 class="tile-group"><span class="swatch swatch-{status}">&nbsp;</span>'
                f'{status}: {len(tiles)}</h3><div class="tiles">{"".join(tiles)}</div>'
            )
    unknown = [
        _tile(node, threshold, suffix) for node in ordered if node["status"] not in TILE_COLOURS
    ]
    if unknown:
        groups.append(f'<div class="tiles">{"".join(unknown)}</div>')
    return (
        '<section class="overview"><h2>Overview</h2>'
        f'<p class="legend">{len(fleet["nodes"])} nodes, findings counted at or above '
        f"{_e(threshold)}"
        + (f"; host names shown without {_e(suffix)}" if suffix else "")
        + ". Markers: <b>reboot</b> pending reboot, <b>drift</b> LingBot "
        f"config drifted, <b>P2P {BELOW_MARK}n</b> n pairs below the node's P2P threshold, "
        "<b>no probe</b>; the thumbnail is the node's P2P matrix (red below the threshold, "
        "green at or above it, grey not measured, blue no threshold).</p>"
        + "".join(groups)
        + "</section>"
    )


def _html_findings(findings: Sequence[Mapping[str, Any]]) -> str:
    if not findings:
        return "<p>No findings.</p>"
    rows = "".join(
        f'<tr><td class="sev-{_e(f["severity"])}">{_e(severity_label(f))}</td>'
        f"<td>{_e(f['code'])}</td>"
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
            f"<p>Driver {_e(driver_parts_text(facts))}, IOMMU {_e(facts.get('iommu_mode'))}, "
            f"NUMA nodes {_e(facts.get('numa_node_count'))}</p>"
            "<table><tr><th>GPU</th><th>model</th><th>bus id</th><th>NUMA</th><th>link</th>"
            f"<th>upstream port</th><th>persistence</th></tr>{gpu_rows}</table>"
        )
    if node.get("probe"):
        parts.append(
            _heat_map(node["probe"], p2p_threshold_gbytes_per_s(node), _no_threshold_reason(node))
        )
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


def _html_driver_versions(rows: list[Mapping[str, Any]]) -> str:
    if not rows:
        return "<p>No node reported its driver.</p>"
    body = "".join(
        f"<tr><td>{_e(version)}</td><td>{_e(count)}</td><td>{_e(who)}</td></tr>"
        for version, count, who in _version_rows(rows)
    )
    return f"<table><tr><th>version</th><th>nodes</th><th>differing nodes</th></tr>{body}</table>"


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
    versions = _html_driver_versions(fleet.get("driver_versions") or [])
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<title>LingBot fleet audit</title>"
        f"<style>{_CSS}</style></head><body>"
        "<h1>LingBot fleet audit</h1>"
        f'<p class="muted">{_e(fleet["generated_at"])}, inventory {scope}, '
        f"schema {_e(fleet['schema_version'])}</p>"
        f"{_overview(fleet)}"
        f"<h2>Fleet</h2><table>{counts}</table>"
        f"<h2>Findings by code</h2>{codes}"
        f"<h2>NVIDIA driver versions</h2>{versions}"
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
                f"{severity_label(f)} {f['code']} {f['subject']}: {f['message']} Fix: {f['fix']}"
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
