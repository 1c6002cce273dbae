"""`lingbot-fleet generations list|show`: a node's generations from the audit data.

The input is the JSON the lingbot_generation module returns with ``action: list`` (its
whole result, or just the ``generations`` list), or a mapping of host name to such a
result when several nodes were collected.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


class GenerationsDataError(ValueError):
    """Input that is not a dump of the lingbot_generation module's list action."""


def _rows_of(result: Any, where: str) -> list[dict[str, Any]]:
    rows = result.get("generations") if isinstance(result, Mapping) else result
    if not isinstance(rows, list) or not all(isinstance(row, Mapping) for row in rows):
        raise GenerationsDataError(
            f"{where}: expected the lingbot_generation list result ({{'generations': [...]}}) "
            "or its list of generations"
        )
    return [dict(row) for row in rows]


def generations_by_host(data: Any) -> dict[str, list[dict[str, Any]]]:
    """Host name ('' for a single node's dump) -> its generations, oldest first."""
    if isinstance(data, list) or (isinstance(data, Mapping) and "generations" in data):
        return {"": _rows_of(data, "input")}
    if not isinstance(data, Mapping) or not data:
        raise GenerationsDataError(
            "input: expected a lingbot_generation list result, or host names mapped to them"
        )
    return {str(host): _rows_of(result, f"host {host}") for host, result in data.items()}


def format_list(host: str, rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"{host}:"] if host else []
    if not rows:
        return [*lines, "  no generations (the toolkit has changed nothing on this node)"]
    lines.append(f"{'gen':>5}  {'committed':20}  {'what ran':28}  files  kinds")
    for row in rows:
        if not row.get("ok", True):
            lines.append(f"{row.get('generation', '?'):>5}  DAMAGED: {row.get('error', '')}")
            continue
        ran = row.get("ran") or {}
        what = str(ran.get("play") or ran.get("playbook") or ran.get("run_id") or "-")
        if ran.get("rollback"):
            what = f"rollback to {ran.get('rollback_to', '?')}"
        if row.get("complete") is False:
            what += " (incomplete)"
        lines.append(
            f"{row['generation']:>5}  {row.get('committed') or '-':20}  {what[:28]:28}  "
            f"{len(row.get('files', [])):>5}  {','.join(row.get('kinds', []))}"
        )
    return lines


def format_show(row: Mapping[str, Any]) -> list[str]:
    if not row.get("ok", True):
        return [f"generation {row.get('generation')}: DAMAGED: {row.get('error', '')}"]
    lines = [
        f"generation {row['generation']} (run {row.get('run_id', '-')}), committed "
        f"{row.get('committed', '-')}{'' if row.get('complete', True) else ', incomplete'}",
        f"  ran: {json.dumps(row.get('ran', {}), sort_keys=True)}",
        f"  running kernel: {row.get('kernel_cmdline', '') or '-'}",
        "  files:",
    ]
    lines += [f"    {path}" for path in row.get("files", [])]
    return lines


def _load(path: str) -> Any:
    if path == "-":
        return json.load(sys.stdin)
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _cmd_generations(args: argparse.Namespace) -> int:
    try:
        by_host = generations_by_host(_load(args.file))
    except OSError as error:
        print(
            f"lingbot-fleet generations: cannot read {args.file}: {error.strerror}", file=sys.stderr
        )
        return EXIT_USAGE
    except (ValueError, GenerationsDataError) as error:
        print(f"lingbot-fleet generations: {args.file}: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.host is not None:
        if args.host not in by_host:
            known = ", ".join(sorted(by_host)) or "none"
            print(
                f"lingbot-fleet generations: no host {args.host!r} in {args.file} (hosts: {known})",
                file=sys.stderr,
            )
            return EXIT_USAGE
        by_host = {args.host: by_host[args.host]}
    if args.generations_command == "list":
        for host, rows in by_host.items():
            print("\n".join(format_list(host, rows)))
        return EXIT_OK
    status = EXIT_OK
    for host, rows in by_host.items():
        match = [row for row in rows if row.get("generation") == args.generation]
        prefix = f"{host}: " if host else ""
        if not match:
            numbers = ", ".join(str(row.get("generation")) for row in rows) or "none"
            print(
                f"{prefix}no generation {args.generation} (this node has: {numbers})",
                file=sys.stderr,
            )
            status = EXIT_ERROR
            continue
        print("\n".join(f"{prefix}{line}" for line in format_show(match[0])))
    return status


def add_generations_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `generations list|show` to the `lingbot-fleet` sub-commands."""
    parser = subparsers.add_parser(
        "generations", help="a node's generations (from lingbot_generation action: list)"
    )
    commands = parser.add_subparsers(dest="generations_command", required=True)
    listing = commands.add_parser("list", help="every generation, oldest first")
    show = commands.add_parser("show", help="one generation: what ran, kernel, files")
    show.add_argument("generation", type=int, help="the generation number")
    for sub in (listing, show):
        sub.add_argument("file", help="JSON dump of the module's list result ('-': stdin)")
        sub.add_argument("--host", help="only this host, when the dump holds several")
    parser.set_defaults(func=_cmd_generations)
    return parser
