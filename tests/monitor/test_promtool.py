"""The monitor's textfile passes `promtool check metrics` (Prometheus' own linter).

promtool comes from the Debian package prometheus, unpacked by `make unit` into .tools/
(the Makefile exports its path as PROMTOOL).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lingbot_fleet.monitor.metrics import metric_families, render_metrics

REPO_ROOT = Path(__file__).resolve().parents[2]
PROMTOOL = Path(
    os.environ.get("PROMTOOL") or REPO_ROOT / ".tools" / "prometheus" / "usr" / "bin" / "promtool"
)

# One monitor run's report with every family filled: a pair, two GPUs, findings.
REPORT = {
    "pairs": [
        {
            "src": 0,
            "dst": 1,
            "measured_gbytes_per_s": 28.4,
            "latency_ns": 1320.0,
            "threshold_gbytes_per_s": 25.0,
            "usable": True,
            "below_threshold_runs": 0,
        }
    ],
    "gpus": [
        {
            "index": index,
            "bus_id": bus_id,
            "link_generation": 4,
            "link_width": 16,
            "h2d_gbytes_per_s": 24.6,
            "d2h_gbytes_per_s": 25.1,
        }
        for index, bus_id in ((0, "0000:41:00.0"), (1, "0000:42:00.0"))
    ],
    "findings_by_severity": {"info": 0, "warning": 1, "error": 0, "critical": 0},
    "findings": [
        {"code": "GPU_XID_13", "severity": "warning", "subject": "0000:41:00.0"},
    ],
    "plan_drift": 0,
    "fallback_recommended": {"main": False},
    "finished_unix_s": 1_700_000_000,
    "duration_s": 3.2,
}


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    if not PROMTOOL.is_file():
        pytest.fail(f"{PROMTOOL} is missing: `make unit` unpacks it (Debian package prometheus)")
    return subprocess.run(
        [str(PROMTOOL), "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )


def test_promtool_accepts_the_monitor_metrics() -> None:
    text = render_metrics(metric_families(REPORT))
    done = promtool_check(text)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "lingbot_fleet_p2p_bandwidth_bytes_per_second" in text
    assert 'lingbot_fleet_p2p_bandwidth_bytes_per_second{src="0",dst="1"} 28400000000\n' in text
    assert 'lingbot_fleet_p2p_latency_seconds{src="0",dst="1"} 1.32e-06\n' in text
    finding = 'lingbot_fleet_finding{code="GPU_XID_13",severity="warning",subject="0000:41:00.0"}'
    assert f"{finding} 1\n" in text


def test_promtool_rejects_abbreviated_units() -> None:
    """The check is live: a name with an abbreviated unit, as the metrics had, is refused."""
    text = "# HELP lingbot_fleet_p2p_latency_ns x\n# TYPE lingbot_fleet_p2p_latency_ns gauge\n"
    done = promtool_check(text + "lingbot_fleet_p2p_latency_ns 1320\n")
    assert done.returncode != 0
    assert "abbreviated units" in done.stdout + done.stderr
