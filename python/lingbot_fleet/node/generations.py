"""Generations: every file the toolkit changes on a node, saved before the change.

Stdlib-only: this module runs on nodes (shipped as
``ansible.module_utils.lingbot_fleet.node.generations``).

Layout under the generations directory (default ``/var/lib/lingbot-fleet/generations``)::

    pending/<run id>/manifest.json     the run's open generation: "before" states only
    pending/<run id>/files/<path>      the saved copy of each file that existed
    <n>/manifest.json                  a committed generation: "before" and "after"
    <n>/files/<path>

A run records a file (``record_before``) before it writes it, once per path per run.
``commit`` fills in the "after" states, the running kernel command line and the plan in
force, drops the files that did not change, and either renames the pending directory
to the next number or, when nothing changed, removes it. Then only the newest
``keep`` generations are kept.

Rollback makes the node as it was after generation ``target`` (default: the one before
the newest): every file touched by a later generation goes back to the "before" state
of the earliest of them, byte for byte with mode and owner, or is removed when it did not
exist. Nothing is touched unless every manifest parses, every saved copy matches its
checksum and every current file is as the newest generation left it (or ``force``).

Every function takes ``root``, a prefix for every node path (``/`` on a node, a temp
dir in tests).
"""

from __future__ import annotations

import contextlib
import errno
import grp
import hashlib
import json
import os
import pwd
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..lingbot import layout as lingbot_layout
from . import atomic, values
from .generation_snapshot import MANIFEST, GenerationSource, is_generation_name, sha256_of
from .rooted import on_root
from .state_dirs import GENERATIONS_DIR

SCHEMA = 1
DEFAULT_GENERATIONS_DIR = GENERATIONS_DIR
DEFAULT_PLAN_PATH = lingbot_layout.PLAN_PATH
DEFAULT_KEEP = 20
PENDING = "pending"
FILES = "files"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_CHUNK_BYTES = 1 << 20

KIND_GRUB = "grub"
KIND_UNIT = "unit"
KIND_LINGBOT = "lingbot"
KIND_OTHER = "other"
_GRUB_PREFIXES = ("/etc/default/grub", "/boot/loader/entries/", "/boot/grub")
_UNIT_DIRS = ("/etc/systemd/system/", "/lib/systemd/system/", "/usr/lib/systemd/system/")
_LINGBOT_DIR = lingbot_layout.CONFIG_DIR + "/"


class GenerationError(Exception):
    """A generation that cannot be recorded, read or restored; nothing was touched."""


# --- paths and file states ---------------------------------------------------------


_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


def _check_node_path(path: str) -> str:
    if not isinstance(path, str):
        raise GenerationError(f"{path!r} is not a path; give each recorded path as /dir/file")
    if _CONTROL.search(path):
        raise GenerationError(
            f"{path!r} holds a control character (a line break or NUL); give each recorded "
            "path as /dir/file on one line"
        )
    normal = os.path.normpath(path)
    if not path.startswith("/") or normal != path or "/../" in f"{normal}/":
        raise GenerationError(
            f"{path!r} is not a normalized absolute path; give each recorded path as /dir/file"
        )
    return path


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.fullmatch(run_id):
        raise GenerationError(
            f"run id {run_id!r} is not usable as a directory name; use letters, digits, "
            "'_', '-' and '.' (at most 128), e.g. 20250101T120000Z-4711"
        )
    return run_id


# What a rollback may restore: the files the toolkit's roles write (their declarations:
# bootfiles, lingbot_layout, acs, persistence, the monitor's install options), checked
# against those modules by tests/generations. A manifest entry elsewhere (a planted
# /etc/shadow) is refused. Directories: every path below them; names: exact paths.
RESTORABLE_DIRS = (
    "/etc/default/grub.d",  # kernel_cmdline's drop-in
    "/boot/loader/entries",  # grubby's boot entries
    lingbot_layout.CONFIG_DIR,  # lingbot_service: plan, instance configs
    "/etc/lingbot-fleet",  # topo_monitor's configuration
    "/etc/systemd/system/nvidia-persistenced.service.d",  # nvidia_persistence's drop-in
    "/usr/local/libexec/lingbot-fleet",  # warm-up program
)
RESTORABLE_FILES = (
    "/etc/default/grub",
    "/etc/kernel/cmdline",
    "/boot/grub/grub.cfg",
    "/boot/grub2/grub.cfg",
    "/boot/grub/grubenv",
    "/boot/grub2/grubenv",
    "/etc/modules-load.d/lingbot-fleet-nvidia-uvm.conf",  # nvidia_persistence
    "/usr/local/sbin/lingbot-fleet-monitor",  # topo_monitor's program
)
# Units and their drop-ins in /etc/systemd/system whose name starts so: lingbot@.service,
# lingbot@<instance>.service.d/, lingbot-fleet-monitor.*, lingbot-fleet-acs-redirect-off.
RESTORABLE_UNIT_PREFIX = "lingbot"
_EFI_BOOT_FILES = ("grub.cfg", "grubenv")


def _below(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or below it, component by component."""
    return os.path.commonpath([path, directory]) == directory


def is_restorable(path: str, also: Iterable[str] = ()) -> bool:
    """Whether a rollback may restore ``path`` (normalized, absolute): a file a role of the
    toolkit writes, or one of ``also`` (generations_record_paths: files or directories the
    inventory declares its own tasks record)."""
    if path in RESTORABLE_FILES or any(_below(path, d) for d in (*RESTORABLE_DIRS, *also)):
        return True
    parts = path.split("/")
    if _below(path, lingbot_layout.UNIT_DIR) and len(parts) > 4:
        return parts[4].startswith(RESTORABLE_UNIT_PREFIX)
    # grub.cfg and grubenv on the EFI partition, where /boot/grub2's links lead.
    return _below(path, "/boot/efi/EFI") and parts[-1] in _EFI_BOOT_FILES


# Files whose content a generation never keeps (an old API key must not outlive its
# rotation): their state is recorded, and a rollback leaves them as they are unless the
# restored generation had none.
SECRET_FILE_NAMES = (lingbot_layout.SECRETS_NAME,)


def is_secret(path: str) -> bool:
    return path.startswith(_LINGBOT_DIR) and os.path.basename(path) in SECRET_FILE_NAMES


def kind_of(path: str) -> str:
    """What a file is, for what a restore must do afterwards."""
    if path.startswith(_GRUB_PREFIXES):
        return KIND_GRUB
    if path.startswith(_UNIT_DIRS):
        return KIND_UNIT
    if path.startswith(_LINGBOT_DIR):
        return KIND_LINGBOT
    return KIND_OTHER


@dataclass(frozen=True)
class FileState:
    """A file as it is (or was): absent, or a regular file with mode, owner, checksum."""

    exists: bool
    mode: int = 0
    uid: int = 0
    gid: int = 0
    owner: str = ""
    group: str = ""
    size: int = 0
    sha256: str = ""

    def to_json(self) -> dict[str, Any]:
        if not self.exists:
            return {"exists": False}
        return {
            "exists": True,
            "mode": f"{self.mode:04o}",
            "uid": self.uid,
            "gid": self.gid,
            "owner": self.owner,
            "group": self.group,
            "size": self.size,
            "sha256": self.sha256,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileState:
        if not isinstance(data, Mapping):
            raise TypeError(f"the file state {data!r} is not a mapping")
        if not isinstance(data.get("exists"), bool):
            raise ValueError(f"exists is {data.get('exists')!r}, not true or false")
        if not data["exists"]:
            return cls(exists=False)
        sha = str(data["sha256"])
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ValueError(f"sha256 {sha!r} is not 64 hex digits")
        if not re.fullmatch(r"[0-7]{3,4}", str(data["mode"])):
            raise ValueError(f"mode {data['mode']!r} is not an octal file mode like 0644")
        return cls(
            exists=True,
            mode=int(str(data["mode"]), 8),
            uid=int(data["uid"]),
            gid=int(data["gid"]),
            owner=str(data.get("owner", "")),
            group=str(data.get("group", "")),
            size=int(data["size"]),
            sha256=sha,
        )

    def same_content_and_metadata(self, other: FileState) -> bool:
        if self.exists != other.exists:
            return False
        if not self.exists:
            return True
        return (self.sha256, self.mode, self.uid, self.gid) == (
            other.sha256,
            other.mode,
            other.uid,
            other.gid,
        )


def _name_of_uid(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _name_of_gid(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def file_state(real_path: str, shown_path: str | None = None) -> FileState:
    """The state of the file at ``real_path``; only regular files (or nothing) qualify."""
    try:
        info = os.lstat(real_path)
    except FileNotFoundError:
        return FileState(exists=False)
    if not stat.S_ISREG(info.st_mode):
        raise GenerationError(
            f"{shown_path or real_path} is not a regular file (a link, directory or "
            "device); generations hold regular files only. Replace it with a file or "
            "leave it out of the recorded paths"
        )
    return FileState(
        exists=True,
        mode=stat.S_IMODE(info.st_mode),
        uid=info.st_uid,
        gid=info.st_gid,
        owner=_name_of_uid(info.st_uid),
        group=_name_of_gid(info.st_gid),
        size=info.st_size,
        sha256=sha256_of(real_path),
    )


# --- opening files without following links ----------------------------------------


def open_below(base: str, relative: str, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """A descriptor of ``base``/``relative``, opened one directory at a time from ``base``
    (``openat``) with O_NOFOLLOW: a symbolic link anywhere below ``base`` fails (ELOOP or
    ENOTDIR) instead of leading out of it."""
    parts = [part for part in relative.split("/") if part]
    if not parts or ".." in parts:
        raise GenerationError(f"{relative!r} is not a path below {base}")
    directory = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            inner = os.open(
                part,
                os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                dir_fd=directory,
            )
            os.close(directory)
            directory = inner
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=directory)
    finally:
        os.close(directory)


def linked_dir_above(root: str, path: str) -> str | None:
    """The first existing directory above ``path`` (below ``root``) that is a symbolic
    link, as a node path; None when there is none. A write through it would land
    elsewhere."""
    current = "/"
    for part in [p for p in path.split("/") if p][:-1]:
        current = os.path.join(current, part)
        try:
            if stat.S_ISLNK(os.lstat(on_root(root, current)).st_mode):
                return current
        except FileNotFoundError:
            return None
    return None


def _sha256_below(base: str, relative: str) -> str:
    digest = hashlib.sha256()
    with os.fdopen(open_below(base, relative), "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- atomic writes -----------------------------------------------------------------


def write_json_atomic(path: str, data: Any) -> None:
    """A manifest, written atomically into a tree only root may read (0700, files 0600)."""
    atomic.write_json_atomic(path, data, mode=0o600, dir_mode=0o700)


def _copy_with_state(source: tuple[str, str], dest: str, state: FileState) -> str:
    """Copy ``source`` (a generation directory and the saved copy below it, opened without
    following links) to a temp file beside ``dest`` with the state's mode and owner."""
    directory = os.path.dirname(dest)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, temp_path = tempfile.mkstemp(prefix=".lingbot-fleet.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out, os.fdopen(open_below(*source), "rb") as handle:
            shutil.copyfileobj(handle, out, _CHUNK_BYTES)
            out.flush()
            os.fsync(out.fileno())
        os.chown(temp_path, state.uid, state.gid)
        os.chmod(temp_path, state.mode)
    except BaseException:
        os.unlink(temp_path)
        raise
    return temp_path


# --- recording ---------------------------------------------------------------------


def pending_dir(generations_dir: str, run_id: str, root: str = "/") -> str:
    """The run's open generation; GenerationError when the tree is not the toolkit's."""
    check_run_id(run_id)
    base = tree_base(generations_dir, root)
    check_tree(base)
    return os.path.join(base, PENDING, run_id)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _read_json(path: str) -> Any:
    """A manifest (never read through a symbolic link: ELOOP)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    if stat.S_ISDIR(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    with os.fdopen(descriptor, encoding="utf-8") as handle:
        return json.load(handle)


def _load_pending(run_dir: str, run_id: str) -> dict[str, Any]:
    manifest_path = os.path.join(run_dir, MANIFEST)
    if not os.path.exists(manifest_path):
        return {"schema": SCHEMA, "run_id": run_id, "opened": _now(), "files": []}
    try:
        manifest = _read_json(manifest_path)
        if not isinstance(manifest, dict):
            raise ValueError(f"it holds a JSON {type(manifest).__name__}, not an object")
        if not isinstance(manifest.get("files"), list):
            raise ValueError("'files' is not a list")
        for position, entry in enumerate(manifest["files"]):
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                raise ValueError(f"file entry {position} has no path")
    except (OSError, ValueError) as error:
        raise GenerationError(
            f"{manifest_path} cannot be read ({error}): the open generation of run {run_id} "
            f"is damaged. Move {run_dir} away (its files/ hold the saved copies) and run again"
        ) from error
    return manifest


def update_pending(
    generations_dir: str, run_id: str, notes: Mapping[str, Any], root: str = "/"
) -> None:
    """Set keys of the run's open manifest (what a run still owes the node, e.g. the
    effects of a rollback), so a later run can finish them when this one cannot."""
    run_dir = pending_dir(generations_dir, run_id, root)
    manifest = _load_pending(run_dir, run_id)
    manifest.update(notes)
    write_json_atomic(os.path.join(run_dir, MANIFEST), manifest)


UNITS_ENABLED = "units_enabled"
_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.(service|timer|socket|path|target)$")


def note_unit_enabled(generations_dir: str, run_id: str, unit: str, root: str = "/") -> bool:
    """Note in the run's open generation that the run is about to enable ``unit`` (it was
    not enabled): a rollback past this generation disables and stops it again. Call it
    before ``systemctl enable``. Returns whether the unit was newly noted."""
    if not _UNIT_NAME.match(unit):
        raise GenerationError(f"{unit!r} is not a systemd unit name; nothing was noted")
    run_dir = pending_dir(generations_dir, run_id, root)
    manifest = _load_pending(run_dir, run_id)
    units = manifest.setdefault(UNITS_ENABLED, [])
    if unit in units:
        return False
    units.append(unit)
    own_tree(tree_base(generations_dir, root))
    os.makedirs(run_dir, mode=0o700, exist_ok=True)
    write_json_atomic(os.path.join(run_dir, MANIFEST), manifest)
    return True


def open_runs(generations_dir: str, root: str = "/") -> dict[str, dict[str, Any]]:
    """Run id -> open manifest, for every run with an open generation on the node."""
    if not check_tree(tree_base(generations_dir, root)):
        return {}
    base = on_root(root, os.path.join(generations_dir, PENDING))
    try:
        names = sorted(os.listdir(base))
    except FileNotFoundError:
        return {}
    return {
        name: _load_pending(os.path.join(base, name), name)
        for name in names
        if _RUN_ID.fullmatch(name)
    }


# --- the generations tree: created and marked by the toolkit, refused otherwise ------

# The file that marks a directory as a generations tree the toolkit created (its text: the
# format version). Only such a tree is written, pruned or restored from.
TREE_MARKER = ".lingbot-fleet-generations"
TREE_MARKER_TEXT = f"lingbot-fleet generations {SCHEMA}\n"
# What a tree of an earlier toolkit version (made before the marker) may hold besides
# generations: such a tree, owned by the toolkit's user and writable by nobody else, is
# marked on its first write instead of refused.
_TREE_FILES = (TREE_MARKER, "lock.json", ".lock.guard", PENDING)


def _tree_error(base_real: str, problem: str, fix: str) -> GenerationError:
    return GenerationError(
        f"{base_real} {problem}; nothing was touched. {fix} (generations_dir names a "
        "directory the toolkit creates and owns)"
    )


def _owned_from(base_real: str) -> str:
    """The outermost directory of ``base_real`` the toolkit owns: its first component
    below the top level that names the toolkit (values.owned_dir guarantees one)."""
    parts = base_real.split("/")
    for position in range(2, len(parts)):
        if values.TOOLKIT_WORD in parts[position].lower():
            return "/".join(parts[: position + 1])
    return base_real


def _check_owned_dir(real: str, info: os.stat_result, what: str) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise _tree_error(
            real,
            "is a symbolic link",
            f"Replace it with the directory it stands for, or set generations_dir to another "
            f"path; {what} must be a real directory",
        )
    if not stat.S_ISDIR(info.st_mode):
        return  # a file: reading or writing below it fails on its own (ENOTDIR)
    if info.st_uid != os.geteuid():
        raise _tree_error(
            real,
            f"is owned by uid {info.st_uid}, not by uid {os.geteuid()} that runs the toolkit",
            f"Another user could plant generations there: remove it (the toolkit creates {what} "
            "itself), or set generations_dir to another path",
        )
    if stat.S_IMODE(info.st_mode) & 0o022:
        raise _tree_error(
            real,
            f"is writable by its group or others (mode {stat.S_IMODE(info.st_mode):04o})",
            f"Other users could plant generations there: check what it holds, then chmod go-w "
            f"{real}, or set generations_dir to another path",
        )


def _check_tree_path(base_real: str) -> None:
    """Every existing directory from the toolkit's own one down to ``base_real``: a real
    directory (no symbolic link), owned by the toolkit's user, writable by nobody else."""
    start = _owned_from(base_real)
    path = start
    rest = os.path.relpath(base_real, start).split("/") if base_real != start else []
    for part in ["", *rest]:
        path = os.path.join(path, part) if part else path
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        _check_owned_dir(path, info, "every directory of the generations tree")


def _is_earlier_tree(base_real: str) -> bool:
    """Whether an unmarked directory holds only what a generations tree holds."""
    for name in os.listdir(base_real):
        if name in _TREE_FILES or name.startswith(".lock.json."):
            continue
        if not is_generation_name(name):
            return False
        if not os.path.lexists(os.path.join(base_real, name, MANIFEST)):
            return False
    return True


def tree_base(generations_dir: str, root: str = "/") -> str:
    """The generations directory on this machine, its value checked (values.owned_dir)."""
    try:
        values.owned_dir(generations_dir, "generations_dir")
    except ValueError as error:
        raise GenerationError(f"{error}; nothing was touched") from error
    return on_root(root, generations_dir)


def check_tree(base_real: str) -> bool:
    """Whether the generations tree exists; GenerationError when it is not one the toolkit
    made (see own_tree). Reads only."""
    _check_tree_path(base_real)
    if not os.path.lexists(base_real):
        return False
    if os.path.lexists(os.path.join(base_real, TREE_MARKER)):
        return True
    if not _is_earlier_tree(base_real):
        raise _tree_error(
            base_real,
            f"exists but holds no {TREE_MARKER} and things that are not generations",
            "The toolkit takes over only a directory it created: set generations_dir to a new "
            "path, or move the directory away",
        )
    return True


def own_tree(base_real: str, *, mark_earlier: bool = True) -> str:
    """The generations tree at ``base_real``, ready to write into: created when absent
    (missing parents 0755, the tree 0700, the marker), an unmarked tree of an earlier
    version marked (unless ``mark_earlier`` is false: the lock, which writes nothing that
    stays), anything else refused naming the fix. Never chmods a directory."""
    if _owned_from(base_real) == base_real and values.TOOLKIT_WORD not in base_real.lower():
        raise _tree_error(
            base_real,
            "is not a directory of the toolkit",
            f"Fix generations_dir: {values.OWNED_DIR_RULE}",
        )
    if check_tree(base_real):
        marker = os.path.join(base_real, TREE_MARKER)
        if mark_earlier and not os.path.lexists(marker):
            atomic.write_atomic(marker, TREE_MARKER_TEXT, mode=0o600)
        return base_real
    os.makedirs(os.path.dirname(base_real), mode=0o755, exist_ok=True)
    _check_tree_path(os.path.dirname(base_real))
    os.mkdir(base_real, 0o700)
    atomic.write_atomic(os.path.join(base_real, TREE_MARKER), TREE_MARKER_TEXT, mode=0o600)
    return base_real


def absent_dirs(root: str, path: str) -> list[str]:
    """The ancestor directories of `path` missing on the node, outermost first: the ones
    writing `path` creates."""
    missing: list[str] = []
    parent = os.path.dirname(path)
    while parent not in ("/", "") and not os.path.lexists(on_root(root, parent)):
        missing.insert(0, parent)
        parent = os.path.dirname(parent)
    return missing


@dataclass(frozen=True)
class DirState:
    """A directory a rollback removed, as it was: recreated so when that rollback is undone."""

    path: str
    mode: int
    uid: int
    gid: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "mode": f"{self.mode:04o}", "uid": self.uid, "gid": self.gid}

    @classmethod
    def from_json(cls, data: Any) -> DirState:
        if not isinstance(data, Mapping):
            raise TypeError(f"{data!r} is not a mapping")
        if not re.fullmatch(r"[0-7]{3,4}", str(data.get("mode"))):
            raise ValueError(f"mode {data.get('mode')!r} is not an octal mode like 0755")
        uid, gid = data.get("uid"), data.get("gid")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (uid, gid)):
            raise ValueError(f"uid {uid!r} and gid {gid!r} are not both numbers")
        # all() above proved uid and gid numbers; mypy does not narrow through all().
        return cls(_check_node_path(str(data.get("path"))), int(str(data["mode"]), 8), uid, gid)  # type: ignore[arg-type]


REMOVED_DIRS = "removed_dirs"
CREATED_DIRS = "created_dirs"


def note_dirs_created(
    generations_dir: str, run_id: str, directory: str, root: str = "/"
) -> list[str]:
    """Note in the run's open generation the directories a run is about to create for
    ``directory`` (it and its missing parents, outermost first): a rollback past the
    generation removes them again once they are empty. Call it before creating them.
    Returns the directories newly noted."""
    directory = _check_node_path(directory)
    if os.path.lexists(on_root(root, directory)):
        return []
    missing = [*absent_dirs(root, directory), directory]
    run_dir = pending_dir(generations_dir, run_id, root)
    manifest = _load_pending(run_dir, run_id)
    noted = manifest.setdefault(CREATED_DIRS, [])
    added = [d for d in missing if d not in noted]
    if added:
        noted.extend(added)
        write_json_atomic(os.path.join(run_dir, MANIFEST), manifest)
    return added


def record_before(
    generations_dir: str, run_id: str, paths: Iterable[str], root: str = "/"
) -> list[str]:
    """Save the current state of each path into the run's open generation.

    A path already recorded in this run keeps its first state. Returns the paths newly
    recorded. Call it before writing the files; it writes nothing else.
    """
    run_dir = pending_dir(generations_dir, run_id, root)
    paths = [_check_node_path(path) for path in paths]
    manifest = _load_pending(run_dir, run_id)
    known = {entry["path"] for entry in manifest["files"]}
    # Every path is read before the first directory is made: a refusal leaves no trace.
    states = {path: file_state(on_root(root, path), path) for path in paths if path not in known}
    own_tree(tree_base(generations_dir, root))
    added: list[str] = []
    for path, state in states.items():
        entry: dict[str, Any] = {"path": path, "kind": kind_of(path), "before": state.to_json()}
        missing_dirs = [] if state.exists else absent_dirs(root, path)
        if missing_dirs:
            # The directories the write is about to create: a rollback removes them again.
            entry["before"]["absent_dirs"] = missing_dirs
        if state.exists and is_secret(path):
            entry["secret"] = True
        elif state.exists:
            saved = os.path.join(FILES, path.lstrip("/"))
            saved_real = os.path.join(run_dir, saved)
            os.makedirs(os.path.dirname(saved_real), mode=0o700, exist_ok=True)
            with (
                os.fdopen(open_below(root, path), "rb") as handle,
                os.fdopen(
                    open_below(run_dir, saved, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, state.mode),
                    "wb",
                ) as out,
            ):
                shutil.copyfileobj(handle, out, _CHUNK_BYTES)
                os.fchmod(out.fileno(), state.mode)
            if _sha256_below(run_dir, saved) != state.sha256:
                raise GenerationError(
                    f"{path} changed while it was being saved; run again when nothing "
                    "else writes it"
                )
            entry["before"]["saved"] = saved
        manifest["files"].append(entry)
        known.add(path)
        added.append(path)
    if added:
        write_json_atomic(os.path.join(run_dir, MANIFEST), manifest)
    return added


# --- committing --------------------------------------------------------------------


@dataclass
class CommitResult:
    generation: int | None
    changed_files: list[str] = field(default_factory=list)
    discarded_runs: list[str] = field(default_factory=list)
    pruned: list[int] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "changed_files": self.changed_files,
            "discarded_runs": self.discarded_runs,
            "pruned": self.pruned,
            "committed": self.committed,
        }


class GenerationReader:
    """Where generations are read from: the node's disk. The audit reads them on the node
    and checks them on the controller through ``generation_snapshot.SnapshotReader``,
    which answers the same three calls from what the node sent."""

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def read_json(self, path: str) -> Any:
        return _read_json(path)

    def sha256(self, path: str) -> str:
        return sha256_of(path)


DISK = GenerationReader()


def generation_numbers(
    generations_dir: str, root: str = "/", reader: GenerationSource = DISK
) -> list[int]:
    base = on_root(root, generations_dir)
    if reader is DISK and not check_tree(tree_base(generations_dir, root)):
        return []
    try:
        names = reader.listdir(base)
    except FileNotFoundError:
        return []
    return sorted(int(name) for name in names if is_generation_name(name))


def _read_optional_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _plan_in_force(root: str, plan_path: str) -> dict[str, Any]:
    text = _read_optional_text(on_root(root, plan_path))
    if text is None:
        return {"path": plan_path, "present": False}
    summary: dict[str, Any] = {
        "path": plan_path,
        "present": True,
        "sha256": hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest(),
    }
    try:
        summary["plan"] = json.loads(text)
    except ValueError as error:
        summary["parse_error"] = str(error)
    return summary


def _commit_one(
    generations_dir: str,
    run_dir: str,
    run_id: str,
    ran: Mapping[str, Any],
    *,
    root: str,
    plan_path: str,
    complete: bool,
) -> tuple[int | None, list[str]]:
    manifest = _load_pending(run_dir, run_id)
    changed_entries = []
    changed_ids: set[int] = set()
    for entry in manifest["files"]:
        after = file_state(on_root(root, entry["path"]), entry["path"])
        before = FileState.from_json(entry["before"])
        if before.same_content_and_metadata(after):
            continue
        entry["after"] = after.to_json()
        changed_entries.append(entry)
        changed_ids.add(id(entry))
    if not changed_entries and not manifest.get(UNITS_ENABLED):
        shutil.rmtree(run_dir)
        return None, []
    for entry in manifest["files"]:
        saved = entry["before"].get("saved")
        if saved and id(entry) not in changed_ids:
            os.unlink(os.path.join(run_dir, saved))
    numbers = generation_numbers(generations_dir, root)
    number = (numbers[-1] if numbers else 0) + 1
    manifest.update(
        {
            "schema": SCHEMA,
            "generation": number,
            "committed": _now(),
            "complete": complete,
            "ran": dict(ran),
            "kernel_cmdline": (_read_optional_text(on_root(root, "/proc/cmdline")) or "").strip(),
            "plan": _plan_in_force(root, plan_path),
            "files": changed_entries,
        }
    )
    write_json_atomic(os.path.join(run_dir, MANIFEST), manifest)
    os.rename(run_dir, on_root(root, os.path.join(generations_dir, str(number))))
    return number, [entry["path"] for entry in changed_entries] + [
        f"{unit} (enabled)" for unit in manifest.get(UNITS_ENABLED, [])
    ]


def _is_generation_dir(directory: str) -> bool:
    """A real directory (no link) holding a regular manifest that names it."""
    try:
        if not stat.S_ISDIR(os.lstat(directory).st_mode):
            return False
        manifest_path = os.path.join(directory, MANIFEST)
        if not stat.S_ISREG(os.lstat(manifest_path).st_mode):
            return False
        manifest = _read_json(manifest_path)
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("generation") == int(
        os.path.basename(directory)
    )


def prune(generations_dir: str, keep: int, root: str = "/") -> list[int]:
    """Remove all but the newest ``keep`` generations; returns the removed numbers. Only
    in a marked tree (own_tree), only directories that are generations."""
    if keep < 1:
        raise GenerationError(f"keep is {keep}; keep at least 1 generation")
    base = tree_base(generations_dir, root)
    if not check_tree(base) or not os.path.lexists(os.path.join(base, TREE_MARKER)):
        return []
    numbers = [
        n
        for n in generation_numbers(generations_dir, root)
        if _is_generation_dir(os.path.join(base, str(n)))
    ]
    removed = numbers[:-keep]
    for number in removed:
        shutil.rmtree(os.path.join(base, str(number)))
    return removed


def _commit_stale(
    generations_dir: str,
    pending_base: str,
    stale: Iterable[str],
    *,
    root: str,
    plan_path: str,
    result: CommitResult,
) -> None:
    for stale_id in stale:
        if not _RUN_ID.fullmatch(stale_id):
            continue
        stale_ran = {"run_id": stale_id, "note": "left open by a run that did not finish"}
        number, _ = _commit_one(
            generations_dir,
            os.path.join(pending_base, stale_id),
            stale_id,
            stale_ran,
            root=root,
            plan_path=plan_path,
            complete=False,
        )
        if number is None:
            result.discarded_runs.append(stale_id)
        else:
            result.committed.append(number)


def commit_gone_runs(
    generations_dir: str, run_id: str, *, root: str = "/", plan_path: str = DEFAULT_PLAN_PATH
) -> list[int]:
    """Commit, as incomplete generations, the open generations of runs other than
    ``run_id``, which holds the node's lock (so they are gone); their numbers."""
    from . import runlock  # noqa: PLC0415 - runlock imports generations (own_tree)

    holder = runlock.read_lock(on_root(root, generations_dir))
    if holder is not None and holder.get("run_id") != run_id:
        return []
    pending_base = on_root(root, os.path.join(generations_dir, PENDING))
    try:
        stale = sorted(name for name in os.listdir(pending_base) if name != run_id)
    except FileNotFoundError:
        return []
    result = CommitResult(generation=None)
    _commit_stale(
        generations_dir, pending_base, stale, root=root, plan_path=plan_path, result=result
    )
    return result.committed


def commit(
    generations_dir: str,
    run_id: str,
    ran: Mapping[str, Any],
    *,
    root: str = "/",
    keep: int = DEFAULT_KEEP,
    plan_path: str = DEFAULT_PLAN_PATH,
) -> CommitResult:
    """Close the run's generation: number it when something changed, else discard it.

    The run holds the node's lock (runlock) from its first recorded file, so any other open
    generation belongs to a run that is gone (it lost the lock, or never had it): those are
    committed first, each as its own generation marked ``complete: false``, never thrown
    away. While another run holds the lock, only this run's own generation is committed.
    The lock is given back at the end.
    """
    from . import runlock  # noqa: PLC0415 - runlock imports generations (own_tree)

    check_run_id(run_id)
    if keep < 1:
        raise GenerationError(f"keep is {keep}; keep at least 1 generation")
    base_real = tree_base(generations_dir, root)
    if not check_tree(base_real):
        return CommitResult(generation=None)  # no tree: no run recorded anything here
    own_tree(base_real)
    try:
        holder = runlock.read_lock(base_real)
    except runlock.LockedError as error:
        raise GenerationError(str(error)) from error
    pending_base = on_root(root, os.path.join(generations_dir, PENDING))
    try:
        stale = sorted(name for name in os.listdir(pending_base) if name != run_id)
    except FileNotFoundError:
        stale = []
    if holder is not None and holder.get("run_id") != run_id:
        stale = []
    result = CommitResult(generation=None)
    _commit_stale(
        generations_dir, pending_base, stale, root=root, plan_path=plan_path, result=result
    )
    run_dir = os.path.join(pending_base, run_id)
    if os.path.isdir(run_dir):
        number, changed = _commit_one(
            generations_dir, run_dir, run_id, ran, root=root, plan_path=plan_path, complete=True
        )
        result.generation = number
        result.changed_files = changed
        if number is None:
            result.discarded_runs.append(run_id)
        else:
            result.committed.append(number)
    result.pruned = prune(generations_dir, keep, root)
    runlock.release(base_real, run_id)
    return result


# --- reading generations -----------------------------------------------------------


@dataclass(frozen=True)
class FileChange:
    path: str
    kind: str
    before: FileState
    after: FileState
    saved: str | None
    # The file's directories that did not exist either (the write created them).
    absent_dirs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Generation:
    number: int
    directory: str
    manifest: dict[str, Any]
    changes: tuple[FileChange, ...]
    units_enabled: tuple[str, ...] = ()
    # Directories this generation (a rollback) removed, as they were.
    removed_dirs: tuple[DirState, ...] = ()
    # Directories this generation's run created (make_dir), outermost first.
    created_dirs: tuple[str, ...] = ()

    def summary(self) -> dict[str, Any]:
        return {
            "generation": self.number,
            "committed": self.manifest.get("committed"),
            "complete": self.manifest.get("complete", True),
            "run_id": self.manifest.get("run_id"),
            "ran": self.manifest.get("ran", {}),
            "kernel_cmdline": self.manifest.get("kernel_cmdline", ""),
            "files": [change.path for change in self.changes],
            "kinds": sorted({change.kind for change in self.changes}),
            "units_enabled": list(self.units_enabled),
        }


def _manifest_error(manifest_path: str, problem: str) -> GenerationError:
    return GenerationError(
        f"{manifest_path} is corrupted ({problem}); nothing was touched. Repair or remove "
        "that generation, or roll back to another one with -e rollback_to=<n>"
    )


def load_generation(  # noqa: PLR0912, PLR0915 - one check per manifest field, each with its own message
    generations_dir: str, number: int, root: str = "/", reader: GenerationSource = DISK
) -> Generation:
    """Read and check generation ``number``: manifest shape and saved copies' checksums."""
    if reader is DISK:
        check_tree(tree_base(generations_dir, root))
    directory = on_root(root, os.path.join(generations_dir, str(number)))
    manifest_path = os.path.join(directory, MANIFEST)
    try:
        manifest = reader.read_json(manifest_path)
    except FileNotFoundError as error:
        raise GenerationError(
            f"generation {number} does not exist ({manifest_path} is missing); nothing was "
            "touched. List the node's generations with the lingbot_generation module "
            "(action: list)"
        ) from error
    except (OSError, ValueError) as error:
        raise _manifest_error(manifest_path, str(error)) from error
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise _manifest_error(manifest_path, f"not a schema {SCHEMA} manifest")
    if manifest.get("generation") != number:
        raise _manifest_error(
            manifest_path, f"it says generation {manifest.get('generation')!r}, not {number}"
        )
    files = manifest.get("files")
    if not isinstance(files, list):
        raise _manifest_error(manifest_path, f"'files' is {files!r}, not a list of file entries")
    changes = []
    for position, entry in enumerate(files):
        try:
            if not isinstance(entry, dict):
                raise TypeError(f"{entry!r} is not a mapping")
            path = _check_node_path(entry["path"])
            before = FileState.from_json(entry["before"])
            after = FileState.from_json(entry["after"])
            saved = entry["before"].get("saved") if before.exists else None
            if saved is not None and not isinstance(saved, str):
                raise TypeError(f"saved {saved!r} is not a path")
            changes.append(
                FileChange(path, kind_of(path), before, after, saved, _absent_dirs_of(entry, path))
            )
        except KeyError as error:
            raise _manifest_error(manifest_path, f"file entry {position} lacks {error}") from error
        except (AttributeError, TypeError, ValueError, GenerationError) as error:
            raise _manifest_error(manifest_path, f"file entry {position}: {error}") from error
    for change in changes:
        if change.saved is None:
            continue
        saved_real = os.path.join(directory, change.saved)
        if (
            os.path.isabs(change.saved)
            or os.path.normpath(saved_real) != saved_real
            or os.path.commonpath([saved_real, directory]) != directory
        ):
            raise _manifest_error(manifest_path, f"saved copy {change.saved!r} is outside it")
        try:
            if reader is DISK:
                actual = _sha256_below(directory, change.saved)
            else:
                actual = reader.sha256(saved_real)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise GenerationError(
                    f"generation {number}: the saved copy of {change.path} is, or lies below, "
                    "a symbolic link, and a generation holds only regular files in real "
                    "directories; nothing was touched. The generation is damaged or was "
                    "planted: roll back to another one with -e rollback_to=<n>"
                ) from error
            raise GenerationError(
                f"generation {number}: the saved copy of {change.path} cannot be read "
                f"({error.strerror}); nothing was touched. Roll back to another generation "
                "with -e rollback_to=<n>"
            ) from error
        if actual != change.before.sha256:
            raise GenerationError(
                f"generation {number}: the saved copy of {change.path} has checksum "
                f"{actual}, the manifest says {change.before.sha256}; nothing was touched. "
                "The generation is damaged: roll back to another one with -e rollback_to=<n>"
            )
    enabled = manifest.get(UNITS_ENABLED, [])
    if not isinstance(enabled, list) or not all(
        isinstance(unit, str) and _UNIT_NAME.match(unit) for unit in enabled
    ):
        raise _manifest_error(
            manifest_path, f"'{UNITS_ENABLED}' is {enabled!r}, not a list of unit names"
        )
    try:
        removed = tuple(DirState.from_json(entry) for entry in manifest.get(REMOVED_DIRS, []))
    except (TypeError, ValueError, GenerationError) as error:
        raise _manifest_error(manifest_path, f"'{REMOVED_DIRS}': {error}") from error
    created = manifest.get(CREATED_DIRS, [])
    try:
        if not isinstance(created, list) or not all(isinstance(d, str) for d in created):
            raise TypeError(f"{created!r} is not a list of paths")
        created = [_check_node_path(d) for d in created]
    except (TypeError, GenerationError) as error:
        raise _manifest_error(manifest_path, f"'{CREATED_DIRS}': {error}") from error
    return Generation(
        number, directory, manifest, tuple(changes), tuple(enabled), removed, tuple(created)
    )


def _absent_dirs_of(entry: Mapping[str, Any], path: str) -> tuple[str, ...]:
    """The entry's ``before.absent_dirs``, checked: directories above ``path``."""
    absent = entry["before"].get("absent_dirs", [])
    if not isinstance(absent, list) or not all(isinstance(d, str) for d in absent):
        raise TypeError(f"absent_dirs {absent!r} is not a list of paths")
    dirs = tuple(_check_node_path(d) for d in absent)
    if any(not path.startswith(d.rstrip("/") + "/") for d in dirs):
        raise ValueError(f"absent_dirs {absent!r} are not all directories above {path}")
    return dirs


def list_generations(
    generations_dir: str, root: str = "/", reader: GenerationSource = DISK
) -> list[dict[str, Any]]:
    """Every generation's summary, oldest first; a damaged one carries its error."""
    rows = []
    for number in generation_numbers(generations_dir, root, reader):
        try:
            generation = load_generation(generations_dir, number, root, reader)
            rows.append({**generation.summary(), "ok": True})
        except GenerationError as error:
            rows.append({"generation": number, "ok": False, "error": str(error)})
    return rows


# --- rollback ----------------------------------------------------------------------


@dataclass(frozen=True)
class Restore:
    """One file to bring back: its state now and the state it must have."""

    path: str
    kind: str
    current: FileState
    desired: FileState
    source_generation: int
    saved_real: str | None
    # Directories above the file that did not exist when the file did not either.
    absent_dirs: tuple[str, ...] = ()

    @property
    def action(self) -> str:
        if not self.desired.exists:
            return "remove" if self.current.exists else "none"
        return "none" if self.desired.same_content_and_metadata(self.current) else "write"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "action": self.action,
            "from_generation": self.source_generation,
            "current": self.current.to_json(),
            "restored": self.desired.to_json(),
        }


@dataclass(frozen=True)
class RollbackPlan:
    target: int
    newest: int
    undone: tuple[int, ...]
    restores: tuple[Restore, ...]
    # Secrets the generations hold no copy of: left as they are (see SECRET_FILE_NAMES).
    kept_secrets: tuple[str, ...] = ()
    # Units an undone generation enabled (they were not enabled before it).
    units_disabled: tuple[str, ...] = ()
    # Directories the undone generations created that are empty once their files are
    # removed, deepest first: the rollback removes them too.
    dirs_to_remove: tuple[str, ...] = ()
    # Directories an undone rollback removed, as they were: recreated when a restored
    # file needs them.
    removed_dirs: tuple[DirState, ...] = ()
    # Directories the undone generations made themselves (make_dir), outermost first.
    created_dirs: tuple[str, ...] = ()
    # Files no generation recorded that the rollback removes too (see with_outputs_removed).
    outputs_to_remove: tuple[str, ...] = ()

    @property
    def to_change(self) -> list[Restore]:
        return [restore for restore in self.restores if restore.action != "none"]

    @property
    def needs_action(self) -> bool:
        return bool(
            self.to_change or self.units_disabled or self.dirs_to_remove or self.outputs_to_remove
        )

    def effects(self) -> dict[str, Any]:
        """What must follow the restore: bootloader update, daemon-reload, restarts."""
        changed = self.to_change
        kinds = {restore.kind for restore in changed}
        stop = sorted(set(units_to_stop(changed)) | set(self.units_disabled))
        return {
            "grub_changed": KIND_GRUB in kinds,
            "units_changed": KIND_UNIT in kinds,
            "services_to_restart": [
                unit
                for unit in _timer_for_timed_services(
                    services_to_restart(r.path for r in changed), changed
                )
                if unit not in stop
            ],
            "units_to_stop": stop,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "newest": self.newest,
            "undone": list(self.undone),
            "files": [restore.to_json() for restore in self.restores],
            "dirs_removed": list(self.dirs_to_remove),
            "outputs_removed": list(self.outputs_to_remove),
            "kept_secrets": list(self.kept_secrets),
            **self.effects(),
        }


def services_to_restart(paths: Iterable[str]) -> list[str]:
    """Services whose unit, drop-in or LingBot instance files are among ``paths``."""
    services: set[str] = set()
    for path in paths:
        if path.startswith(_LINGBOT_DIR):
            parts = path[len(_LINGBOT_DIR) :].split("/")
            if len(parts) >= 2 and parts[0]:
                services.add(lingbot_layout.unit_name(parts[0]))
            continue
        for unit_dir in _UNIT_DIRS:
            if not path.startswith(unit_dir):
                continue
            name = path[len(unit_dir) :].split("/")[0]
            if name.endswith(".d"):
                name = name[:-2]
            if name.endswith(".service") and not name.endswith("@.service"):
                services.add(name)
    return sorted(services)


def _timer_for_timed_services(services: list[str], restores: Iterable[Restore]) -> list[str]:
    """A service run by a timer restored with it is (re)started through its timer."""
    timers = {
        os.path.basename(restore.path)
        for restore in restores
        if restore.path.endswith(".timer") and restore.action == "write"
    }
    units = {
        f"{service[: -len('.service')]}.timer"
        if f"{service[: -len('.service')]}.timer" in timers
        else service
        for service in services
    }
    return sorted(units | timers)


def units_to_stop(restores: Iterable[Restore]) -> list[str]:
    """Units the rollback takes away: their unit file, or for a LingBot instance its
    drop-in or config, did not exist in the restored generation. They are stopped and
    disabled (`systemctl disable --now` works once the file is gone)."""
    units: set[str] = set()
    for restore in restores:
        if restore.action != "remove":
            continue
        path = restore.path
        if path.startswith(_LINGBOT_DIR):
            parts = path[len(_LINGBOT_DIR) :].split("/")
            if len(parts) == 2 and parts[1] == "config.yaml":
                units.add(lingbot_layout.unit_name(parts[0]))
            continue
        for unit_dir in _UNIT_DIRS:
            if not path.startswith(unit_dir):
                continue
            name, _, rest = path[len(unit_dir) :].partition("/")
            if name.endswith((".service", ".timer")) and not rest and "@." not in name:
                units.add(name)
            elif (
                name.startswith(f"{lingbot_layout.SERVICE}@")
                and name.endswith(".service.d")
                and rest
            ):
                units.add(name[: -len(".d")])
    return sorted(units)


def plan_rollback(  # noqa: PLR0912 - one branch per refusal of an unsafe or unknown target, each with its own message
    generations_dir: str,
    target: int | None = None,
    force: bool = False,
    root: str = "/",
    also_restorable: Sequence[str] = (),
) -> RollbackPlan:
    """Decide what a rollback to ``target`` restores; raise before touching anything.
    Only files the toolkit writes are restored (is_restorable, with ``also_restorable``)."""
    numbers = generation_numbers(generations_dir, root)
    base = on_root(root, generations_dir)
    if not numbers:
        raise GenerationError(
            f"no generation in {base}: the toolkit has changed nothing on this node yet, so "
            "there is nothing to roll back; nothing was touched"
        )
    newest = numbers[-1]
    if target is None:
        target = newest - 1
    oldest_restorable = numbers[0] - 1
    if not oldest_restorable <= target <= newest:
        raise GenerationError(
            f"rollback_to={target} is out of range: this node has generations "
            f"{numbers[0]}..{newest}, so it can go back to {oldest_restorable}..{newest} "
            "(n means: as the node was right after generation n; 0 is before the first); "
            "nothing was touched"
        )
    if target == newest:
        # The node is as its newest generation left it: nothing to restore.
        return RollbackPlan(target, newest, (), ())
    undone = [n for n in numbers if n > target]
    missing = sorted(set(range(target + 1, newest + 1)) - set(undone))
    if missing:
        raise GenerationError(
            f"generations {missing} are missing from {base}, so the node cannot be brought "
            f"back to generation {target}; choose rollback_to={missing[-1]} or later; "
            "nothing was touched"
        )
    generations = [load_generation(generations_dir, n, root) for n in undone]
    also = [os.path.normpath(p) for p in also_restorable if str(p).startswith("/")]
    for generation in generations:
        for change in generation.changes:
            if not is_restorable(change.path, also):
                raise GenerationError(
                    f"generation {generation.number} holds an entry for {change.path}, which no "
                    "role of the toolkit writes (nor generations_record_paths names); nothing "
                    f"was touched. Someone else wrote {generation.directory}: look at it, "
                    "remove it, and roll back to another generation with -e rollback_to=<n>"
                )
    earliest: dict[str, tuple[Generation, FileChange]] = {}
    latest_after: dict[str, FileState] = {}
    for generation in generations:
        for change in generation.changes:
            earliest.setdefault(change.path, (generation, change))
            latest_after[change.path] = change.after
    restores = []
    drifted = []
    kept = []
    for path, (generation, change) in sorted(earliest.items()):
        linked = linked_dir_above(root, path)
        if linked is not None:
            raise GenerationError(
                f"{linked} is a symbolic link, so restoring {path} would write where it leads; "
                f"nothing was touched. Replace the link with the directory it stands for, "
                "then roll back again"
            )
        current = file_state(on_root(root, path), path)
        if is_secret(path) and change.before.exists:
            kept.append(path)
            continue
        expected = latest_after[path]
        if not expected.same_content_and_metadata(current):
            drifted.append(path)
        saved_real = os.path.join(generation.directory, change.saved) if change.saved else None
        restores.append(
            Restore(
                path,
                change.kind,
                current,
                change.before,
                generation.number,
                saved_real,
                change.absent_dirs,
            )
        )
    if drifted and not force:
        raise GenerationError(
            "changed since the toolkit last wrote them: "
            + ", ".join(drifted)
            + "; nothing was touched. Look at the changes, then roll back anyway with "
            "-e rollback_force=true, or choose another generation with -e rollback_to=<n>"
        )
    disabled = sorted({unit for generation in generations for unit in generation.units_enabled})
    removed: dict[str, DirState] = {}
    for generation in reversed(generations):  # the oldest removal wins: as it was first
        removed.update((state.path, state) for state in generation.removed_dirs)
    created = tuple(d for generation in generations for d in generation.created_dirs)
    return RollbackPlan(
        target,
        newest,
        tuple(undone),
        tuple(restores),
        tuple(kept),
        tuple(disabled),
        _dirs_left_empty(restores, created, root),
        tuple(removed[path] for path in sorted(removed)),
        created,
    )


def with_outputs_removed(plan: RollbackPlan, outputs: Iterable[str], root: str) -> RollbackPlan:
    """The plan that also removes ``outputs``: files no generation recorded that go with
    what the rollback takes away (what a unit it disables wrote). The directories left
    empty are counted again with them gone."""
    outputs = tuple(sorted(set(outputs)))
    if not outputs:
        return plan
    return replace(
        plan,
        outputs_to_remove=outputs,
        dirs_to_remove=_dirs_left_empty(plan.restores, plan.created_dirs, root, outputs),
    )


def _dirs_left_empty(
    restores: Iterable[Restore],
    created_dirs: Iterable[str],
    root: str,
    also_removed: Iterable[str] = (),
) -> tuple[str, ...]:
    """The directories the undone generations created (for a file, or made as such) that
    hold nothing else once the files restored away (and ``also_removed``) are gone
    (deepest first)."""
    restores = list(restores)
    gone = {r.path for r in restores if not r.desired.exists} | set(also_removed)
    candidates = sorted(
        {d for r in restores if not r.desired.exists for d in r.absent_dirs} | set(created_dirs),
        key=lambda d: (-d.count("/"), d),
    )
    for directory in candidates:  # deepest first: an emptied child counts as gone
        real = on_root(root, directory)
        if os.path.islink(real) or not os.path.isdir(real):
            continue
        with contextlib.suppress(OSError):
            if holds_only(real, directory, gone):
                gone.add(directory)
    return tuple(d for d in candidates if d in gone)


def holds_only(real: str, directory: str, paths: Collection[str]) -> bool:
    """Whether ``directory`` (found at ``real`` on this machine) holds nothing but
    ``paths``: empty once they are removed. OSError when it cannot be listed."""
    return all(os.path.join(directory, name) in paths for name in os.listdir(real))


def apply_rollback(
    plan: RollbackPlan,
    generations_dir: str,
    run_id: str,
    root: str = "/",
    before_swap: Callable[[], None] | None = None,
) -> list[str]:
    """Restore the files (``swap_restored``), then remove the directories left empty
    (``remove_emptied_dirs``). Returns the paths changed."""
    swapped = swap_restored(plan, generations_dir, run_id, root, before_swap)
    return swapped + remove_emptied_dirs(plan.dirs_to_remove, generations_dir, run_id, root)


def swap_restored(
    plan: RollbackPlan,
    generations_dir: str,
    run_id: str,
    root: str = "/",
    before_swap: Callable[[], None] | None = None,
) -> list[str]:
    """Record the current files in the run's generation, then restore them.

    Every restored file is staged next to its target first; only when all are staged does
    ``before_swap`` run (the rollback notes its effects and stops the units it takes
    away there, while their files still exist), then the renames and removals happen.
    Returns the paths changed.
    """
    changes = plan.to_change
    record_before(generations_dir, run_id, [restore.path for restore in changes], root)
    staged: list[tuple[str, str]] = []
    made_dirs: list[str] = []
    try:
        for restore in changes:
            if restore.action == "write" and restore.saved_real is not None:
                target = on_root(root, restore.path)
                _make_parents(root, restore.path, plan.removed_dirs, made_dirs)
                generation_real = on_root(
                    root, os.path.join(generations_dir, str(restore.source_generation))
                )
                source = (generation_real, os.path.relpath(restore.saved_real, generation_real))
                staged.append((_copy_with_state(source, target, restore.desired), target))
    except OSError as error:
        for temp_path, _ in staged:
            os.unlink(temp_path)
        for made in reversed(made_dirs):
            with contextlib.suppress(OSError):
                os.rmdir(made)
        raise GenerationError(
            f"cannot stage the restored files ({error}); nothing was touched"
        ) from error
    if before_swap is not None:
        try:
            before_swap()
        except BaseException:
            for temp_path, _ in staged:
                os.unlink(temp_path)
            raise
    for temp_path, target in staged:
        os.replace(temp_path, target)
    for restore in changes:
        if restore.action == "remove":
            os.unlink(on_root(root, restore.path))
    return [restore.path for restore in changes]


def _make_parents(root: str, path: str, removed: Iterable[DirState], made: list[str]) -> None:
    """Create the missing directories above ``path``, with the mode and owner an undone
    rollback recorded when it removed them (0755 root otherwise); each real path made is
    appended to ``made`` as soon as it exists."""
    states = {state.path: state for state in removed}
    for directory in absent_dirs(root, path):
        real = on_root(root, directory)
        state = states.get(directory, DirState(directory, 0o755, 0, 0))
        os.mkdir(real, 0o700)
        made.append(real)
        os.chown(real, state.uid, state.gid)
        os.chmod(real, state.mode)


def remove_emptied_dirs(
    dirs: Sequence[str], generations_dir: str, run_id: str, root: str = "/"
) -> list[str]:
    """Remove the (empty) directories, deepest first, each noted first with its mode and
    owner in the run's generation so undoing this rollback makes it again as it was. A
    directory that is gone already, or no longer empty, is left. Returns those removed."""
    states = []
    for directory in dirs:
        try:
            info = os.lstat(on_root(root, directory))
        except OSError:
            continue
        states.append(DirState(directory, stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid))
    if not states:
        return []
    run_dir = pending_dir(generations_dir, run_id, root)
    manifest = _load_pending(run_dir, run_id)
    # A removal cut off and finished by a later run keeps what the first one noted.
    noted = {entry["path"]: entry for entry in manifest.get(REMOVED_DIRS) or []}
    noted.update((state.path, state.to_json()) for state in states if state.path not in noted)
    manifest[REMOVED_DIRS] = list(noted.values())
    write_json_atomic(os.path.join(run_dir, MANIFEST), manifest)
    removed = []
    for state in states:
        try:
            os.rmdir(on_root(root, state.path))
        except OSError:
            continue
        removed.append(state.path)
    return removed
