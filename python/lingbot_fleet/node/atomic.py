"""Atomic file writes: readers see the old file or the new one, never half of it.

Stdlib-only: runs on nodes (shipped as ``ansible.module_utils.lingbot_fleet.node.atomic``). The
one implementation every writer of the toolkit uses, directly or through ``NodeChanges``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any


def write_atomic(
    path: str,
    content: bytes | str,
    *,
    mode: int = 0o644,
    uid: int | None = None,
    gid: int | None = None,
    validate: Callable[[str], None] | None = None,
    dir_mode: int = 0o755,
) -> None:
    """Write ``content`` to ``path`` so that readers see the old file or the new, never half.

    The temp file lives in the target directory (same filesystem, so the rename is
    atomic), starts with '.' and ends in '.tmp' (so directory scanners such as
    node_exporter's textfile collector skip it), is fsynced, gets its mode and owner, and is
    passed to ``validate`` (which raises to refuse it) before it is renamed over ``path``.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=dir_mode, exist_ok=True)
    descriptor, temp_path = tempfile.mkstemp(
        prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_path, mode)
        if uid is not None or gid is not None:
            os.chown(temp_path, -1 if uid is None else uid, -1 if gid is None else gid)
        if validate is not None:
            validate(temp_path)
        os.replace(temp_path, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_path)
        raise


def write_json_atomic(
    path: str, document: Any, *, mode: int = 0o644, dir_mode: int = 0o755
) -> None:
    """``write_atomic`` of a JSON document (sorted keys, indented, newline at the end)."""
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    write_atomic(path, text, mode=mode, dir_mode=dir_mode)
