"""The path monitor on lab nodes: judging used pairs, consecutive runs, fallback, metrics."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from facts_support import LAB_LIB, load_profile
from monitor_support import boot, monitor_config, pair_labels, samples, write_plan

from lingbot_fleet.controller import nodeapp
from lingbot_fleet.monitor import cli, metrics
from lingbot_fleet.monitor.cli import journal_lines, log
from lingbot_fleet.monitor.config import MonitorConfig, MonitorConfigError
from lingbot_fleet.monitor.judge import PairVerdict, UsedPair, judge_pair
from lingbot_fleet.monitor.metrics import escape_label_value, render_metrics, write_textfile
from lingbot_fleet.monitor.run import probe_parameters, run_monitor
from lingbot_fleet.plan import build_plan

PT_CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.1.0 ro quiet intel_iommu=on iommu=pt"
TRANSLATED_CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.1.0 ro quiet intel_iommu=on"
# Pairs of the iommu-acs node measure ~17.5 GB/s with iommu=pt; the plan uses them at 15.
IOMMU_POLICY = {"p2p_min_gbytes_per_s": 15}


def metrics_text(config: MonitorConfig) -> str:
    return (Path(config.textfile_dir) / config.textfile_name).read_text()


def close(value: float, expected: float, tolerance: float = 0.05) -> bool:
    return abs(value - expected) <= tolerance * expected


# ---- healthy: a6000-phb ----------------------------------------------------------------


def test_healthy_phb_pairs_usable_and_no_fallback(tmp_path: Path, lab_env: Any) -> None:
    booted = boot(load_profile("a6000-phb"), tmp_path / "boot", lab_env)
    plan = build_plan(booted.facts(), booted.probe())
    assert [i["gpus"] for i in plan["instances"]] == [[0, 1]]
    write_plan(tmp_path, plan)
    config = monitor_config(booted, tmp_path)

    report = run_monitor(config, wall_clock=lambda: 1_700_000_000.0)

    assert [(p["src"], p["dst"], p["usable"]) for p in report["pairs"]] == [
        (0, 1, True),
        (1, 0, True),
    ]
    assert report["plan_drift"] == 0
    assert report["fallback_recommended"] == {"main": False}
    assert report["findings"] == []
    assert report["fallback_flag"] is None
    values = samples(metrics_text(config))
    for src, dst in ((0, 1), (1, 0)):
        labels = pair_labels(src, dst)
        assert values[("lingbot_fleet_p2p_usable", labels)] == 1
        assert values[("lingbot_fleet_p2p_threshold_bytes_per_second", labels)] == 25e9
        assert values[("lingbot_fleet_path_below_threshold_runs", labels)] == 0
        assert close(values[("lingbot_fleet_p2p_bandwidth_bytes_per_second", labels)] / 1e9, 28.4)
        assert close(values[("lingbot_fleet_p2p_latency_seconds", labels)] * 1e9, 1320)
    for gpu, bus_id in ((0, "0000:41:00.0"), (1, "0000:42:00.0")):
        labels = (("bus_id", bus_id), ("gpu", str(gpu)))
        # Idle at Gen1; the probe's copies bring the link to Gen4 x16.
        assert values[("lingbot_fleet_gpu_link_generation", labels)] == 4
        assert values[("lingbot_fleet_gpu_link_width", labels)] == 16
        h2d = (("direction", "h2d"), ("gpu", str(gpu)))
        h2d_bytes_per_second = values[("lingbot_fleet_gpu_host_bandwidth_bytes_per_second", h2d)]
        assert close(h2d_bytes_per_second / 1e9, 24.6, 0.1)
    assert values[("lingbot_fleet_fallback_recommended", (("instance", "main"),))] == 0
    assert values[("lingbot_fleet_plan_drift", ())] == 0
    for severity in ("info", "warning", "error", "critical"):
        assert values[("lingbot_fleet_findings", (("severity", severity),))] == 0
    assert values[("lingbot_fleet_monitor_last_run_timestamp_seconds", ())] == 1_700_000_000
    assert values[("lingbot_fleet_monitor_duration_seconds", ())] == report["duration_s"]
    state = json.loads((tmp_path / "state" / "state.json").read_text())
    assert state["pairs"]["main:0-1"]["below_threshold_runs"] == 0
    saved = json.loads((tmp_path / "state" / "last-run.json").read_text())
    assert saved["timestamp"] == "2023-11-14T22:13:20Z"


# ---- drift: a6000-iommu-acs ------------------------------------------------------------


@pytest.fixture
def iommu_plan(tmp_path: Path, lab_env: Any) -> dict[str, Any]:
    """The plan made while the node ran with iommu=pt: GPUs 0 and 1 with peer access."""
    booted = boot(load_profile("a6000-iommu-acs"), tmp_path / "boot-pt", lab_env, PT_CMDLINE)
    plan = build_plan(booted.facts(), booted.probe(), IOMMU_POLICY)
    assert plan["instances"][0]["peer_access_pairs"]
    write_plan(tmp_path, plan)
    return plan


def test_translated_iommu_counts_runs_recommends_fallback_and_resets(
    tmp_path: Path, lab_env: Any, iommu_plan: dict[str, Any]
) -> None:
    profile = load_profile("a6000-iommu-acs")
    translated = boot(profile, tmp_path / "boot-translated", lab_env, TRANSLATED_CMDLINE)
    config = monitor_config(translated, tmp_path, consecutive_runs=3)
    name = iommu_plan["instances"][0]["name"]
    fallback_sample = ("lingbot_fleet_fallback_recommended", (("instance", name),))

    for run in (1, 2, 3):
        report = run_monitor(config)
        pair = report["pairs"][0]
        assert (pair["src"], pair["dst"]) == (0, 1)
        assert pair["usable"] is False
        assert pair["data_check"] == "failed"
        assert pair["below_threshold_runs"] == run
        assert report["plan_drift"] == 2
        assert report["fallback_recommended"] == {name: run == 3}
        values = samples(metrics_text(config))
        assert values[("lingbot_fleet_p2p_usable", pair_labels(0, 1))] == 0
        assert values[("lingbot_fleet_path_below_threshold_runs", pair_labels(0, 1))] == run
        assert values[fallback_sample] == (1 if run == 3 else 0)
        bandwidth = values[("lingbot_fleet_p2p_bandwidth_bytes_per_second", pair_labels(0, 1))]
        assert close(bandwidth / 1e9, 6.1)
        codes = [finding["code"] for finding in report["findings"]]
        assert codes.count("MONITOR_PATH_BELOW_THRESHOLD") == 2
        assert ("MONITOR_FALLBACK_RECOMMENDED" in codes) is (run == 3)
    fallback = next(f for f in report["findings"] if f["code"] == "MONITOR_FALLBACK_RECOMMENDED")
    assert fallback["severity"] == "error"
    assert fallback["message"] == (
        f"instance {name}: pair(s) 0->1, 1->0 not usable for 3 consecutive runs (limit 3); "
        "single-GPU fallback recommended"
    )
    for severity, count in report["findings_by_severity"].items():
        assert values[("lingbot_fleet_findings", (("severity", severity),))] == count
    assert report["findings_by_severity"]["error"] == 1
    # auto_fallback is off: no flag file.
    assert not (tmp_path / "state" / "fallback-recommended").exists()

    healthy = boot(profile, tmp_path / "boot-pt-again", lab_env, PT_CMDLINE)
    report = run_monitor(monitor_config(healthy, tmp_path, consecutive_runs=3))
    assert [p["usable"] for p in report["pairs"]] == [True, True]
    assert [p["below_threshold_runs"] for p in report["pairs"]] == [0, 0]
    assert report["fallback_recommended"] == {name: False}
    values = samples(metrics_text(config))
    assert values[fallback_sample] == 0
    assert values[("lingbot_fleet_plan_drift", ())] == 0
    assert values[("lingbot_fleet_path_below_threshold_runs", pair_labels(1, 0))] == 0


def test_auto_fallback_writes_only_the_flag_and_removes_it_when_healthy(
    tmp_path: Path, lab_env: Any, iommu_plan: dict[str, Any]
) -> None:
    profile = load_profile("a6000-iommu-acs")
    translated = boot(profile, tmp_path / "boot-translated", lab_env, TRANSLATED_CMDLINE)
    config = monitor_config(translated, tmp_path, consecutive_runs=2, auto_fallback=True)
    flag = tmp_path / "state" / "fallback-recommended"
    plan_before = (tmp_path / "plan.json").read_text()

    run_monitor(config)
    assert not flag.exists()
    report = run_monitor(config)
    assert report["fallback_flag"] == str(flag)
    document = json.loads(flag.read_text())
    name = iommu_plan["instances"][0]["name"]
    assert document["instances"] == [name]
    assert len(document["reasons"][name]) == 2
    assert sorted(path.name for path in (tmp_path / "state").iterdir()) == [
        "fallback-recommended",
        "last-run.json",
        "state.json",
    ]
    assert (tmp_path / "plan.json").read_text() == plan_before

    healthy = boot(profile, tmp_path / "boot-pt-again", lab_env, PT_CMDLINE)
    report = run_monitor(monitor_config(healthy, tmp_path, consecutive_runs=2, auto_fallback=True))
    assert report["fallback_flag"] is None
    assert not flag.exists()


def test_chipset_pair_below_a_threshold_it_once_met(tmp_path: Path, lab_env: Any) -> None:
    """The plan in force says 25 GB/s; the chipset path measures about 14 GB/s."""
    booted = boot(load_profile("a6000-chipset"), tmp_path / "boot", lab_env)
    plan = build_plan(booted.facts(), booted.probe(), {"p2p_min_gbytes_per_s": 10})
    for instance in plan["instances"]:
        instance["peer_access_threshold_gbytes_per_s"] = 25.0
    write_plan(tmp_path, plan)
    config = monitor_config(booted, tmp_path, consecutive_runs=1)

    report = run_monitor(config)

    pair = report["pairs"][0]
    assert pair["data_check"] == "passed"
    assert pair["usable"] is False
    assert pair["reason"].startswith("pair 0->1 of instance main: ")
    assert " GB/s is below the threshold 25 GB/s (planned " in pair["reason"]
    assert report["fallback_recommended"] == {"main": True}
    codes = {finding["code"] for finding in report["findings"]}
    # The link checks run too: GPU 1 at x8 behind the chipset.
    assert {"PCIE_WIDTH_BELOW_EXPECTED", "PCIE_GPU_BEHIND_CHIPSET"} <= codes
    values = samples(metrics_text(config))
    assert values[("lingbot_fleet_p2p_usable", pair_labels(0, 1))] == 0
    assert values[("lingbot_fleet_gpu_link_width", (("bus_id", "0000:04:00.0"), ("gpu", "1")))] == 8


def test_lost_gpu_is_drift(tmp_path: Path, lab_env: Any) -> None:
    profile = load_profile("a6000-phb")
    healthy = boot(profile, tmp_path / "boot", lab_env)
    write_plan(tmp_path, build_plan(healthy.facts(), healthy.probe()))
    broken = copy.deepcopy(profile)
    broken["faults"] = [{"kind": "gpu_lost", "gpu": 1}]
    lost = boot(broken, tmp_path / "boot-lost", lab_env)

    report = run_monitor(monitor_config(lost, tmp_path))

    assert [p["usable"] for p in report["pairs"]] == [False, False]
    assert report["pairs"][0]["reason"] == (
        "pair 0->1 of instance main: GPU 1 (GPU-11540733-53c6-4b27-9b89-a46dfe945aec) no longer "
        "answers the driver"
    )
    # Two used pairs and one planned GPU.
    assert report["plan_drift"] == 3
    # The driver lost it (GPU_LOST) and the kernel log says so (Xid 79).
    critical = [f for f in report["findings"] if f["severity"] == "critical"]
    assert sorted((f["code"], f["subject"]) for f in critical) == [
        ("GPU_LOST", lost.node.state["gpus"][1]["bdf"]),
        ("GPU_XID_79", lost.node.state["gpus"][1]["bdf"]),
    ]
    assert report["findings_by_severity"]["critical"] == 2


def test_without_a_plan_only_the_gpus_are_reported(tmp_path: Path, lab_env: Any) -> None:
    booted = boot(load_profile("a6000-phb"), tmp_path / "boot", lab_env)
    config = monitor_config(booted, tmp_path)

    report = run_monitor(config)

    assert report["pairs"] == []
    assert report["plan"] == {"path": str(tmp_path / "plan.json"), "present": False, "error": None}
    assert [f["code"] for f in report["findings"]] == ["MONITOR_NO_PLAN"]
    values = samples(metrics_text(config))
    assert not any(name.startswith("lingbot_fleet_p2p_") for name, _labels in values)
    assert values[("lingbot_fleet_findings", (("severity", "info"),))] == 1
    assert values[("lingbot_fleet_plan_drift", ())] == 0
    assert ("lingbot_fleet_gpu_link_generation", (("bus_id", "0000:42:00.0"), ("gpu", "1"))) in (
        values
    )


def test_unreadable_plan_is_an_error_finding(tmp_path: Path, lab_env: Any) -> None:
    booted = boot(load_profile("a6000-phb"), tmp_path / "boot", lab_env)
    (tmp_path / "plan.json").write_text("{not json")

    report = run_monitor(monitor_config(booted, tmp_path))

    finding = next(f for f in report["findings"] if f["code"] == "MONITOR_PLAN_UNREADABLE")
    assert finding["message"] == (
        f"the plan in force cannot be read: {tmp_path / 'plan.json'}: not JSON (line 1 "
        "column 2: Expecting property name enclosed in double quotes)"
    )


# ---- the command line --------------------------------------------------------------------


def build_like_the_role(destination: Path) -> Path:
    """The zipapp the role installs, built from the installed package."""
    destination.write_bytes(nodeapp.build(interpreter=sys.executable))
    return destination


def test_cli_runs_from_the_zipapp_without_site_packages(tmp_path: Path, lab_env: Any) -> None:
    """python -S, no PYTHONPATH: the venv and the source tree are out of reach."""
    booted = boot(load_profile("a6000-phb"), tmp_path / "boot", lab_env)
    write_plan(tmp_path, build_plan(booted.facts(), booted.probe()))
    config = monitor_config(booted, tmp_path)
    raw = {key: getattr(config, key) for key in MonitorConfig.__dataclass_fields__}
    raw = {key: list(value) if isinstance(value, tuple) else value for key, value in raw.items()}
    config_path = tmp_path / "monitor.json"
    config_path.write_text(json.dumps(raw, default=dict))
    app = build_like_the_role(tmp_path / "lingbot-fleet-monitor")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LINGBOT_LAB_ROOT": str(booted.node.lab_root),
        "LINGBOT_LAB_LIB": str(LAB_LIB),
        "JOURNAL_STREAM": "8:1234",
    }

    command = [sys.executable, "-S", str(app)]
    result = subprocess.run(
        [*command, "--config", str(config_path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )

    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("<6>lingbot-fleet-monitor: 2 of 2 used path(s) usable, ")
    values = samples(metrics_text(config))
    assert values[("lingbot_fleet_p2p_usable", pair_labels(0, 1))] == 1
    checked = subprocess.run(
        [*command, "--check-config", "--config", str(config_path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (checked.returncode, checked.stdout) == (0, f"configuration {config_path}: OK\n")


def test_cli_refuses_a_bad_configuration(tmp_path: Path, capsys: Any) -> None:
    config_path = tmp_path / "monitor.json"
    config_path.write_text(json.dumps({"consecutive_run": 3}))
    assert cli.main(["--config", str(config_path)]) == cli.EXIT_CONFIG
    error = capsys.readouterr().err
    assert error.startswith(
        f"lingbot-fleet-monitor: configuration {config_path}: unknown configuration key(s) "
        "consecutive_run; known keys: auto_fallback, "
    )
    assert cli.main(["--config", str(tmp_path / "missing.json")]) == cli.EXIT_CONFIG
    assert "cannot read: No such file or directory; run the topo_monitor role" in (
        capsys.readouterr().err
    )


def test_cli_reports_an_unwritable_textfile_directory(
    tmp_path: Path, lab_env: Any, capsys: Any
) -> None:
    booted = boot(load_profile("a6000-phb"), tmp_path / "boot", lab_env)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    config = monitor_config(booted, tmp_path, textfile_dir=str(blocker / "sub"))
    config_path = tmp_path / "monitor.json"
    raw = {"textfile_dir": config.textfile_dir, "state_dir": config.state_dir}
    raw |= {"root": config.root, "use_nvml": False, "nvidia_smi": list(config.nvidia_smi)}
    raw |= {"cuda_library": config.cuda_library, "plan_path": config.plan_path}
    config_path.write_text(json.dumps(raw))
    assert cli.main(["--config", str(config_path)]) == cli.EXIT_WRITE
    assert "check that the state and textfile directories exist and are writable" in (
        capsys.readouterr().err
    )


# ---- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"size_mib": 0}, "size_mib must be at least 1, not 0"),
        ({"consecutive_runs": 0}, "consecutive_runs must be at least 1, not 0"),
        ({"time_budget_s": 0}, "time_budget_s must be greater than 0, not 0.0"),
        (
            {"auto_fallback": "yes"},
            "auto_fallback: 'yes' is a str, expected bool (fix it in the topo_monitor role "
            "variables)",
        ),
        (
            {"size_mib": True},
            "size_mib: True is a bool, expected int (fix it in the topo_monitor role variables)",
        ),
        (
            {"textfile_name": "monitor.txt"},
            "textfile_name 'monitor.txt' must be a file name ending in .prom (node_exporter's "
            "textfile collector reads only *.prom)",
        ),
    ],
)
def test_configuration_problems_name_the_key(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(MonitorConfigError) as raised:
        MonitorConfig.from_mapping(changes)
    assert str(raised.value) == message


def test_configuration_defaults() -> None:
    config = MonitorConfig.from_mapping({"nvidia_smi": "nvidia-smi", "time_budget_s": 20})
    assert config.nvidia_smi == ("nvidia-smi",)
    assert config.time_budget_s == 20.0
    assert (config.size_mib, config.repetitions, config.consecutive_runs) == (16, 3, 3)
    assert config.auto_fallback is False
    assert config.textfile_dir == "/var/lib/prometheus/node-exporter"
    assert config.state_dir == "/var/lib/lingbot-fleet/monitor"
    assert probe_parameters(config, ((0, 1),)).size_bytes == 16 << 20


# ---- judging without a node --------------------------------------------------------------


def used_pair(threshold: float = 25.0) -> UsedPair:
    return UsedPair("main", 0, 1, threshold, 28.4, "GPU-a", "GPU-b")


def probe_with(entry: dict[str, Any]) -> dict[str, Any]:
    return {"pairs": [{"src": 0, "dst": 1, "error": None, **entry}], "errors": []}


@pytest.mark.parametrize(
    ("entry", "usable", "reason"),
    [
        (
            {
                "can_access_peer": True,
                "data_check": "passed",
                "p2p_enabled": {"unidirectional_gbytes_per_s": 25.0, "latency_ns": 1300},
            },
            True,
            "pair 0->1 of instance main: 25 GB/s, at or above the threshold 25 GB/s, data "
            "check passed",
        ),
        (
            {
                "can_access_peer": True,
                "data_check": "passed",
                "p2p_enabled": {"unidirectional_gbytes_per_s": 24.9, "latency_ns": 1300},
            },
            False,
            "pair 0->1 of instance main: 24.9 GB/s is below the threshold 25 GB/s (planned "
            "28.4 GB/s)",
        ),
        (
            {"can_access_peer": False, "data_check": "skipped", "p2p_enabled": None},
            False,
            "pair 0->1 of instance main: the driver no longer allows peer access",
        ),
        (
            {
                "can_access_peer": True,
                "data_check": "failed",
                "p2p_enabled": {"unidirectional_gbytes_per_s": 30.0, "latency_ns": 1300},
            },
            False,
            "pair 0->1 of instance main: the peer-to-peer data check failed: writes do not "
            "land; P2P must not be used",
        ),
    ],
)
def test_judge_pair(entry: dict[str, Any], usable: bool, reason: str) -> None:
    verdict = judge_pair(used_pair(), probe_with(entry), {"GPU-a": 0, "GPU-b": 1})
    assert (verdict.usable, verdict.reason) == (usable, reason)


def test_judge_pair_follows_the_uuid_when_indices_move() -> None:
    probe = {
        "pairs": [
            {
                "src": 3,
                "dst": 2,
                "error": None,
                "can_access_peer": True,
                "data_check": "passed",
                "p2p_enabled": {"unidirectional_gbytes_per_s": 26.0, "latency_ns": 1},
            },
        ],
        "errors": [],
    }
    verdict = judge_pair(used_pair(), probe, {"GPU-a": 3, "GPU-b": 2})
    assert (verdict.usable, verdict.measured_gbytes_per_s) == (True, 26.0)
    # Labels stay the plan's indices.
    assert (verdict.src, verdict.dst) == (0, 1)


def test_not_measured_pair_names_the_probe_errors() -> None:
    probe = {"pairs": [], "errors": ["time budget of 1 s exceeded"]}
    verdict = judge_pair(used_pair(), probe, {"GPU-a": 0, "GPU-b": 1})
    assert verdict.reason == (
        "pair 0->1 of instance main: not measured (time budget of 1 s exceeded)"
    )


# ---- metrics text and files ---------------------------------------------------------------


def test_label_values_are_escaped_and_parse_back() -> None:
    awkward = 'a "quoted"\\ name\nnext line'
    assert escape_label_value(awkward) == 'a \\"quoted\\"\\\\ name\\nnext line'
    text = render_metrics({"fallback_recommended": [({"instance": awkward}, 1)]})
    assert samples(text)[("lingbot_fleet_fallback_recommended", (("instance", awkward),))] == 1


def test_every_family_has_help_and_type_lines() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    text = render_metrics(
        {"plan_drift": [({}, 2)], "p2p_latency_seconds": [({"src": "0", "dst": "1"}, 1.5e-6)]}
    )
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert set(families) == {f"lingbot_fleet_{name}" for name in metrics.METRICS}
    assert all(family.type == "gauge" and family.documentation for family in families.values())
    assert "lingbot_fleet_plan_drift 2\n" in text
    assert 'lingbot_fleet_p2p_latency_seconds{src="0",dst="1"} 1.5e-06\n' in text


def test_textfile_is_renamed_from_a_hidden_temp_file_of_the_same_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """node_exporter reads *.prom: it must never see a half-written one."""
    directory = tmp_path / "textfile"
    renames: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(source: str, destination: Any) -> None:
        renames.append((source, str(destination)))
        assert Path(source).read_text() == "new\n"
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", spy)
    path = write_textfile(str(directory), "lingbot_fleet_monitor.prom", "new\n")

    ((source, destination),) = renames
    assert Path(source).parent == directory
    assert Path(source).name.startswith(".lingbot_fleet_monitor.prom.")
    assert Path(source).name.endswith(".tmp")
    assert destination == path == str(directory / "lingbot_fleet_monitor.prom")
    assert Path(path).read_text() == "new\n"
    assert oct(Path(path).stat().st_mode & 0o777) == "0o644"


def test_failed_textfile_write_keeps_the_old_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "lingbot_fleet_monitor.prom"
    target.write_text("old\n")

    def refuse(source: str, destination: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError):
        write_textfile(str(tmp_path), target.name, "new\n")
    assert target.read_text() == "old\n"
    assert [path.name for path in tmp_path.iterdir()] == ["lingbot_fleet_monitor.prom"]


def test_journal_prefix_only_under_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    stream = io.StringIO()
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    log("warning", "plain", stream)
    monkeypatch.setenv("JOURNAL_STREAM", "8:1234")
    log("error", "for the journal", stream)
    assert stream.getvalue() == (
        "lingbot-fleet-monitor: plain\n<3>lingbot-fleet-monitor: for the journal\n"
    )


def test_journal_lines_put_the_fallback_at_error_priority() -> None:
    verdict = PairVerdict("main", 0, 1, 25.0, 28.4, 6.1, 3100, "failed", False, "why", 3)
    report = {
        "findings": [
            {
                "code": "MONITOR_FALLBACK_RECOMMENDED",
                "severity": "error",
                "message": "m",
                "fix": "f",
            },
            {"code": "MONITOR_NO_PLAN", "severity": "info", "message": "i", "fix": "f"},
        ],
        "findings_by_severity": {"info": 1, "warning": 0, "error": 1, "critical": 0},
        "pairs": [{"usable": verdict.usable}],
        "plan_drift": 1,
        "fallback_recommended": {"main": True},
        "metrics_path": "/m.prom",
        "duration_s": 1.25,
    }
    assert journal_lines(report) == [
        ("error", "MONITOR_FALLBACK_RECOMMENDED: m; fix: f"),
        (
            "info",
            "0 of 1 used path(s) usable, plan drift 1, fallback recommended for main; "
            "findings: 1 info, 0 warning, 1 error, 0 critical; metrics in /m.prom (1.25 s)",
        ),
    ]
