"""The options of the topo_monitor_install module.

One owner for both sides: the module validates its options with INSTALL_ARGUMENT_SPEC and
keeps its receipt (``lingbot_fleet.node.receipts.keep``); the action plugin of the same name
validates the task's options with the same spec and answers from a standing receipt
(``lingbot_fleet.controller.receipt_action.answer``), so a converged node costs no module call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .units import SERVICE_NAME, TIMER_NAME

RECEIPT_ROLE = "topo_monitor"

INSTALL_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "app_path": {"type": "path", "default": "/usr/local/sbin/lingbot-fleet-monitor"},
    "app_checksum": {"type": "str", "required": True},
    "app_src": {"type": "path"},
    "python": {"type": "path", "required": True},
    "config_path": {"type": "path", "default": "/etc/lingbot-fleet/monitor.json"},
    "config": {"type": "dict", "required": True},
    "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
    "timeout_s": {"type": "int", "default": 120},
    "nice": {"type": "int", "default": 10},
    "extra_writable_paths": {"type": "list", "elements": "path", "default": []},
    "interval": {"type": "str", "default": "5min"},
    "boot_delay": {"type": "str", "default": "2min"},
    "randomized_delay": {"type": "str", "default": "30s"},
    "header": {"type": "str", "default": ""},
    "verify": {"type": "bool", "default": True},
    "obsolete_paths": {"type": "list", "elements": "path", "default": []},
}


def unit_paths(params: Mapping[str, Any]) -> dict[str, str]:
    unit_dir = str(params["unit_dir"]).rstrip("/")
    return {name: f"{unit_dir}/{name}" for name in sorted((SERVICE_NAME, TIMER_NAME))}


def managed_files(params: Mapping[str, Any]) -> list[str]:
    """The files the module reports as managed: program, configuration, both units."""
    return [params["app_path"], params["config_path"], *unit_paths(params).values()]
