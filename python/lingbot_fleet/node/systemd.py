"""What ``systemctl show`` prints, read in one place. Stdlib only (runs on the node).

``systemctl show --property=A,B -- unit`` prints ``A=value`` lines; for several units, one
block per unit, separated by a blank line, each with ``Id=`` when the Id is asked for.
Every module that reads unit state (persistence, ACS, the monitor's timer, LingBot's
instances, receipts, rollback) parses it here; each builds its own argv, since what it
asks for differs.
"""

from __future__ import annotations


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
