"""Receipts: what a module verified on a node, so a later run can tell nothing moved since.

Stdlib-only: runs on nodes (shipped as ``ansible.module_utils.lingbot_fleet.receipts``).

A module that has just brought its files and units into line writes a receipt for its
role under ``RECEIPTS_DIR``: a digest of the options it converged with, and the stat
signature of every path it manages (inode, size, mtime, ctime, mode, owner of a file; mode
and owner of a directory; None for a path that must be absent). Any write, rename, chmod
or chown of such a path changes its signature (the kernel sets ctime on each), so equal
signatures mean the files are the ones the module verified. gpu_facts, the first call of a
run, returns every receipt with the signatures of its paths now and the state of its
units (``current``); the role's action plugin then answers without a module call only when
the digest of its own options is the receipt's, every signature is unchanged and every
unit is as the receipt requires (``unchanged``). Anything else runs the module, which
decides from the files themselves and writes a new receipt.

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

SCHEMA = 1
RECEIPTS_DIR = "/var/lib/lingbot-fleet/receipts"
FACT_NAME = "lingbot_receipts"
# The unit properties a receipt can require, read by gpu_facts in one systemctl call.
UNIT_PROPERTIES = ("LoadState", "UnitFileState", "ActiveState")
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
) -> bool:
    """Record the paths' signatures now and the unit states required; True when the
    receipt changed. ``units``: unit name -> property -> required value."""
    document = {
        "schema": SCHEMA,
        "role": role,
        "options_digest": digest,
        "paths": {path: signature(_real(root, path)) for path in sorted(set(paths))},
        "units": {name: dict(required) for name, required in sorted(units.items())},
    }
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
    return (
        document.get("role") == role
        and isinstance(document.get("options_digest"), str)
        and isinstance(paths, dict)
        and all(value is None or isinstance(value, list) for value in paths.values())
        and isinstance(units, dict)
        and all(isinstance(value, dict) for value in units.values())
    )


def read_receipts(
    root: str, show_units: Callable[[Sequence[str]], dict[str, dict[str, str]]], now_s: float
) -> dict[str, dict[str, Any]]:
    """role -> {receipt, current: {paths, units, read_at_s}} for every valid receipt.

    ``show_units`` reads UNIT_PROPERTIES of the named units in one call (an empty dict
    for a unit it could not read)."""
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
            "units": {unit: unit_states.get(unit, {}) for unit in receipt["units"]},
            "read_at_s": now_s,
        }
    return found


def unchanged(entry: Any, digest: str, now_s: float) -> str | None:
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
