"""`lingbot-fleet audit`: run the fleet audit and write the reports."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..node.findings import SEVERITIES
from .fleet import EXIT_AUDIT_FAILED, build_fleet, exit_status
from .progress import Progress
from .reports import write_reports
from .runner import AuditError, AuditRun, run_audit


def audit_command(args: argparse.Namespace) -> int:
    run = AuditRun(
        inventory=args.inventory,
        limit=args.limit,
        forks=args.forks,
        threshold=args.fail_on,
        fresh_probe=args.probe,
        strategy=args.strategy,
    )
    try:
        progress = Progress()
        try:
            outcome, elapsed = run_audit(run, progress.host_done, on_hosts=progress.start)
        finally:
            progress.finish()
        fleet = build_fleet(
            outcome,
            inventory=run.inventory,
            limit=run.limit,
            threshold=run.threshold,
            fresh_probe=run.fresh_probe,
            duration_s=elapsed,
        )
        written = write_reports(fleet, Path(args.report_dir))
    except AuditError as error:
        print(f"lingbot-fleet audit: {error}", file=sys.stderr)
        return EXIT_AUDIT_FAILED
    except OSError as error:
        print(
            f"lingbot-fleet audit: cannot write the reports in {args.report_dir}: "
            f"{error.strerror}; choose another --report-dir",
            file=sys.stderr,
        )
        return EXIT_AUDIT_FAILED
    summary = fleet["summary"]
    print(
        f"audit: {summary['nodes']} node(s) in {elapsed:.1f} s: {summary['ok']} ok, "
        f"{summary['findings']} with findings at or above {run.threshold}, "
        f"{summary['unreachable']} unreachable, {summary['failed']} failed; "
        f"reports: {', '.join(str(path) for path in written)}"
    )
    return exit_status(fleet)


def add_audit_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "audit",
        help="audit the fleet read-only and write fleet.json, fleet.md, fleet.html, junit.xml",
        description=(
            "Exit status: 0 all nodes compliant, 1 findings at or above --fail-on, "
            "2 unreachable or failed nodes, 3 the audit itself failed."
        ),
    )
    parser.add_argument("-i", "--inventory", required=True, help="inventory file")
    parser.add_argument("-l", "--limit", help="Ansible host pattern limiting the audit")
    parser.add_argument(
        "--report-dir", default="audit-report", help="where the reports go (default audit-report)"
    )
    parser.add_argument(
        "--fail-on",
        choices=SEVERITIES,
        default="error",
        help="a finding of this severity or worse makes the node non-compliant (default error)",
    )
    parser.add_argument(
        "--forks", type=int, default=50, help="parallel hosts (Ansible forks, default 50)"
    )
    parser.add_argument(
        "--strategy",
        default="linear",
        help="Ansible strategy plugin (default linear; the audit is one task per node)",
    )
    parser.add_argument(
        "--probe", action="store_true", help="run a short fresh probe on every node first"
    )
    parser.set_defaults(func=audit_command)
    return parser
