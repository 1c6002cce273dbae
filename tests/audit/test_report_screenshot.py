"""fleet.html in a real browser: headless Chromium renders a realistic twelve-node report
to a PNG and to its DOM; an unstyled, blank or broken page fails.

The nodes are audited with the audit's own evaluation (`evaluate_node`) from the lab
profiles' facts and probe documents (tests/plan/plan_support.py). Chromium comes from the
Debian package chromium-headless-shell: `make unit` installs it and exports its path as
CHROMIUM; without it this test fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from plan_support import lab_inputs
from png_support import DecodedPng, decode_png

from lingbot_fleet.audit.evaluate import AuditPolicy, evaluate_node
from lingbot_fleet.audit.fleet import AuditOutcome, build_fleet
from lingbot_fleet.audit.reports import (
    P2P_BELOW_COLOUR,
    TILE_COLOURS,
    TILE_STATUS_ORDER,
    tile_order,
    write_reports,
)

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium-headless-shell") or ""
WINDOW_WIDTH_PX = 1280
WINDOW_HEIGHT_PX = 2400
CHROMIUM_TIMEOUT_S = 60
# The overview sits at the top: every tile is drawn within these first rows.
OVERVIEW_ROWS_PX = 900
# A tile's fill is about 160 x 40 pixels; half of that, less its text, is a safe floor.
TILE_FILL_MIN_PX = 2500
# Eight heat-map cells of the 4-GPU node are below its threshold, each about 60 x 22
# pixels; the overview's thumbnail cells and the legend's swatch add less than 1000.
HEAT_BELOW_MIN_PX = 5000

ODD_AUDITED_HOST = 'rack 3/"gpu"<b>&\'x'
ODD_UNREACHABLE_HOST = "gpu-c01<script>"
POLICY_VARS = {"kernel_cmdline_present": {"iommu": "pt"}, "kernel_cmdline_absent": ["pci=noacpi"]}


def audited(
    profile: str,
    *,
    probe: bool = True,
    pending_reboot: bool = False,
    deployed: dict[str, Any] | None = None,
    host_vars: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The audit record of a lab profile's node, as the controller evaluates it."""
    facts, probe_document = lab_inputs(profile)
    for gpu in facts["gpus"]:
        gpu["persistence_mode"] = profile != "a6000-persistenced-off"
    booted = facts["kernel"]["cmdline"].split()
    node = {
        "facts": facts,
        "probe": probe_document if probe else None,
        "kernel": {
            "running": booted if pending_reboot else [*booted, "iommu=pt"],
            "next_boot": [*booted, "iommu=pt"],
            "next_boot_source": "grub.cfg",
            "grub_defaults": None,
            "cpu_vendor": "AuthenticAMD",
        },
        "lingbot": {"configs": deployed or {}, "plan": None},
        "generations": [],
    }
    return evaluate_node(node, AuditPolicy.from_vars({**POLICY_VARS, **(host_vars or {})}))


def sample_fleet() -> dict[str, Any]:
    records = {
        "gpu-a01": audited("pcie-4gpu-two-switches", pending_reboot=True),
        "gpu-a02": audited("a6000-phb"),
        "gpu-a03": audited("h100-sxm-nvswitch"),
        "gpu-a04": audited("a6000-x8"),
        "gpu-a05": audited("a6000-persistenced-off"),
        "gpu-a06": audited("a6000-noacpi"),
        "gpu-a07": audited("a6000-phb", probe=False),
        "gpu-a08": audited("a6000-chipset", host_vars={"lingbot_service_p2p_min_gbytes_per_s": -1}),
        "gpu-a09": audited(
            "a6000-already-configured",
            deployed={"main": {"text": "kv_cache_strategy: host_fallback\n"}},
        ),
        ODD_AUDITED_HOST: audited("a6000-phb"),
    }
    outcome = AuditOutcome(
        hosts=[*records, ODD_UNREACHABLE_HOST, "gpu-b01"],
        records=records,
        unreachable={ODD_UNREACHABLE_HOST: "ssh: connect to host port 22: Connection refused"},
        failed={"gpu-b01": "lingbot_audit_node: MODULE FAILURE"},
    )
    return build_fleet(
        outcome,
        inventory="inventory/prod",
        limit=None,
        threshold="error",
        generated_at="2026-01-01T00:00:00Z",
        duration_s=4.2,
    )


def chromium(html_path: Path, profile_dir: Path, *mode: str) -> subprocess.CompletedProcess:
    if not CHROMIUM or not Path(CHROMIUM).is_file():
        pytest.fail(
            f"headless Chromium is missing ({CHROMIUM or 'chromium-headless-shell not on PATH'}): "
            "`make unit` installs it (Debian package chromium-headless-shell)"
        )
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--user-data-dir={profile_dir}",
        f"--window-size={WINDOW_WIDTH_PX},{WINDOW_HEIGHT_PX}",
        *mode,
        html_path.as_uri(),
    ]
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S, check=False
    )
    assert result.returncode == 0, f"{argv} exited {result.returncode}:\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def fleet() -> dict[str, Any]:
    return sample_fleet()


@pytest.fixture(scope="module")
def fleet_html(fleet: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    report_dir = tmp_path_factory.mktemp("report")
    written = write_reports(fleet, report_dir)
    return next(path for path in written if path.name == "fleet.html")


@pytest.fixture(scope="module")
def screenshot(fleet_html: Path, tmp_path_factory: pytest.TempPathFactory) -> DecodedPng:
    work = tmp_path_factory.mktemp("chromium-screenshot")
    png_path = work / "fleet.png"
    chromium(fleet_html, work / "profile", f"--screenshot={png_path}")
    assert png_path.is_file(), "Chromium wrote no screenshot"
    return decode_png(png_path.read_bytes())


@pytest.fixture(scope="module")
def dom(fleet_html: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    work = tmp_path_factory.mktemp("chromium-dom")
    return chromium(fleet_html, work / "profile", "--dump-dom").stdout


def rgb(colour: str) -> tuple[int, int, int]:
    return (int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16))


def test_the_sample_fleet_has_every_status(fleet: dict[str, Any]) -> None:
    statuses = {node["host"]: node["status"] for node in fleet["nodes"]}
    assert len(statuses) == 12
    assert set(statuses.values()) == set(TILE_STATUS_ORDER)
    assert statuses["gpu-a01"] == "findings"
    assert fleet["nodes"][0]["probe"]["gpu_indices"] == [0, 1, 2, 3]
    assert statuses[ODD_AUDITED_HOST] == "ok"


def test_screenshot_is_the_window_size(screenshot: DecodedPng) -> None:
    assert (screenshot.width_px, screenshot.height_px) == (WINDOW_WIDTH_PX, WINDOW_HEIGHT_PX)


def test_screenshot_shows_the_status_tiles_at_the_top(
    screenshot: DecodedPng, fleet: dict[str, Any]
) -> None:
    overview = screenshot.colour_counts(0, OVERVIEW_ROWS_PX)
    for status in TILE_STATUS_ORDER:
        tiles = sum(1 for node in fleet["nodes"] if node["status"] == status)
        drawn_px = overview[rgb(TILE_COLOURS[status])]
        assert drawn_px >= TILE_FILL_MIN_PX * tiles, (
            f"{status}: {drawn_px} pixels of {TILE_COLOURS[status]} for {tiles} tile(s)"
        )


def test_screenshot_shows_the_pairs_below_threshold(screenshot: DecodedPng) -> None:
    drawn_px = screenshot.colour_counts()[rgb(P2P_BELOW_COLOUR)]
    assert drawn_px >= HEAT_BELOW_MIN_PX, f"{drawn_px} pixels of {P2P_BELOW_COLOUR}"


class _TileReader(HTMLParser):
    """The overview's tiles (href, classes, host text) and every element id, from the DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.tiles: list[dict[str, Any]] = []
        self.ids: set[str] = set()
        self._in_host = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if attributes.get("id"):
            self.ids.add(attributes["id"] or "")
        classes = (attributes.get("class") or "").split()
        if tag == "a" and "tile" in classes:
            self.tiles.append({"href": attributes.get("href"), "classes": classes, "host": ""})
        self._in_host = tag == "b" and "tile-host" in classes

    def handle_endtag(self, tag: str) -> None:
        if tag == "b":
            self._in_host = False

    def handle_data(self, data: str) -> None:
        if self._in_host and self.tiles:
            self.tiles[-1]["host"] += data


def test_dom_has_one_tile_per_node_worst_first_linking_to_its_section(
    dom: str, fleet: dict[str, Any]
) -> None:
    reader = _TileReader()
    reader.feed(dom)
    reader.close()
    hosts = [tile["host"] for tile in reader.tiles]
    assert sorted(hosts) == sorted(node["host"] for node in fleet["nodes"])
    status_of = {node["host"]: node["status"] for node in fleet["nodes"]}
    ranks = [TILE_STATUS_ORDER.index(status_of[host]) for host in hosts]
    assert ranks == sorted(ranks)
    assert hosts == [node["host"] for node in tile_order(fleet["nodes"], "error")]
    assert hosts[:2] == ["gpu-b01", ODD_UNREACHABLE_HOST]
    for tile in reader.tiles:
        assert tile["href"] == f"#node-{tile['host']}"
        assert f"tile-{status_of[tile['host']]}" in tile["classes"]
        assert tile["href"][1:] in reader.ids
