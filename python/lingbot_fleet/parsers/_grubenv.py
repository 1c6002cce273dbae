"""A grub environment block as pasted: ``cat /boot/grub2/grubenv`` or ``grub2-editenv list``.

RHEL 8 keeps the kernel command line of its boot entries there as ``kernelopts`` (the
BLS entries say ``options $kernelopts``). The grub and cmdline kinds both read it; the
variables are read by :func:`lingbot_fleet.boot.grub.read_grubenv`.
"""

from __future__ import annotations

import re

HEADER = "# GRUB Environment Block"
KERNELOPTS = "kernelopts"
# Variables grub itself keeps in the block; one of them marks a bare `grub2-editenv list`.
_GRUB_OWN = frozenset({"saved_entry", "next_entry", KERNELOPTS})
_LISTED_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")


def is_grubenv(lines: list[str]) -> bool:
    """Whether ``lines`` are a grubenv block (with its header) or its listing."""
    body = [line for line in lines if line.strip()]
    if not body:
        return False
    if body[0].strip() == HEADER:
        return True
    names = set()
    for line in body:
        match = _LISTED_RE.match(line)
        if match is None:
            return False
        names.add(match.group(1))
    return bool(names & _GRUB_OWN) and not any(name.startswith("GRUB_") for name in names)


def assignments(lines: list[str]) -> list[dict]:
    """Every ``name=value`` of the block in order, with its line number."""
    from ..boot.grub import read_grubenv  # noqa: PLC0415  (grub.py is heavy; only this path needs it)

    found: list[dict] = []
    for number, line in enumerate(lines, start=1):
        for name, value in read_grubenv(line).items():
            found.append({"name": name, "value": value, "line": number})
    return found
