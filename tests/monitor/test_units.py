"""lingbot_fleet.monitor.units: the service and timer, every value quoted for systemd."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lingbot_fleet.monitor.units import (
    SERVICE_NAME,
    TIMER_NAME,
    MonitorUnits,
    UnitValueError,
    systemd_path,
    systemd_word,
    unit_files,
)

ROLE_UNITS = MonitorUnits(
    python="/usr/bin/python3",
    app_path="/usr/local/sbin/lingbot-fleet-monitor",
    config_path="/etc/lingbot-fleet/monitor.json",
    state_dir="/var/lib/lingbot-fleet/monitor",
    textfile_dir="/var/lib/prometheus/node-exporter",
    extra_writable_paths=("/run/lingbot-lab",),
    header="# Managed by lingbot-fleet (role topo_monitor).",
)


def lines(text: str) -> list[str]:
    return text.splitlines()


def test_the_service_runs_the_zipapp_sandboxed() -> None:
    service = lines(unit_files(ROLE_UNITS)[SERVICE_NAME])
    assert service[0] == "# Managed by lingbot-fleet (role topo_monitor)."
    for line in (
        "[Service]",
        "Type=oneshot",
        "ExecStart=/usr/bin/python3 /usr/local/sbin/lingbot-fleet-monitor --config "
        "/etc/lingbot-fleet/monitor.json",
        "ConditionPathExists=/etc/lingbot-fleet/monitor.json",
        "TimeoutStartSec=120",
        "Nice=10",
        "IOSchedulingClass=idle",
        "ProtectSystem=strict",
        "ReadWritePaths=/var/lib/lingbot-fleet/monitor /var/lib/prometheus/node-exporter "
        "-/run/lingbot-lab",
        "DevicePolicy=closed",
        "DeviceAllow=char-nvidia-frontend rw",
    ):
        assert line in service


def test_the_timer_starts_the_service() -> None:
    timer = lines(unit_files(replace(ROLE_UNITS, interval="10min"))[TIMER_NAME])
    assert timer[0] == "# Managed by lingbot-fleet (role topo_monitor)."
    assert timer[timer.index("[Timer]") :] == [
        "[Timer]",
        "OnBootSec=2min",
        "OnUnitActiveSec=10min",
        "RandomizedDelaySec=30s",
        f"Unit={SERVICE_NAME}",
        "",
        "[Install]",
        "WantedBy=timers.target",
    ]


def test_paths_are_quoted_as_systemd_reads_them() -> None:
    units = replace(
        ROLE_UNITS,
        python="/opt/my python/bin/python3",
        config_path="/etc/lingbot fleet/100%.json",
        textfile_dir="/var/lib/node exporter",
        extra_writable_paths=("/run/lab 1",),
    )
    service = lines(unit_files(units)[SERVICE_NAME])
    assert (
        'ExecStart="/opt/my python/bin/python3" /usr/local/sbin/lingbot-fleet-monitor '
        '--config "/etc/lingbot fleet/100%%.json"'
    ) in service
    assert "ConditionPathExists=/etc/lingbot fleet/100%%.json" in service
    assert "Documentation=file:///etc/lingbot%20fleet/100%25.json" in service
    assert (
        'ReadWritePaths=/var/lib/lingbot-fleet/monitor "/var/lib/node exporter" "-/run/lab 1"'
    ) in service


@pytest.mark.parametrize(
    ("word", "quoted"),
    [
        ("/usr/bin/python3", "/usr/bin/python3"),
        ("a b", '"a b"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("50%", "50%%"),
        ("$HOME", "$$HOME"),
        ("", '""'),
    ],
)
def test_systemd_word(word: str, quoted: str) -> None:
    assert systemd_word(word) == quoted


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"textfile_dir": "/var/lib/a\nExecStartPre=/bin/evil"},
            "textfile_dir '/var/lib/a\\nExecStartPre=/bin/evil': a unit value cannot hold "
            "control characters",
        ),
        ({"state_dir": "var/lib/x"}, "state_dir 'var/lib/x': systemd needs an absolute path"),
        ({"python": "python3"}, "python 'python3': systemd needs an absolute path"),
        ({"nice": 20}, "nice 20 is outside -20..19"),
        ({"timeout_s": 0}, "timeout_s must be at least 1, not 0"),
        (
            {"interval": "every 5 min"},
            "interval 'every 5 min' is not a systemd time span (e.g. 5min, 90s, 1h 30min)",
        ),
        (
            {"header": "Managed by lingbot-fleet"},
            "header line 'Managed by lingbot-fleet' is not a comment (start it with #)",
        ),
    ],
)
def test_values_that_cannot_go_into_a_unit_are_refused(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(UnitValueError) as raised:
        unit_files(replace(ROLE_UNITS, **changes))
    assert str(raised.value) == message


def test_an_optional_path_keeps_its_dash_inside_the_quotes() -> None:
    assert systemd_path("extra", "/run/lab", optional=True) == "-/run/lab"
    assert systemd_path("extra", "/run/a b", optional=True) == '"-/run/a b"'


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_accepts_the_units(tmp_path: Path) -> None:
    units = replace(ROLE_UNITS, python=sys.executable, textfile_dir="/var/lib/node exporter")
    paths = []
    for name, text in unit_files(units).items():
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    done = subprocess.run(
        ["systemd-analyze", "verify", *paths], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert str(tmp_path) not in done.stdout + done.stderr
