"""The monitor's configuration, /etc/lingbot-fleet/monitor.json: keys, types, ranges.

Imports nothing else of lingbot_fleet: the topo_monitor_install module checks the
configuration it is about to write with this code, in-process, so what lands on a node
is what ``lingbot-fleet-monitor --check-config`` accepts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..node.findings import severity_overrides
from ..node.state_dirs import MONITOR_DIR

DEFAULT_CONFIG_PATH = "/etc/lingbot-fleet/monitor.json"


class MonitorConfigError(ValueError):
    """The configuration cannot be used; str() names the key and the fix."""


@dataclass(frozen=True)
class MonitorConfig:
    plan_path: str = "/etc/lingbot/plan.json"
    state_dir: str = MONITOR_DIR
    textfile_dir: str = "/var/lib/prometheus/node-exporter"
    textfile_name: str = "lingbot_fleet_monitor.prom"
    size_mib: int = 16
    repetitions: int = 3
    latency_repetitions: int = 20
    time_budget_s: float = 30.0
    consecutive_runs: int = 3
    auto_fallback: bool = False
    root: str = "/"
    use_nvml: bool = True
    nvml_python_path: tuple[str, ...] = ()
    nvidia_smi: tuple[str, ...] = ("nvidia-smi",)
    cuda_library: str = "libcuda.so.1"
    expected_links: Mapping[str, Any] = field(default_factory=dict)
    expected_link_default: Mapping[str, Any] = field(default_factory=dict)
    chipset_bridge_ids: tuple[str, ...] = ()
    numa_node_count: int = 0
    # The fleet's severity per finding code (lingbot_fleet_finding_severity), over the
    # one each check gives.
    finding_severity: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> MonitorConfig:
        """From the JSON configuration; unknown keys and wrong types are refused."""
        if not isinstance(data, Mapping):
            raise MonitorConfigError(
                f"the configuration must be a JSON object, not {type(data).__name__}"
            )
        known = {item.name: item for item in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise MonitorConfigError(
                f"unknown configuration key(s) {', '.join(unknown)}; known keys: "
                f"{', '.join(sorted(known))}"
            )
        values = {name: _convert(name, value) for name, value in data.items()}
        config = cls(**values)
        problems = config.problems()
        if problems:
            raise MonitorConfigError("; ".join(problems))
        return config

    def problems(self) -> list[str]:
        problems = [
            f"{name} must be at least 1, not {value}"
            for name, value in (
                ("size_mib", self.size_mib),
                ("repetitions", self.repetitions),
                ("latency_repetitions", self.latency_repetitions),
                ("consecutive_runs", self.consecutive_runs),
            )
            if value < 1
        ]
        if self.time_budget_s <= 0:
            problems.append(f"time_budget_s must be greater than 0, not {self.time_budget_s}")
        if not self.textfile_name.endswith(".prom") or "/" in self.textfile_name:
            problems.append(
                f"textfile_name {self.textfile_name!r} must be a file name ending in .prom "
                "(node_exporter's textfile collector reads only *.prom)"
            )
        if not self.nvidia_smi:
            problems.append('nvidia_smi must name a command, e.g. ["nvidia-smi"]')
        try:
            severity_overrides(self.finding_severity, "finding_severity")
        except ValueError as error:
            problems.append(f"{error} (fix it in lingbot_fleet_finding_severity)")
        return problems


_TYPES: dict[str, tuple[type, ...]] = {
    "plan_path": (str,),
    "state_dir": (str,),
    "textfile_dir": (str,),
    "textfile_name": (str,),
    "size_mib": (int,),
    "repetitions": (int,),
    "latency_repetitions": (int,),
    "time_budget_s": (int, float),
    "consecutive_runs": (int,),
    "auto_fallback": (bool,),
    "root": (str,),
    "use_nvml": (bool,),
    "nvml_python_path": (list,),
    "nvidia_smi": (str, list),
    "cuda_library": (str,),
    "expected_links": (dict,),
    "expected_link_default": (dict,),
    "chipset_bridge_ids": (list,),
    "numa_node_count": (int,),
    "finding_severity": (dict,),
}


def _convert(name: str, value: Any) -> Any:
    wanted = _TYPES[name]
    matches = isinstance(value, wanted) and not (isinstance(value, bool) and bool not in wanted)
    if not matches:
        names = " or ".join(kind.__name__ for kind in wanted)
        raise MonitorConfigError(
            f"{name}: {value!r} is a {type(value).__name__}, expected {names} "
            "(fix it in the topo_monitor role variables)"
        )
    if name == "time_budget_s":
        return float(value)
    if name == "nvidia_smi":
        return (value,) if isinstance(value, str) else tuple(str(word) for word in value)
    if isinstance(value, list):
        return tuple(str(item) for item in value)
    return value


def config_text(data: Mapping[str, Any]) -> str:
    """The file's text for a configuration mapping: sorted keys, 4-space indent, newline."""
    return json.dumps(data, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def parse_config(text: str, source: str) -> MonitorConfig:
    """The configuration in ``text`` (read from ``source``); MonitorConfigError names it."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise MonitorConfigError(
            f"configuration {source}: not JSON (line {error.lineno} column {error.colno}: "
            f"{error.msg})"
        ) from None
    try:
        return MonitorConfig.from_mapping(data)
    except MonitorConfigError as error:
        raise MonitorConfigError(f"configuration {source}: {error}") from None


def load_config(path: str | Path) -> MonitorConfig:
    """The configuration file at ``path``, checked (what --check-config does)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise MonitorConfigError(
            f"configuration {path}: cannot read: {error.strerror or error}; run the "
            "topo_monitor role to write it, or pass --config"
        ) from None
    return parse_config(text, str(path))
