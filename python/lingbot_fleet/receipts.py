"""Receipts: what a module verified on a node, so a later run can tell nothing moved since.

Stdlib-only: runs on nodes (shipped as ``ansible.module_utils.lingbot_fleet.receipts``).

A module that has just brought its files and units into line writes a receipt for its
role under ``RECEIPTS_DIR``: a digest of what it converged with (its options and the
toolkit's code: the action plugin computes it on the controller and passes it as the
module's ``receipt_digest``), and what it verified:

- ``paths``: the stat signature of every path it manages (inode, size, mtime, ctime, mode,
  owner of a file; mode and owner of a directory; None for a path that must be absent).
  Any write, rename, chmod or chown of such a path changes its signature (the kernel sets
  ctime on each), so equal signatures mean the files are the ones the module verified;
- ``listings``: directories whose entries the module decides from (new instances, stale
  ones), signed with their mtime, which every entry created, removed or renamed moves;
- ``units``: the unit properties it requires (``UNIT_PROPERTIES``: a main PID and an
  invocation id pin the very process it verified);
- ``readings``: named values of the node that only a reading tells (``boot_state``: the
  digest of every file the kernel command line is read from, and the boot id;
  ``lingbot_answers``: each LingBot instance answering), read again by the caller's
  reader of that name, which is given the recorded value;
- ``data``: what the role's action needs to answer for the module (the result it gave, the
  plan in force), kept as the module left it.

gpu_facts, the first call of a run, returns every receipt with its paths, listings, units
and readings now (``current``); the role's action plugin then answers without a module
call only when the digest is the receipt's and nothing moved (``unchanged``). Anything
else runs the module, which decides from the files themselves and writes a new receipt.

A receipt is toolkit state, like the saved probe: not a managed file, not in the
generations. A stale receipt (after a rollback, an upgrade, an edit) only costs the module
call it would have saved.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .atomic import write_atomic
from .state_dirs import RECEIPTS_DIR

SCHEMA = 1
FACT_NAME = "lingbot_receipts"
# The unit properties a receipt can require, read by gpu_facts in one systemctl call.
UNIT_PROPERTIES = (
    "LoadState",
    "UnitFileState",
    "ActiveState",
    "SubState",
    "MainPID",
    "InvocationID",
)
# How old gpu_facts' reading may be for a receipt to stand on it (a fact cache may hold
# one from an earlier run); a node whose clock is off by more pays for the module call.
READING_MAX_AGE_S = 300.0


def options_digest(options: Mapping[str, Any]) -> str:
    """sha256 of the options as JSON with sorted keys: the module on the node and the
    action plugin on the controller compute it from the same validated options."""
    text = json.dumps(options, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def signature(real_path: str) -> list[int] | None:
    """The path's stat signature, or None when it does not exist."""
    try:
        info = os.lstat(real_path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(info.st_mode):
        # A directory's entries come and go (state files, metrics): its own mode and owner.
        return [info.st_ino, info.st_mode, info.st_uid, info.st_gid]
    return [
        info.st_ino,
        info.st_size,
        info.st_mtime_ns,
        info.st_ctime_ns,
        info.st_mode,
        info.st_uid,
        info.st_gid,
    ]


def listing_signature(real_path: str) -> list[int] | None:
    """A directory's entries as a signature: inode and mtime (an entry created, removed or
    renamed moves the mtime); None when it does not exist or is no directory."""
    try:
        info = os.stat(real_path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return None
    return [info.st_ino, info.st_mtime_ns]


def _real(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def receipt_path(role: str, root: str = "/") -> str:
    return _real(root, f"{RECEIPTS_DIR}/{role}.json")


def write_receipt(
    role: str,
    digest: str,
    paths: Sequence[str],
    units: Mapping[str, Mapping[str, str]],
    root: str = "/",
    *,
    listings: Sequence[str] = (),
    readings: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
) -> bool:
    """Record the paths' and listings' signatures now, the unit states required, the
    readings and the role's data; True when the receipt changed. ``units``: unit name ->
    property -> required value."""
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "role": role,
        "options_digest": digest,
        "paths": {path: signature(_real(root, path)) for path in sorted(set(paths))},
        "units": {name: dict(required) for name, required in sorted(units.items())},
    }
    if listings:
        document["listings"] = {
            path: listing_signature(_real(root, path)) for path in sorted(set(listings))
        }
    if readings:
        document["readings"] = dict(readings)
    if data is not None:
        document["data"] = dict(data)
    text = json.dumps(document, sort_keys=True, indent=1) + "\n"
    target = receipt_path(role, root)
    try:
        with open(target, encoding="utf-8") as handle:
            if handle.read() == text:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    write_atomic(target, text, mode=0o600)
    return True


def remove_receipt(role: str, root: str = "/") -> bool:
    """Remove the role's receipt (the role has nothing left on the node); True if it was."""
    try:
        os.unlink(receipt_path(role, root))
    except FileNotFoundError:
        return False
    return True


def _valid(document: Any, role: str) -> bool:
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        return False
    paths, units = document.get("paths"), document.get("units")
    listings = document.get("listings", {})
    return (
        document.get("role") == role
        and isinstance(document.get("options_digest"), str)
        and isinstance(paths, dict)
        and all(value is None or isinstance(value, list) for value in paths.values())
        and isinstance(listings, dict)
        and all(value is None or isinstance(value, list) for value in listings.values())
        and isinstance(units, dict)
        and all(isinstance(value, dict) for value in units.values())
        and isinstance(document.get("readings", {}), dict)
        and isinstance(document.get("data", {}), dict)
    )


def _read_each(
    recorded: Mapping[str, Any], readers: Mapping[str, Callable[[Any], Any]]
) -> dict[str, Any]:
    """Each recorded reading now (its reader is given the recorded value); None for a name
    without a reader or a reader that fails."""
    values: dict[str, Any] = {}
    for name, value in recorded.items():
        reader = readers.get(name)
        try:
            values[name] = reader(value) if reader is not None else None
        except (OSError, ValueError):
            values[name] = None
    return values


def read_receipts(
    root: str,
    show_units: Callable[[Sequence[str]], dict[str, dict[str, str]]],
    now_s: float,
    readers: Mapping[str, Callable[[Any], Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """role -> {receipt, current: {paths, listings, units, readings, read_at_s}} for every
    valid receipt.

    ``show_units`` reads UNIT_PROPERTIES of the named units in one call (an empty dict
    for a unit it could not read); ``readers`` reads a named reading, given the value the
    receipt recorded (only the readings a receipt holds are read)."""
    directory = _real(root, RECEIPTS_DIR)
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for name in names:
        role, extension = os.path.splitext(name)
        if extension != ".json":
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                document = json.load(handle)
        except (OSError, ValueError):
            continue
        if _valid(document, role):
            found[role] = {"receipt": document}
    wanted_units = sorted({unit for entry in found.values() for unit in entry["receipt"]["units"]})
    unit_states = show_units(wanted_units) if wanted_units else {}
    for entry in found.values():
        receipt = entry["receipt"]
        entry["current"] = {
            "paths": {path: signature(_real(root, path)) for path in receipt["paths"]},
            "listings": {
                path: listing_signature(_real(root, path)) for path in receipt.get("listings", {})
            },
            "units": {unit: unit_states.get(unit, {}) for unit in receipt["units"]},
            "readings": _read_each(receipt.get("readings", {}), readers or {}),
            "read_at_s": now_s,
        }
    return found


def unchanged(entry: Any, digest: str, now_s: float) -> str | None:  # noqa: PLR0911 - one return per reason the receipt does not stand
    """Why the receipt does not stand for the node now, or None when it does: a reading
    at most READING_MAX_AGE_S old, the same options digest, every path's signature as
    recorded, every unit as required."""
    if not isinstance(entry, dict) or not isinstance(entry.get("receipt"), dict):
        return "no receipt"
    receipt, current = entry["receipt"], entry.get("current") or {}
    read_at_s = current.get("read_at_s")
    if not isinstance(read_at_s, (int, float)) or abs(now_s - read_at_s) > READING_MAX_AGE_S:
        return "no fresh reading of the receipt"
    if receipt.get("options_digest") != digest:
        return "the options changed since the receipt"
    paths = current.get("paths") or {}
    for path, recorded in (receipt.get("paths") or {}).items():
        if path not in paths or paths[path] != recorded:
            return f"{path} changed since the receipt"
    listings = current.get("listings") or {}
    for path, recorded in (receipt.get("listings") or {}).items():
        if path not in listings or listings[path] != recorded:
            return f"the entries of {path} changed since the receipt"
    readings = current.get("readings") or {}
    for name, recorded in (receipt.get("readings") or {}).items():
        if recorded is None or readings.get(name) != recorded:
            return f"the node's {name} changed since the receipt"
    units = current.get("units") or {}
    for unit, required in (receipt.get("units") or {}).items():
        now = units.get(unit) or {}
        for key, value in required.items():
            if now.get(key) != value:
                return f"{unit} is {key}={now.get(key) or 'unknown'}, not {value}"
    return None


def parse_show_all(text: str) -> dict[str, dict[str, str]]:
    """``systemctl show --property=... -- a b`` output (blocks separated by blank lines,
    each with Id=) as unit -> properties."""
    units: dict[str, dict[str, str]] = {}
    for block in text.split("\n\n"):
        values: dict[str, str] = {}
        for line in block.splitlines():
            key, separator, value = line.partition("=")
            if separator:
                values[key.strip()] = value.strip()
        if values.get("Id"):
            units[values["Id"]] = values
    return units


# The option every module that keeps a receipt takes: the digest its action plugin
# computed (lingbot_fleet.receipt_action.receipt_digest). Without it the module keeps the
# receipt it has (topo_monitor and pcie_acs: a digest of its own options).
RECEIPT_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {"receipt_digest": {"type": "str"}}
