"""`lingbot-fleet plan --facts F [--probe P] [--policy Y] [--findings J] [--explain]`.

`lingbot_fleet.cli` adds it with `add_plan_parser(subparsers)`; the parser's default `func` is
`plan_command`. PyYAML is imported only to read a --policy YAML file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..plan.document import build_plan, explain_plan
from ..plan.model import PlanInputError
from ..plan.policy import policy_from_mapping

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
FACT_NAME = "lingbot_gpu"


class PlanFileError(Exception):
    """A file given on the command line cannot be read; str() names the file and the fix."""


def _read_text(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise PlanFileError(f"{what} {path}: cannot read: {error.strerror or error}") from None


def read_json_file(path: str, what: str) -> Any:
    try:
        return json.loads(_read_text(path, what))
    except json.JSONDecodeError as error:
        raise PlanFileError(
            f"{what} {path}: not JSON (line {error.lineno} column {error.colno}: {error.msg})"
        ) from None


def read_facts(path: str) -> Any:
    """The facts document, bare or as the `lingbot_gpu` fact of a saved fact cache."""
    document = read_json_file(path, "--facts")
    if isinstance(document, dict):
        for holder in (document, document.get("ansible_facts") or {}):
            if isinstance(holder, dict) and isinstance(holder.get(FACT_NAME), dict):
                return holder[FACT_NAME]
    return document


def read_policy(path: str) -> dict[str, Any]:
    import yaml  # noqa: PLC0415 - only the command line reads YAML

    text = _read_text(path, "--policy")
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise PlanFileError(f"--policy {path}: not YAML: {error}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise PlanFileError(f"--policy {path}: must be a mapping of policy keys (docs/plan.md)")
    return document


def plan_command(args: argparse.Namespace) -> int:
    """Print the plan as JSON (or, with --explain, as text); exit 0, 1 (input) or 2 (files)."""
    try:
        facts = read_facts(args.facts)
        probe = read_json_file(args.probe, "--probe") if args.probe else None
        policy_values = read_policy(args.policy) if args.policy else {}
        findings = read_json_file(args.findings, "--findings") if args.findings else None
    except PlanFileError as error:
        print(f"lingbot-fleet plan: {error}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(findings, dict):
        findings = findings.get("findings", [])
    try:
        plan = build_plan(facts, probe, policy_from_mapping(policy_values), findings)
    except PlanInputError as error:
        print(f"lingbot-fleet plan: {error}", file=sys.stderr)
        return EXIT_ERROR
    output = explain_plan(plan) if args.explain else json.dumps(plan, indent=2) + "\n"
    if args.output:
        Path(args.output).write_text(output, encoding="utf-8")
    else:
        sys.stdout.write(output)
    return EXIT_OK


def add_plan_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `plan` command to an argparse subparsers object; returns its parser."""
    parser = subparsers.add_parser(
        "plan",
        help="decide which GPUs LingBot uses and how (pure: reads facts, probe, policy)",
        description="Turn a node's GPU facts (and probe results) into a LingBot plan "
        "(docs/plan.md).",
    )
    parser.add_argument("--facts", required=True, help="gpu_facts document (JSON)")
    parser.add_argument(
        "--probe", help="p2p_probe result (JSON); without it the plan is provisional"
    )
    parser.add_argument("--policy", help="policy keys (YAML mapping, docs/plan.md)")
    parser.add_argument("--findings", help="check findings (JSON list of code/severity/subject)")
    parser.add_argument("--output", help="write here instead of standard output")
    parser.add_argument("--explain", action="store_true", help="print a human-readable summary")
    parser.set_defaults(func=plan_command)
    return parser
