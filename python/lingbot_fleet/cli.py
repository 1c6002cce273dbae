"""The `lingbot-fleet` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import __version__

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


def _cmd_lab(args: argparse.Namespace) -> int:
    from .lab.manager import Lab, LabError  # noqa: PLC0415 - only the lab needs it
    from .lab.rootfs import RootfsError  # noqa: PLC0415

    lab = Lab()
    try:
        if args.lab_command == "up":
            profiles = [p for p in args.profiles.split(",") if p]
            lab.up(profiles)
        elif args.lab_command == "down":
            lab.down()
        else:
            rows = lab.status()
            if args.json:
                print(json.dumps(rows, indent=2))
            elif not rows:
                print("lab: no nodes")
            else:
                print(f"{'node':32} {'profile':26} {'port':>5}  running  ssh  boots")
                for row in rows:
                    print(
                        f"{row['name']:32} {row['profile']:26} {row['port']:>5}  "
                        f"{'yes' if row['running'] else 'no':7}  "
                        f"{'ok' if row['ssh'] else '-':3}  {row['boots']:>5}"
                    )
    except (LabError, RootfsError) as error:
        print(f"lingbot-fleet lab {args.lab_command}: {error}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _cmd_parse(args: argparse.Namespace) -> int:
    from .parsers import ParseError, parse, read_capture  # noqa: PLC0415

    try:
        text = read_capture(args.file)
    except ParseError as error:
        print(f"lingbot-fleet parse: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = parse(args.kind, text)
    except ParseError as error:
        print(f"lingbot-fleet parse {args.kind}: {args.file}: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(result, indent=2))
    return EXIT_OK


def _cmd_playbooks(args: argparse.Namespace) -> int:
    from .controller.collection import CollectionNotFoundError, find_content  # noqa: PLC0415

    try:
        content = find_content()
    except CollectionNotFoundError as error:
        print(f"lingbot-fleet playbooks: {error}", file=sys.stderr)
        return EXIT_ERROR
    for path in sorted(content.playbooks_dir.glob("*.yml")):
        print(f"{content.source}\t{path}")
    return EXIT_OK


DEFAULT_LAB_PROFILES = "a6000-phb,a6000-chipset,a6000-noacpi,a6000-persistenced-off"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lingbot-fleet",
        description="Provision, tune and audit multi-GPU servers that run LingBot.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    lab = commands.add_parser("lab", help="the simulated GPU lab (systemd-nspawn nodes)")
    lab_commands = lab.add_subparsers(dest="lab_command", required=True)
    up = lab_commands.add_parser("up", help="boot lab nodes, one per profile")
    up.add_argument(
        "--profiles",
        default=DEFAULT_LAB_PROFILES,
        help=f"comma-separated profile names from lab/profiles (default {DEFAULT_LAB_PROFILES})",
    )
    lab_commands.add_parser("down", help="stop every lab node and remove its mounts")
    status = lab_commands.add_parser("status", help="list lab nodes")
    status.add_argument("--json", action="store_true", help="print JSON")
    lab.set_defaults(func=_cmd_lab)

    from .parsers import KINDS  # noqa: PLC0415

    parse = commands.add_parser("parse", help="parse a captured command output into JSON")
    parse.add_argument("kind", choices=KINDS)
    parse.add_argument("file")
    parse.set_defaults(func=_cmd_parse)

    playbooks = commands.add_parser(
        "playbooks",
        help="list the playbooks the commands run and where they come from "
        "(wheel, checkout or installed collection lingbot.fleet)",
    )
    playbooks.set_defaults(func=_cmd_playbooks)

    from .audit.cli import add_audit_parser  # noqa: PLC0415
    from .audit.doctor import add_doctor_parser  # noqa: PLC0415
    from .controller.generations_cli import add_generations_parser  # noqa: PLC0415
    from .controller.plan_cli import add_plan_parser  # noqa: PLC0415

    add_plan_parser(commands)
    add_generations_parser(commands)
    add_audit_parser(commands)
    add_doctor_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
