"""grubby: the subset RHEL-family nodes use, editing BLS entries (as RHEL's grubby-bls).

Supported: --info=ALL|DEFAULT|<kernel>, --default-kernel, --default-index,
--set-default=<kernel>, --update-kernel=ALL|DEFAULT|<kernel> with --args and/or
--remove-args, --no-etc-grub-update.

- --info shows each entry's arguments with $kernelopts expanded from grubenv.
- An edit removes every --remove-args word (``key`` every ``key`` and ``key=...``,
  ``key=value`` that word only), then every argument with the key of an --args word,
  then appends the --args words.
- --update-kernel=ALL also edits grubenv's kernelopts (when grubenv has it) and, unless
  --no-etc-grub-update, rewrites each ``GRUB_CMDLINE_LINUX=`` line of /etc/default/grub
  to the edited value; entries whose options use $kernelopts are left as they are (they
  take the new kernelopts). Another selector writes the entry's options, expanded and
  edited, as literal words. grubenv is written through a link to its target.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from lingbot_lab.grubcfg import (
    DEFAULT_GRUB,
    BlsEntry,
    bls_options,
    default_bls_index,
    existing_grubenv,
    read_bls_entries,
    read_grub_settings,
    read_grubenv,
    root_path,
    shell_double_quoted,
    takes_kernelopts,
    write_atomically,
    write_bls_entry,
    write_grubenv,
)
from lingbot_lab.hwstate import tokenize_cmdline


class GrubbyError(RuntimeError):
    pass


def argument_key(argument: str) -> str:
    return argument.partition("=")[0]


def update_args(options: list[str], removals: list[str], additions: list[str]) -> list[str]:
    """grubby-bls's update_args: the removals, then every argument with an added key,
    then the additions appended."""
    result = list(options)
    for argument in removals:
        if "=" in argument:
            result = [old for old in result if old != argument]
        else:
            result = [old for old in result if argument_key(old) != argument]
    added_keys = {argument_key(argument) for argument in additions}
    result = [old for old in result if argument_key(old) not in added_keys]
    return result + list(additions)


def update_etc_default_grub(root: str, removals: list[str], additions: list[str]) -> None:
    """RHEL 8.3+ grubby --update-kernel=ALL: GRUB_CMDLINE_LINUX follows the edit."""
    path = root_path(root, DEFAULT_GRUB)
    if not path.is_file():
        return
    current = read_grub_settings(root).get("GRUB_CMDLINE_LINUX", "")
    if not current:
        return
    value = " ".join(update_args(tokenize_cmdline(current), removals, additions))
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    edited = [
        f"GRUB_CMDLINE_LINUX={shell_double_quoted(value)}\n"
        if line.startswith("GRUB_CMDLINE_LINUX=")
        else line
        for line in lines
    ]
    write_atomically(path, "".join(edited))


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
    options = tokenize_cmdline(bls_options(root, entry))
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
    parser.add_argument("--no-etc-grub-update", action="store_true")
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
        write_grubenv(root, existing_grubenv(root), env)
        output.append(
            f"The default is {root_path(root, 'boot/loader/entries')}/"
            f"{entries[index].entry_id}.conf with index {index} and kernel"
            f" {entries[index].kernel}"
        )
    if options.update_kernel:
        update_kernel(root, entries, options)
    elif options.args or options.remove_args:
        raise GrubbyError("--args and --remove-args need --update-kernel")
    return output


def update_kernel(root: str, entries: list[BlsEntry], options: argparse.Namespace) -> None:
    removals = tokenize_cmdline(options.remove_args)
    additions = tokenize_cmdline(options.args)
    indexes = select_entries(root, entries, options.update_kernel)
    if not removals and not additions:
        return
    every = options.update_kernel == "ALL"
    if every:
        env = read_grubenv(root)
        if "kernelopts" in env:
            kernelopts = tokenize_cmdline(env["kernelopts"])
            env["kernelopts"] = " ".join(update_args(kernelopts, removals, additions))
            write_grubenv(root, existing_grubenv(root), env)
        if not options.no_etc_grub_update:
            update_etc_default_grub(root, removals, additions)
    for index in indexes:
        entry = entries[index]
        if every and takes_kernelopts(entry):
            continue
        arguments = tokenize_cmdline(bls_options(root, entry))
        fields = dict(entry.fields)
        fields["options"] = " ".join(update_args(arguments, removals, additions))
        write_bls_entry(root, replace(entry, fields=fields))


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
