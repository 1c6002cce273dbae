"""The monitor is installed as one program with its timer, and one run of it writes the
metrics of the pair LingBot uses, judged against the plan's threshold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

SERVICE = "lingbot-fleet-monitor.service"
TIMER = "lingbot-fleet-monitor.timer"
METRICS = "/var/lib/prometheus/node-exporter/lingbot_fleet_monitor.prom"
PROGRAM = "/usr/local/sbin/lingbot-fleet-monitor"
RUN_MONITOR_ONCE = (Path(__file__).parents[3] / "tests/lab/run_monitor_once.sh").read_text()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture(scope="module")
def monitor_run(host) -> dict[tuple[str, tuple], float]:
    """One run of the monitor, started as the timer starts it."""
    started = host.run(RUN_MONITOR_ONCE)
    assert started.rc == 0, f"the monitor run failed; its journal:\n{started.stderr}"
    return samples(host.file(METRICS).content_string)


def test_the_timer_is_enabled_and_waiting(host):
    timer = host.service(TIMER)
    assert timer.is_enabled
    assert timer.is_running
    assert host.run(f"systemd-analyze verify {SERVICE} {TIMER}").rc == 0


def test_the_program_is_one_file_the_node_runs(host):
    program = host.file(PROGRAM)
    assert program.is_file
    assert program.mode & 0o111
    assert not program.mode & 0o022


def test_a_run_measures_the_used_pair_against_the_plan(host, monitor_run):
    plan = json.loads(host.file("/etc/lingbot/plan.json").content_string)
    [instance] = plan["instances"]
    threshold_bytes_per_second = instance["peer_access_threshold_gbytes_per_s"] * 1e9
    for pair in instance["peer_access_pairs"]:
        labels = (("dst", str(pair["dst"])), ("src", str(pair["src"])))
        assert monitor_run[("lingbot_fleet_p2p_usable", labels)] == 1
        measured = monitor_run[("lingbot_fleet_p2p_bandwidth_bytes_per_second", labels)]
        assert measured >= threshold_bytes_per_second
    fallback = (("instance", instance["name"]),)
    assert monitor_run[("lingbot_fleet_fallback_recommended", fallback)] == 0
