"""A node's generations read on the node and checked on the controller.

Stdlib only: ``read_generations`` runs on nodes (shipped as
``ansible.module_utils.lingbot_fleet.node.generation_snapshot``). It copies what
``lingbot_fleet.node.generations`` reads to check a generation - the directory listing, each
manifest's text, each saved copy's checksum - and every error as the node's ``OSError``
(errno and path). ``SnapshotReader`` answers the same calls from that copy on the
controller, so ``generations.list_generations`` gives there what it gives on the node,
error messages included, while the node never loads the generations code.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from typing import Any, Protocol

from .rooted import on_root as _on_root

MANIFEST = "manifest.json"
_CHUNK_BYTES = 1 << 20


def is_generation_name(name: str) -> bool:
    """A committed generation's directory name: a number without leading zeros."""
    return name.isdigit() and not name.startswith("0")


def _is_dir_fd(descriptor: int) -> bool:
    return stat.S_ISDIR(os.fstat(descriptor).st_mode)


def _os_error(error: OSError) -> dict[str, Any]:
    return {"errno": error.errno, "strerror": error.strerror, "filename": error.filename}


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _read_generation(directory: str) -> dict[str, Any]:
    manifest_path = os.path.join(directory, MANIFEST)
    entry: dict[str, Any] = {"files": {}, "dirs": []}
    try:
        descriptor = os.open(manifest_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        if _is_dir_fd(descriptor):
            os.close(descriptor)
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), manifest_path)
        with os.fdopen(descriptor, "rb") as handle:
            entry["manifest"] = handle.read().decode("utf-8")
    except OSError as error:
        entry["manifest_error"] = _os_error(error)
    except UnicodeDecodeError as error:
        entry["manifest_value_error"] = str(error)
    for current, dirs, files in os.walk(directory):
        entry["dirs"] += [os.path.join(current, name) for name in dirs]
        for name in files:
            path = os.path.join(current, name)
            if path == manifest_path:
                continue
            try:
                if os.path.islink(path):  # a generation holds no links: never read through one
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                entry["files"][path] = sha256_of(path)
            except OSError as error:
                entry["files"][path] = _os_error(error)
    return entry


def read_generations(generations_dir: str, root: str = "/") -> dict[str, Any]:
    """What checking the node's generations reads, as data (see the module's docstring)."""
    base = _on_root(root, generations_dir)
    snapshot: dict[str, Any] = {"generations_dir": generations_dir, "root": root, "base": base}
    try:
        names = sorted(os.listdir(base))
    except OSError as error:
        snapshot["listdir_error"] = _os_error(error)
        return snapshot
    snapshot["names"] = names
    snapshot["generations"] = {
        name: _read_generation(os.path.join(base, name))
        for name in names
        if is_generation_name(name)
    }
    return snapshot


def _raise(shipped: dict[str, Any]) -> None:
    raise OSError(shipped["errno"], shipped["strerror"], shipped["filename"])


class GenerationSource(Protocol):
    """Where generations are read from: the three calls ``generations`` makes to read and
    check one (``generations.GenerationReader`` on the disk, ``SnapshotReader`` here)."""

    def listdir(self, path: str) -> list[str]: ...

    def read_json(self, path: str) -> Any: ...

    def sha256(self, path: str) -> str: ...


class SnapshotReader:
    """generations.GenerationReader's calls answered from ``read_generations``' result."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.snapshot = snapshot
        self.base = os.path.normpath(snapshot["base"])
        self.by_directory = {
            os.path.normpath(os.path.join(snapshot["base"], name)): entry
            for name, entry in (snapshot.get("generations") or {}).items()
        }

    def listdir(self, path: str) -> list[str]:
        if os.path.normpath(path) != self.base:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        if "listdir_error" in self.snapshot:
            _raise(self.snapshot["listdir_error"])
        return list(self.snapshot["names"])

    def _entry_of(self, path: str) -> dict[str, Any] | None:
        normal = os.path.normpath(path)
        for directory, entry in self.by_directory.items():
            if normal.startswith(directory + os.sep):
                return entry
        return None

    def read_json(self, path: str) -> Any:
        entry = self._entry_of(path)
        if entry is None or os.path.basename(path) != MANIFEST:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        if "manifest_error" in entry:
            _raise(entry["manifest_error"])
        if "manifest_value_error" in entry:
            raise ValueError(entry["manifest_value_error"])
        return json.loads(entry["manifest"])

    def sha256(self, path: str) -> str:
        entry = self._entry_of(path) or {"files": {}, "dirs": []}
        normal = os.path.normpath(path)
        shipped = {os.path.normpath(p): v for p, v in entry["files"].items()}.get(normal)
        if isinstance(shipped, str):
            return shipped
        if isinstance(shipped, dict):
            _raise(shipped)
        if normal in {os.path.normpath(d) for d in entry["dirs"]}:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
