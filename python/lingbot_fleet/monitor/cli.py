"""The monitor's command line: ``lingbot-fleet-monitor [--config PATH] [--json] [--check-config]``.

Exit status 0 run done (or configuration usable), 1 configuration unusable, 2 a result file
could not be written. Lines go to stderr; under systemd with the "<N>" priority prefix the
journal reads: one per finding of warning or worse, then a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..node.findings import SEVERITIES
from .config import DEFAULT_CONFIG_PATH, MonitorConfigError, load_config
from .run import run_monitor

EXIT_OK = 0
EXIT_CONFIG = 1
EXIT_WRITE = 2

JOURNAL_PRIORITIES = {"error": 3, "warning": 4, "info": 6}


def log(level: str, message: str, stream: Any = None) -> None:
    """One line on stderr; under systemd with an "<N>" priority prefix the journal reads."""
    stream = stream or sys.stderr
    prefix = f"<{JOURNAL_PRIORITIES[level]}>" if os.environ.get("JOURNAL_STREAM") else ""
    stream.write(f"{prefix}lingbot-fleet-monitor: {message}\n")
    stream.flush()


def journal_lines(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(level, line) for the journal: every finding of warning or worse, then a summary."""
    lines: list[tuple[str, str]] = []
    for finding in report["findings"]:
        if finding["severity"] == "info":
            continue
        level = "warning" if finding["severity"] == "warning" else "error"
        lines.append((level, f"{finding['code']}: {finding['message']}; fix: {finding['fix']}"))
    counts = ", ".join(
        f"{report['findings_by_severity'][severity]} {severity}" for severity in SEVERITIES
    )
    usable = sum(1 for pair in report["pairs"] if pair["usable"])
    fallbacks = sorted(name for name, on in report["fallback_recommended"].items() if on)
    lines.append(
        (
            "info",
            f"{usable} of {len(report['pairs'])} used path(s) usable, plan drift "
            f"{report['plan_drift']}, fallback recommended for "
            f"{', '.join(fallbacks) or 'no instance'}; findings: {counts}; metrics in "
            f"{report['metrics_path']} ({report['duration_s']:g} s)",
        )
    )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lingbot-fleet-monitor",
        description="Probe the GPU paths LingBot uses, compare them with the plan in force "
        "and write Prometheus metrics for node_exporter's textfile collector.",
    )
    parser.add_argument("--config", default=DEFAULT_CONFIG_PATH, help="JSON configuration")
    parser.add_argument("--json", action="store_true", help="print the run's report as JSON")
    parser.add_argument(
        "--check-config",
        action="store_true",
        help="only check the configuration (exit status 0 when it can be used)",
    )
    arguments = parser.parse_args(argv)
    try:
        config = load_config(arguments.config)
    except MonitorConfigError as error:
        log("error", str(error))
        return EXIT_CONFIG
    if arguments.check_config:
        print(f"configuration {arguments.config}: OK")
        return EXIT_OK
    try:
        report = run_monitor(config)
    except OSError as error:
        log(
            "error",
            f"could not write {error.filename or 'a result file'}: {error.strerror or error}; "
            "check that the state and textfile directories exist and are writable",
        )
        return EXIT_WRITE
    for level, line in journal_lines(report):
        log(level, line)
    if arguments.json:
        json.dump(report, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    return EXIT_OK
