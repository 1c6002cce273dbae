"""Receipts: a module's own no-op result, and what it depended on, so a later run can tell
nothing moved since and answer with that result without a call.

Stdlib-only: runs on nodes (shipped as ``ansible.module_utils.lingbot_fleet.node.receipts``).
docs/converged-runs.md is the contract; in short:

A module call that changed nothing (outside check mode, given ``receipt_digest`` by its
action plugin: the digest of its options and of the toolkit's code, see
``lingbot_fleet.controller.receipt_action``) keeps a receipt for its role under ``RECEIPTS_DIR``
(``keep``). What the receipt watches is what the call's NodeChanges recorded (``nodefiles.
Watched``), never a list kept by hand:

- ``paths``: every path the call read, wrote, removed or tested, by its stat signature
  (inode, size, mtime, ctime, mode, owner; a directory's mode and owner; None when absent:
  any write, rename, chmod or chown moves ctime), or, under /proc and /sys where a stat
  says nothing, by a digest of its content;
- ``listings``: every directory whose entries the call listed, by inode and mtime;
- ``units``: every unit the call ran systemctl on or read the state of, with all its
  ``UNIT_PROPERTIES`` as they were when the receipt was written (a main PID and an
  invocation id pin the very process);
- ``readings``: named values only a reading tells (``boot_state``, ``lingbot_answers``),
  read again by the reader of that name, given the recorded value;
- ``data``: ``result``, the call's own result (what a call changing nothing says), and
  whatever else the role's action checks its reading options against.

A call that changed something, or failed, leaves no receipt: the next call that changes
nothing writes it, so the answer stored is always a real no-op result.

gpu_facts, the first call of a run, returns every receipt with its evidence now
(``current``); the action answers with the stored result only when the digest is the
receipt's and nothing moved (``unchanged``); anything else runs the module. A receipt is
toolkit state, like the saved probe: not a managed file, not in the generations, and only
a saving: nothing may be gated on its existence.
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
from .systemd import parse_units

# 2: the module's own result in data.result, evidence from NodeChanges.watched, no digest
# of no_log options. A receipt of another schema is not read (nor returned to the controller).
SCHEMA = 2
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


# Node paths whose stat says nothing of their content: their evidence is a content digest.
PSEUDO_FILE_PREFIXES = ("/proc/", "/sys/")
# The key of a module's result that says where the answer came from: "written",
# "unchanged", "removed", "none", "not written: ..." from the module; "stands" when the
# action answered from the receipt.
RESULT_KEY = "receipt"


def content_signature(real_path: str) -> list[str] | None:
    """["sha256", digest of the content], or None when it cannot be read."""
    try:
        with open(real_path, "rb") as handle:
            return ["sha256", hashlib.sha256(handle.read()).hexdigest()]
    except OSError:
        return None


def evidence(root: str, path: str) -> list[Any] | None:
    """What a receipt records of a node path: its content digest under /proc and /sys,
    else its stat signature."""
    if path.startswith(PSEUDO_FILE_PREFIXES):
        return content_signature(_real(root, path))
    return signature(_real(root, path))


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
        "paths": {path: evidence(root, path) for path in sorted(set(paths))},
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
            "paths": {path: evidence(root, path) for path in receipt["paths"]},
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
            if (now.get(key) or "") != value:
                return f"{unit} is {key}={now.get(key) or 'unknown'}, not {value}"
    return None


# The option every module that keeps a receipt takes: the digest its action plugin
# computed (lingbot_fleet.controller.receipt_action.receipt_digest). Without it no receipt is kept.
RECEIPT_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {"receipt_digest": {"type": "str"}}


def show_units(systemctl: str) -> Callable[[Sequence[str]], dict[str, dict[str, str]]]:
    """A reader of UNIT_PROPERTIES of units in one ``systemctl show`` call ({} when it
    fails): what ``keep`` records and gpu_facts reads again."""
    from .nodefiles import run_command  # noqa: PLC0415 - only a call that keeps a receipt

    def show(units: Sequence[str]) -> dict[str, dict[str, str]]:
        properties = ",".join(("Id", *UNIT_PROPERTIES))
        done = run_command(
            [systemctl, "show", f"--property={properties}", "--", *units], check=False
        )
        return parse_units(done.stdout) if done.rc == 0 else {}

    return show


def keep(
    role: str,
    digest: str | None,
    changes: Any,
    result: Mapping[str, Any],
    show_units: Callable[[Sequence[str]], dict[str, dict[str, str]]],
    *,
    root: str = "/",
    readings: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
) -> str:
    """After a module call (``changes``: its NodeChanges, ``result``: what it returns): a
    receipt of the call when it changed nothing, none when it changed something. Returns
    what became of the receipt, for the result's ``receipt`` key. Only a saving: a receipt
    that cannot be written costs the next run the call it would have saved."""
    if not digest:
        return "none (no receipt_digest)"
    try:
        if result.get("changed") or result.get("failed"):
            return "removed" if remove_receipt(role, root) else "none"
        units = sorted(changes.watched.units)
        states = show_units(units) if units else {}
        written = write_receipt(
            role,
            digest,
            changes.watched.paths,
            {unit: _required(states.get(unit) or {}) for unit in units},
            root,
            listings=changes.watched.listings,
            readings=readings,
            data={**(data or {}), "result": recorded_result(result)},
        )
    except (OSError, ValueError) as error:
        return f"not written: {error}"
    return "written" if written else "unchanged"


def _required(state: Mapping[str, str]) -> dict[str, str]:
    return {name: str(state.get(name, "")) for name in UNIT_PROPERTIES}


def recorded_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """The result a receipt keeps: the module's, less where the answer came from."""
    return json.loads(json.dumps({k: v for k, v in result.items() if k != RESULT_KEY}))


def replay(receipt: Mapping[str, Any]) -> dict[str, Any] | None:
    """The module's own result as the receipt keeps it, marked as answered from it; None
    when the receipt holds no result (the module runs)."""
    stored = (receipt.get("data") or {}).get("result")
    if not isinstance(stored, dict):
        return None
    return {**json.loads(json.dumps(stored)), RESULT_KEY: "stands"}
