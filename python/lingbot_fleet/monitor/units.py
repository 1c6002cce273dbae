"""The monitor's systemd units, lingbot-fleet-monitor.service and .timer, from data.

Every value that lands in a unit is quoted the way systemd reads it back: command words
and paths with spaces in double quotes, ``%`` (specifiers) and, on the command line,
``$`` (variables) doubled. A value with a line break or another control character is
refused: it would start a new setting.

Not part of the program on the nodes: the topo_monitor_install module renders the units
with it.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from ..node.hardening import MONITOR_SANDBOX
from ..node.systemd_text import systemd_word

SERVICE_NAME = "lingbot-fleet-monitor.service"
TIMER_NAME = "lingbot-fleet-monitor.timer"

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A systemd time span: numbers and units, optionally separated by spaces ("1min 30s").
_TIME_SPAN = re.compile(r"[0-9][0-9A-Za-z. ]*")


class UnitValueError(ValueError):
    """A value cannot go into a unit; str() names the setting and the fix."""


def _one_line(name: str, value: str) -> str:
    if _CONTROL.search(value):
        raise UnitValueError(f"{name} {value!r}: a unit value cannot hold control characters")
    return value


def systemd_path(name: str, path: str, *, optional: bool = False) -> str:
    """One entry of a path list (ReadWritePaths=); ``optional`` adds the '-' prefix."""
    _one_line(name, path)
    if not path.startswith("/"):
        raise UnitValueError(f"{name} {path!r}: systemd needs an absolute path")
    entry = ("-" if optional else "") + path.replace("%", "%%")
    if re.search(r"[\s\"'\\]", entry):
        entry = '"' + entry.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return entry


def time_span(name: str, value: str) -> str:
    if not _TIME_SPAN.fullmatch(value):
        raise UnitValueError(
            f"{name} {value!r} is not a systemd time span (e.g. 5min, 90s, 1h 30min)"
        )
    return value


@dataclass(frozen=True)
class MonitorUnits:
    """What the two units say; the paths are the node's."""

    python: str
    app_path: str
    config_path: str
    state_dir: str
    textfile_dir: str
    extra_writable_paths: tuple[str, ...] = ()
    timeout_s: int = 120
    nice: int = 10
    interval: str = "5min"
    boot_delay: str = "2min"
    randomized_delay: str = "30s"
    # Comment lines at the top of both units ("# Ansible managed").
    header: str = ""

    def problems(self) -> list[str]:
        problems = []
        if not -20 <= self.nice <= 19:
            problems.append(f"nice {self.nice} is outside -20..19")
        if self.timeout_s < 1:
            problems.append(f"timeout_s must be at least 1, not {self.timeout_s}")
        for line in self.header.splitlines():
            if line.strip() and not line.lstrip().startswith(("#", ";")):
                problems.append(f"header line {line!r} is not a comment (start it with #)")
        return problems


def exec_start(units: MonitorUnits) -> str:
    """``<python> <app> --config <config>``: the node's Python runs the zipapp."""
    for name in ("python", "app_path", "config_path"):
        value = _one_line(name, getattr(units, name))
        if not value.startswith("/"):
            raise UnitValueError(f"{name} {value!r}: systemd needs an absolute path")
    argv = [units.python, units.app_path, "--config", units.config_path]
    return " ".join(systemd_word(word) for word in argv)


def service_text(units: MonitorUnits) -> str:
    config_path = _one_line("config_path", units.config_path)
    writable = [
        systemd_path("state_dir", units.state_dir),
        systemd_path("textfile_dir", units.textfile_dir),
        *(
            systemd_path("extra_writable_paths", path, optional=True)
            for path in units.extra_writable_paths
        ),
    ]
    lines = [
        *units.header.splitlines(),
        "# One run of the path monitor: a short probe of the GPU pairs LingBot uses, compared",
        "# with the plan in force; metrics go to node_exporter's textfile directory.",
        "# It never changes the LingBot service.",
        "[Unit]",
        "Description=lingbot-fleet path monitor (GPU paths against the plan in force)",
        "Documentation=file://" + urllib.parse.quote(config_path),
        "After=nvidia-persistenced.service",
        "ConditionPathExists=" + config_path.replace("%", "%%"),
        "",
        "[Service]",
        "Type=oneshot",
        "ExecStart=" + exec_start(units),
        f"TimeoutStartSec={units.timeout_s}",
        f"Nice={units.nice}",
        "IOSchedulingClass=idle",
        "Environment=PYTHONDONTWRITEBYTECODE=1",
        "# The probe issues no kernels: nothing to compile or cache.",
        "Environment=CUDA_CACHE_DISABLE=1",
        "LimitMEMLOCK=infinity",
        "# Only the monitor's state and the textfile directory are writable.",
        "ReadWritePaths=" + " ".join(writable),
        *MONITOR_SANDBOX,
    ]
    return "\n".join(lines) + "\n"


def timer_text(units: MonitorUnits) -> str:
    interval = time_span("interval", units.interval)
    lines = [
        *units.header.splitlines(),
        "[Unit]",
        f"Description=Run the lingbot-fleet path monitor every {interval}",
        "",
        "[Timer]",
        f"OnBootSec={time_span('boot_delay', units.boot_delay)}",
        f"OnUnitActiveSec={interval}",
        f"RandomizedDelaySec={time_span('randomized_delay', units.randomized_delay)}",
        f"Unit={SERVICE_NAME}",
        "",
        "[Install]",
        "WantedBy=timers.target",
    ]
    return "\n".join(lines) + "\n"


def unit_files(units: MonitorUnits) -> dict[str, str]:
    """Unit name -> text; UnitValueError names the first value that cannot go in."""
    problems = units.problems()
    if problems:
        raise UnitValueError("; ".join(problems))
    return {SERVICE_NAME: service_text(units), TIMER_NAME: timer_text(units)}
