"""What ``systemctl show`` prints, read in one place. Stdlib only (runs on the node).

``systemctl show --property=A,B -- unit`` prints ``A=value`` lines; for several units, one
block per unit, separated by a blank line, each with ``Id=`` when the Id is asked for.
Every module that reads unit state (persistence, ACS, the monitor's timer, LingBot's
instances, receipts, rollback) parses it here; each builds its own argv, since what it
asks for differs. ``systemd-analyze verify`` of units before they are written is here too.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from . import nodefiles


def parse_properties(text: str) -> dict[str, str]:
    """``Key=value`` lines as a dict (one unit's block), blanks around both stripped."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, separator, value = line.partition("=")
        if separator:
            values[key.strip()] = value.strip()
    return values


def parse_units(text: str) -> dict[str, dict[str, str]]:
    """Blocks of several units, each with ``Id=``, as unit Id -> properties; a block
    without an Id is left out."""
    units: dict[str, dict[str, str]] = {}
    for block in text.strip().split("\n\n"):
        values = parse_properties(block)
        if values.get("Id"):
            units[values["Id"]] = values
    return units


@dataclass(frozen=True)
class Verified:
    """What ``systemd-analyze verify`` said of units checked in a private directory."""

    rc: int
    output: str  # stdout and stderr, the private directory's path taken out
    complaints: tuple[str, ...]  # lines about the units checked

    @property
    def refused(self) -> bool:
        """systemd reports bad keys and values as warnings with exit status 0: a complaint
        refuses the units as surely as a failing status."""
        return self.rc != 0 or bool(self.complaints)


def verify_units(
    analyze: str,
    files: Mapping[str, str],
    targets: Sequence[str],
    *,
    watch: Sequence[str] = (),
    prefix: str = "lingbot-fleet-units.",
) -> Verified:
    """``systemd-analyze verify`` of unit texts before any of them is written to the node.

    ``files`` (path relative to a unit directory -> text: units, templates, drop-ins) are
    written to a fresh private directory, which is removed again; ``targets`` (names
    relative to it, an instance of a template included) are verified. A complaint is a
    line that names the private directory or one of ``watch``.
    """
    workdir = tempfile.mkdtemp(prefix=prefix)
    try:
        for name, text in files.items():
            path = os.path.join(workdir, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
        argv = [analyze, "verify", *(os.path.join(workdir, name) for name in targets)]
        done = nodefiles.run_command(argv, check=False)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    said = done.stdout + done.stderr
    complaints = tuple(
        line for line in said.splitlines() if workdir in line or any(w in line for w in watch)
    )
    return Verified(done.rc, said.replace(workdir + "/", ""), complaints)
