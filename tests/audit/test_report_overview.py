"""fleet.html's overview tiles and the P2P heat map against the node's threshold."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

from lingbot_fleet.audit.fleet import AuditOutcome, build_fleet
from lingbot_fleet.audit.reports import (
    BELOW_MARK,
    P2P_AT_THRESHOLD_COLOUR,
    P2P_BELOW_COLOUR,
    P2P_MISSING_COLOUR,
    P2P_TWICE_THRESHOLD_COLOUR,
    p2p_threshold_gbytes_per_s,
    pairs_below,
    render_html,
    shared_domain_suffix,
    threshold_heat_colour,
    tile_order,
)

# GPU 0 <-> 2 is below 25 GB/s both ways; 1 -> 2 was not measured, 2 -> 1 was (60).
MATRIX_3X3 = [[None, 28.4, 19.2], [30.0, None, None], [19.0, 60.0, None]]


def finding(code: str, severity: str) -> dict[str, Any]:
    return {
        "code": code,
        "severity": severity,
        "subject": "node",
        "message": f"{code} message",
        "evidence": {},
        "fix": f"{code} fix",
    }


def record(
    *findings: dict[str, Any],
    threshold_gbytes_per_s: float | None = 25.0,
    matrix: list[list[float | None]] | None = MATRIX_3X3,
    pending_reboot: bool = False,
    drifted: bool = False,
) -> dict[str, Any]:
    plan = None
    if threshold_gbytes_per_s is not None:
        plan = {
            "summary": "1 LingBot instance(s).",
            "mode_reason": "test",
            "policy": {"p2p_min_gbytes_per_s": threshold_gbytes_per_s},
            "instances": [],
            "unused_gpus": [],
            "notes": [],
        }
    probe = None
    if matrix is not None:
        probe = {
            "source": "saved",
            "timestamp": "2026-01-01T00:00:00Z",
            "gpu_indices": list(range(len(matrix))),
            "p2p_gbytes_per_s": matrix,
        }
    return {
        "facts": {},
        "findings": list(findings),
        "probe": probe,
        "plan": plan,
        "plan_error": None if plan else "policy p2p_min_gbytes_per_s: must be > 0, got -1",
        "drift": {"deployed": drifted, "drifted": drifted, "instances": []},
        "kernel": {},
        "pending_reboot": pending_reboot,
        "generations": [],
    }


def fleet_of(
    records: dict[str, dict[str, Any]],
    unreachable: dict[str, str] | None = None,
    failed: dict[str, str] | None = None,
) -> dict[str, Any]:
    unreachable, failed = unreachable or {}, failed or {}
    outcome = AuditOutcome(
        hosts=[*records, *unreachable, *failed],
        records=records,
        unreachable=unreachable,
        failed=failed,
    )
    return build_fleet(
        outcome, inventory="inv.yml", limit=None, threshold="error", generated_at="T"
    )


class _Tiles(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tiles: list[dict[str, Any]] = []
        self.ids: list[str] = []
        self._field: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        if attributes.get("id"):
            self.ids.append(attributes["id"] or "")
        if tag == "a" and "tile" in classes:
            self.tiles.append({**attributes, "host": "", "detail": "", "marks": [], "cells": []})
        elif self.tiles and tag == "i":
            self.tiles[-1]["cells"].append(attributes.get("class"))
        elif self.tiles and tag in ("b", "span"):
            self._field = next(
                (name for name in ("host", "detail") if f"tile-{name}" in classes), None
            )
            if "mark" in classes:
                self._field = "mark"
                self.tiles[-1]["marks"].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("b", "span"):
            self._field = None

    def handle_data(self, data: str) -> None:
        if not self.tiles or self._field is None:
            return
        if self._field == "mark":
            self.tiles[-1]["marks"][-1] += data
        else:
            self.tiles[-1][self._field] += data


def tiles_of(text: str) -> _Tiles:
    overview = text[text.index('<section class="overview">') : text.index("</section>")]
    parser = _Tiles()
    parser.feed(overview)
    parser.close()
    return parser


def test_tiles_are_failed_unreachable_findings_then_ok_most_findings_first() -> None:
    fleet = fleet_of(
        {
            "a-ok": record(finding("PERSISTENCE_MODE_OFF", "warning")),
            "b-one": record(finding("GPU_LOST", "critical")),
            "c-two": record(finding("GPU_LOST", "critical"), finding("PLAN_INPUT_ERROR", "error")),
            "d-one": record(finding("PLAN_INPUT_ERROR", "error")),
        },
        unreachable={"e-down": "refused"},
        failed={"f-failed": "module failure", "0-failed": "no result"},
    )
    hosts = [node["host"] for node in tile_order(fleet["nodes"], "error")]
    assert hosts == ["0-failed", "f-failed", "e-down", "c-two", "b-one", "d-one", "a-ok"]
    tiles = tiles_of(render_html(fleet)).tiles
    assert [tile["host"] for tile in tiles] == hosts
    assert [tile["class"] for tile in tiles[:4]] == [
        "tile tile-failed",
        "tile tile-failed",
        "tile tile-unreachable",
        "tile tile-findings",
    ]
    assert tiles[2]["detail"] == "refused"
    assert tiles[3]["detail"] == "findings: 2 \u2265 error"
    assert tiles[6]["detail"] == "ok"


def test_the_overview_comes_before_the_fleet_table() -> None:
    text = render_html(fleet_of({"a": record()}))
    assert text.index('<section class="overview">') < text.index("<h2>Fleet</h2>")


def test_tile_markers_say_in_words_what_the_colours_say() -> None:
    fleet = fleet_of(
        {
            "a": record(pending_reboot=True, drifted=True),
            "b": record(matrix=None),
            "c": record(matrix=[[None, 30.0], [31.0, None]]),
        }
    )
    tiles = {tile["host"]: tile for tile in tiles_of(render_html(fleet)).tiles}
    assert tiles["a"]["marks"] == ["reboot", "drift", f"P2P {BELOW_MARK}1"]
    assert tiles["a"]["title"] == (
        "a: ok; 0 finding(s) at or above error; pending reboot; LingBot config drifted; "
        "1 P2P pair(s) below 25 GB/s"
    )
    assert tiles["b"]["marks"] == ["no probe"]
    assert tiles["b"]["cells"] == []
    assert tiles["c"]["marks"] == []


def test_thumbnail_cells_follow_the_threshold() -> None:
    tiles = tiles_of(
        render_html(fleet_of({"a": record(), "b": record(threshold_gbytes_per_s=None)}))
    ).tiles
    assert tiles[0]["cells"] == [
        *("t-self", "t-ok", "t-below"),
        *("t-ok", "t-self", "t-missing"),
        *("t-below", "t-ok", "t-self"),
    ]
    assert tiles[1]["cells"] == [
        *("t-self", "t-unjudged", "t-unjudged"),
        *("t-unjudged", "t-self", "t-missing"),
        *("t-unjudged", "t-unjudged", "t-self"),
    ]


def test_odd_host_names_are_escaped_and_the_tile_links_to_the_section() -> None:
    host = 'rack 3/"gpu"<b>&\'x'
    fleet = fleet_of({host: record()}, unreachable={"<script>alert(1)</script>": "down"})
    text = render_html(fleet)
    assert "<b>&" not in text and "<script>" not in text
    assert (
        '<a class="tile tile-ok" href="#node-rack 3/&quot;gpu&quot;&lt;b&gt;&amp;&#x27;x"' in text
    )
    parsed = tiles_of(text)
    assert [tile["host"] for tile in parsed.tiles] == ["<script>alert(1)</script>", host]
    sections = _Tiles()
    sections.feed(text)
    for tile in parsed.tiles:
        assert tile["href"] == f"#node-{tile['host']}"
        assert tile["href"][1:] in sections.ids


def test_a_domain_every_host_shares_is_left_out_of_the_tiles() -> None:
    hosts = ["gpu-01.dc1.example.internal", "gpu-02.dc1.example.internal"]
    assert shared_domain_suffix(hosts) == ".dc1.example.internal"
    assert shared_domain_suffix([*hosts, "gpu-03.dc2.example.internal"]) == ".example.internal"
    assert shared_domain_suffix([*hosts, "gpu-03"]) == ""
    assert shared_domain_suffix(hosts[:1]) == ""
    assert shared_domain_suffix(["10.0.1.5", "10.0.2.5"]) == ""
    text = render_html(fleet_of({host: record() for host in hosts}))
    tiles = tiles_of(text).tiles
    assert [tile["host"] for tile in tiles] == ["gpu-01", "gpu-02"]
    assert tiles[0]["href"] == "#node-gpu-01.dc1.example.internal"
    assert "host names shown without .dc1.example.internal" in text


def test_threshold_heat_colour() -> None:
    assert threshold_heat_colour(None, 25.0) == P2P_MISSING_COLOUR
    assert threshold_heat_colour(0.0, 25.0) == P2P_BELOW_COLOUR
    assert threshold_heat_colour(24.99, 25.0) == P2P_BELOW_COLOUR
    assert threshold_heat_colour(25.0, 25.0) == P2P_AT_THRESHOLD_COLOUR
    assert threshold_heat_colour(37.5, 25.0) == "#addcb6"
    assert threshold_heat_colour(50.0, 25.0) == P2P_TWICE_THRESHOLD_COLOUR
    assert threshold_heat_colour(370.0, 25.0) == P2P_TWICE_THRESHOLD_COLOUR


def test_the_threshold_is_the_plans_policy() -> None:
    assert p2p_threshold_gbytes_per_s(record(threshold_gbytes_per_s=19.5)) == 19.5
    assert p2p_threshold_gbytes_per_s(record(threshold_gbytes_per_s=None)) is None
    assert p2p_threshold_gbytes_per_s({"plan": {"policy": {"p2p_min_gbytes_per_s": True}}}) is None
    assert p2p_threshold_gbytes_per_s({"plan": {"policy": {}}}) is None


def test_pairs_below_are_judged_by_their_slower_direction() -> None:
    probe = record()["probe"]
    assert pairs_below(probe, 25.0) == [(0, 2)]
    assert pairs_below(probe, 29.0) == [(0, 1), (0, 2)]
    assert pairs_below(probe, 10.0) == []


def test_heat_map_against_the_threshold_marks_cells_below_in_colour_and_text() -> None:
    text = render_html(fleet_of({"a": record()}))
    assert (
        f'<td class="heat below" style="background:{P2P_BELOW_COLOUR}" title="GPU 0 to GPU 2: '
        f'19.2 GB/s, below the threshold 25 GB/s">{BELOW_MARK} 19.2</td>'
    ) in text
    assert (
        f'<td class="heat" style="background:{threshold_heat_colour(28.4, 25.0)}" '
        'title="GPU 0 to GPU 1: 28.4 GB/s, at or above the threshold 25 GB/s">28.4</td>'
    ) in text
    assert (
        f'<td class="heat" style="background:{P2P_MISSING_COLOUR}" '
        'title="GPU 1 to GPU 2: not measured">-</td>'
    ) in text
    assert (
        "against the threshold 25 GB/s (the plan's <code>p2p_min_gbytes_per_s</code>): "
        f"1 of 3 pairs below in either direction (0-2), cells marked {BELOW_MARK}."
    ) in text
    assert f"{BELOW_MARK}</span>below 25 GB/s" in text
    assert "50 GB/s and above" in text


def test_without_a_threshold_the_heat_map_says_so_and_scales_to_the_best_pair() -> None:
    text = render_html(fleet_of({"a": record(threshold_gbytes_per_s=None)}))
    assert (
        "No P2P threshold for this node (no plan: policy p2p_min_gbytes_per_s: must be &gt; 0, "
        "got -1): colours are relative to the node's best pair, red slow to green best."
    ) in text
    assert (
        '<td class="heat" style="background:hsl(120,70%,78%)" title="GPU 2 to GPU 1">60.0</td>'
    ) in text
    assert "heat below" not in text
    assert "</span>the node's best pair<span" in text
