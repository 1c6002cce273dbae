"""The probe result saved on the node (docs/probe.md): where it lives, and whether it can
stand for a probe.

Stdlib only and small: gpu_facts reads the saved probe on every run, so what it imports
stays out of the probe's measuring code.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..node.state_dirs import PROBE_DIR

PROBE_SCHEMA_VERSION = 1
DEFAULT_SAVE_DIR = PROBE_DIR
LATEST_NAME = "latest.json"
SAVED_PROBE_FACT_NAME = "lingbot_saved_probe"


def load_saved_probe(save_dir: str | Path) -> dict[str, Any] | None:
    """The last saved probe document, or None when there is none or it is not usable
    (``read_saved_probe`` says why)."""
    return read_saved_probe(save_dir)[0]


def read_saved_probe(save_dir: str | Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the last saved probe document, None), or (None, a note) when latest.json exists but
    cannot stand for a probe (damaged, of another schema, impossible figures); (None, None)
    when there is none. An unusable file counts as no saved probe: the next probe replaces
    it."""
    path = Path(save_dir) / LATEST_NAME
    try:
        document = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return None, _unusable(path, f"cannot be read: {error}")
    problem = saved_probe_problem(document)
    return (None, _unusable(path, problem)) if problem else (document, None)


FIGURE_SUFFIXES = ("_gbytes_per_s", "_ns")


def _unusable(path: Path, problem: str) -> str:
    return (
        f"the saved probe {path} is not used ({problem}); it counts as no saved probe and "
        "the next probe that saves replaces it"
    )


def saved_probe_problem(document: Any) -> str | None:
    """Why a saved document is not a probe result this toolkit can reuse (None: it is)."""
    if not isinstance(document, dict):
        return f"it holds a JSON {type(document).__name__}, not a probe document"
    if document.get("schema_version") != PROBE_SCHEMA_VERSION or isinstance(
        document.get("schema_version"), bool
    ):
        return (
            f"schema_version is {document.get('schema_version')!r}, this toolkit reads "
            f"{PROBE_SCHEMA_VERSION}"
        )
    for key in ("gpus", "pairs"):
        entries = document.get(key, [])
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            return f"{key} is {entries!r}, not a list of entries"
        for position, entry in enumerate(entries):
            bad = _impossible_figure(entry, f"{key}[{position}]")
            if bad:
                return bad
    return None


def _impossible_figure(entry: Mapping[str, Any], where: str) -> str | None:
    """'pairs[0].p2p_enabled.latency_ns is nan': a figure no measurement gives."""
    for name, value in entry.items():
        if isinstance(value, Mapping):
            bad = _impossible_figure(value, f"{where}.{name}")
            if bad:
                return bad
        elif (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and (not math.isfinite(value) or (name.endswith(FIGURE_SUFFIXES) and value < 0))
        ):
            return f"{where}.{name} is {value!r}"
    return None


def saved_probe_fact(save_dir: str | Path, read_at_s: float | None) -> dict[str, Any]:
    """``ansible_facts.lingbot_saved_probe``: the saved probe of `save_dir`, validated by
    ``read_saved_probe`` (null with the note when latest.json is unusable), and when it was
    read (the node's clock)."""
    probe, note = read_saved_probe(save_dir)
    return {"save_dir": str(save_dir), "probe": probe, "note": note, "read_at_s": read_at_s}
