"""grubby: the subset RHEL-family nodes use, editing BLS entries.

Supported: --info=ALL|DEFAULT|<kernel>, --default-kernel, --default-index,
--set-default=<kernel>, --update-kernel=ALL|DEFAULT|<kernel> with --args and/or
--remove-args. --args replaces the value of an argument already present.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from lingbot_lab.grubcfg import (
    GRUBENV_PATHS,
    BlsEntry,
    default_bls_index,
    read_bls_entries,
    read_grubenv,
    root_path,
    write_bls_entry,
    write_grubenv,
)
from lingbot_lab.hwstate import tokenize_cmdline


class GrubbyError(RuntimeError):
    pass


def argument_key(argument: str) -> str:
    return argument.partition("=")[0]


def add_args(options: list[str], additions: list[str]) -> list[str]:
    """Each added argument replaces the first one with its key, or is appended."""
    result = list(options)
    for argument in additions:
        positions = [
            i for i, old in enumerate(result) if argument_key(old) == argument_key(argument)
        ]
        if positions:
            result[positions[0]] = argument
            result = [old for i, old in enumerate(result) if i not in positions[1:]]
        else:
            result.append(argument)
    return result


def remove_args(options: list[str], removals: list[str]) -> list[str]:
    """key removes every key or key=value; key=value removes only that exact argument."""
    result = list(options)
    for argument in removals:
        if "=" in argument:
            result = [old for old in result if old != argument]
        else:
            result = [old for old in result if argument_key(old) != argument]
    return result


def select_entries(root: str, entries: list[BlsEntry], selector: str) -> list[int]:
    if selector == "ALL":
        return list(range(len(entries)))
    if selector == "DEFAULT":
        return [default_bls_index(root, entries)] if entries else []
    if selector.isdigit() and int(selector) < len(entries):
        return [int(selector)]
    matches = [i for i, entry in enumerate(entries) if entry.kernel == selector]
    if not matches:
        raise GrubbyError(f"The param {selector} is incorrect")
    return matches


def info_lines(root: str, index: int, entry: BlsEntry) -> list[str]:
    options = tokenize_cmdline(entry.options)
    root_args = [option for option in options if argument_key(option) == "root"]
    other_args = [option for option in options if argument_key(option) != "root"]
    lines = [f"index={index}", f'kernel="{entry.kernel}"', f'args="{" ".join(other_args)}"']
    if root_args:
        lines.append(f'root="{root_args[-1].partition("=")[2]}"')
    initrd = entry.fields.get("initrd", "").split(" ")[0]
    if initrd:
        lines.append(f'initrd="{initrd if initrd.startswith("/boot/") else "/boot" + initrd}"')
    lines += [f'title="{entry.fields.get("title", "")}"', f'id="{entry.entry_id}"']
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grubby", add_help=True)
    parser.add_argument("--info")
    parser.add_argument("--default-kernel", action="store_true")
    parser.add_argument("--default-index", action="store_true")
    parser.add_argument("--set-default")
    parser.add_argument("--update-kernel")
    parser.add_argument("--args", default="")
    parser.add_argument("--remove-args", default="")
    return parser


def run(root: str, options: argparse.Namespace) -> list[str]:
    entries = read_bls_entries(root)
    if not entries:
        raise GrubbyError(f"no boot entries in {root_path(root, 'boot/loader/entries')}")
    output: list[str] = []
    if options.default_kernel:
        output.append(entries[default_bls_index(root, entries)].kernel)
    if options.default_index:
        output.append(str(default_bls_index(root, entries)))
    if options.info:
        for index in select_entries(root, entries, options.info):
            output += info_lines(root, index, entries[index])
    if options.set_default:
        index = select_entries(root, entries, options.set_default)[0]
        env = read_grubenv(root)
        env["saved_entry"] = entries[index].entry_id
        existing = [p for p in GRUBENV_PATHS if root_path(root, p).is_file()]
        write_grubenv(root, existing[0] if existing else GRUBENV_PATHS[0], env)
        output.append(
            f"The default is {root_path(root, 'boot/loader/entries')}/"
            f"{entries[index].entry_id}.conf with index {index} and kernel"
            f" {entries[index].kernel}"
        )
    if options.update_kernel:
        for index in select_entries(root, entries, options.update_kernel):
            entry = entries[index]
            arguments = tokenize_cmdline(entry.options)
            arguments = remove_args(arguments, tokenize_cmdline(options.remove_args))
            arguments = add_args(arguments, tokenize_cmdline(options.args))
            fields = dict(entry.fields)
            fields["options"] = " ".join(arguments)
            write_bls_entry(root, replace(entry, fields=fields))
    elif options.args or options.remove_args:
        raise GrubbyError("--args and --remove-args need --update-kernel")
    return output


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        output = run(os.environ.get("LINGBOT_LAB_ROOT", ""), options)
    except GrubbyError as error:
        print(f"grubby: {error}", file=sys.stderr)
        return 1
    for line in output:
        print(line)
    return 0
