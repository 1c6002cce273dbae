"""Every change a module makes on a node goes through one ``NodeChanges``.

Stdlib-only: runs on nodes (shipped as ``ansible.module_utils.lingbot_fleet.node.nodefiles``).

A module builds the files it wants in memory, then hands each to ``NodeChanges``, which

- compares it with what is on disk (content, mode, owner, group) and does nothing when
  they agree, so a compliant node is not touched;
- saves the current file into the run's open generation (``generations.record_before``)
  before the first change to it, when the module was given a run id (else, when given a
  ``backup_dir``, copies it to ``<backup_dir>/<timestamp>/<path>``);
- writes it through a temp file in the target directory, validated there first when a
  validator is given, then renamed over the target (``write_atomic``);
- in check mode does none of that but still reports what it would do, so check mode is
  right by construction;
- collects Ansible ``diff`` entries and a sentence per action for the module's result.

Commands with side effects (update-grub, systemctl) go through ``run`` for the same reason.

It also records what the call depended on: every path it read, wrote or removed, every
directory whose entries it listed, every unit it ran systemctl on (``watched``). That record
is what the module's receipt watches (``receipts.keep``), so a file a module starts to
write is covered without anyone adding it to a list. A decision read that is no write (the
model's config.json, /etc/passwd) goes through ``read``, ``exists`` or ``listdir`` for the
same reason.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .atomic import write_atomic, write_json_atomic
from .state_dirs import GENERATIONS_DIR

__all__ = [
    "GENERATION_ARGUMENT_SPEC",
    "NodeChanges",
    "NodeFileError",
    "run_command",
    "write_atomic",
    "write_json_atomic",
]

# Text shown in diffs is cut at this size: a diff is for people, not a copy of the file.
_DIFF_MAX_BYTES = 64 * 1024
_C_LOCALE = {"LC_ALL": "C", "LANG": "C"}


# The options of every module that writes through NodeChanges (documented by the doc
# fragment lingbot_generation); ``NodeChanges.for_module`` reads them.
GENERATION_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "generation_run_id": {"type": "str"},
    "generations_dir": {"type": "path", "default": GENERATIONS_DIR},
    "generations_live_runs": {"type": "list", "elements": "str"},
}


class NodeFileError(Exception):
    """A change that could not be made; what was already written is listed in the error."""


def _uid(owner: str | int) -> int:
    if isinstance(owner, int):
        return owner
    try:
        return pwd.getpwnam(owner).pw_uid
    except KeyError as error:
        raise NodeFileError(f"user {owner!r} does not exist on this node") from error


def _gid(group: str | int) -> int:
    if isinstance(group, int):
        return group
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError as error:
        raise NodeFileError(f"group {group!r} does not exist on this node") from error


def _diff_text(data: bytes | None) -> str:
    if data is None:
        return ""
    if b"\0" in data[:8192]:
        return "(binary content)\n"
    text = data[:_DIFF_MAX_BYTES].decode("utf-8", errors="replace")
    if len(data) > _DIFF_MAX_BYTES:
        text += f"\n(cut at {_DIFF_MAX_BYTES} bytes)\n"
    return text


@dataclass
class CommandResult:
    rc: int
    stdout: str
    stderr: str


@dataclass
class Watched:
    """What a module call depended on, in the order first seen: node paths (read, written,
    removed or tested), directories whose entries it listed, units it ran systemctl on."""

    paths: list[str] = field(default_factory=list)
    listings: list[str] = field(default_factory=list)
    units: list[str] = field(default_factory=list)

    def path(self, path: str) -> None:
        if path not in self.paths:
            self.paths.append(path)

    def listing(self, path: str) -> None:
        if path not in self.listings:
            self.listings.append(path)

    def unit(self, name: str) -> None:
        if name not in self.units:
            self.units.append(name)

    def command(self, argv: Sequence[str]) -> None:
        """The units a systemctl command names (words with a unit suffix, not options)."""
        if not argv or os.path.basename(argv[0]) != "systemctl":
            return
        for word in argv[2:]:
            if not word.startswith("-") and word.rpartition(".")[2] in _UNIT_SUFFIXES:
                self.unit(word)


_UNIT_SUFFIXES = frozenset(
    {"service", "timer", "socket", "target", "path", "mount", "slice", "scope", "device"}
)


@dataclass
class NodeChanges:
    """The changes of one module call: done outside check mode, reported in both."""

    check_mode: bool
    root: str = "/"
    generations_dir: str | None = None
    run_id: str | None = None
    actions: list[str] = field(default_factory=list)
    changed_paths: list[str] = field(default_factory=list)
    diffs: list[dict[str, str]] = field(default_factory=list)
    recorded: list[str] = field(default_factory=list)
    # Outside a generation (a module used on its own): where previous versions are copied.
    backup_dir: str | None = None
    backup_stamp: str = field(default_factory=lambda: time.strftime("%Y%m%dT%H%M%S"))
    backups: list[str] = field(default_factory=list)
    # The node's run lock (runlock): taken before the first file is saved into the run's
    # generation. live_runs: this controller's runs still running (generations_live_runs).
    live_runs: list[str] | None = None
    lock_ttl_s: float | None = None  # None: runlock.DEFAULT_TTL_S
    lock_notes: list[str] = field(default_factory=list)
    _lock_held: bool = False
    # What the call read, wrote, removed, listed or ran systemctl on (see ``Watched``).
    watched: Watched = field(default_factory=Watched)

    @classmethod
    def for_module(
        cls, params: Mapping[str, Any], check_mode: bool, root: str = "/", **extra: Any
    ) -> NodeChanges:
        """The NodeChanges of a module call, from the GENERATION_ARGUMENT_SPEC options."""
        return cls(
            check_mode=check_mode,
            root=root,
            generations_dir=params["generations_dir"],
            run_id=params["generation_run_id"],
            live_runs=params["generations_live_runs"],
            **extra,
        )

    @property
    def changed(self) -> bool:
        return bool(self.actions)

    def real(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _record(self, path: str) -> None:
        """Save the file's current state into the run's generation, once per run."""
        if self.check_mode:
            return
        if not self.run_id or not self.generations_dir:
            self._backup(path)
            return
        # Imported here: a module call that writes nothing does not pay for them.
        from . import generations  # noqa: PLC0415

        self._hold_lock()
        try:
            added = generations.record_before(
                self.generations_dir, self.run_id, [path], root=self.root
            )
        except generations.GenerationError as error:
            raise NodeFileError(f"{path} was not changed: {error}") from error
        self.recorded.extend(added)

    def _hold_lock(self) -> None:
        if self._lock_held or not self.run_id or not self.generations_dir:
            return
        from . import runlock  # noqa: PLC0415 - only a call that writes takes the lock

        try:
            taken = runlock.take(
                self.real(self.generations_dir),
                self.run_id,
                live_runs=self.live_runs,
                ttl_s=runlock.DEFAULT_TTL_S if self.lock_ttl_s is None else self.lock_ttl_s,
            )
        except runlock.LockedError as error:
            raise NodeFileError(f"nothing was changed: {error}") from error
        if taken.replaced_run:
            self.lock_notes.append(
                f"took the node's lock over from run {taken.replaced_run} "
                f"({taken.replaced_reason}); its open generation is committed as incomplete "
                "with this run's"
            )
        self._lock_held = True

    def _backup(self, path: str) -> None:
        if not self.backup_dir:
            return
        saved = self.real(os.path.join(self.backup_dir, self.backup_stamp, path.lstrip("/")))
        if saved in self.backups or not os.path.isfile(self.real(path)):
            return
        os.makedirs(os.path.dirname(saved), mode=0o700, exist_ok=True)
        shutil.copy2(self.real(path), saved)
        self.backups.append(saved)

    def _note_dirs_created(self, path: str) -> None:
        """Note the directories about to be made in the run's generation (a rollback past it
        removes them again once empty)."""
        if not self.run_id or not self.generations_dir:
            return
        from . import generations  # noqa: PLC0415

        self._hold_lock()
        try:
            generations.note_dirs_created(self.generations_dir, self.run_id, path, self.root)
        except generations.GenerationError as error:
            raise NodeFileError(f"{path} was not created: {error}") from error

    def enable_unit(self, systemctl: str, unit: str) -> CommandResult:
        """``systemctl enable`` a unit that is not enabled, noted first in the run's
        generation, so a rollback past it disables and stops the unit again."""
        if not self.check_mode and self.run_id and self.generations_dir:
            from . import generations  # noqa: PLC0415

            self._hold_lock()
            try:
                if generations.note_unit_enabled(
                    self.generations_dir, self.run_id, unit, root=self.root
                ):
                    self.recorded.append(f"{unit} (enabled)")
            except generations.GenerationError as error:
                raise NodeFileError(f"{unit} was not enabled: {error}") from error
        return self.run([systemctl, "enable", unit], f"enable {unit}")

    def record(self, paths: Sequence[str]) -> None:
        """Save files that a command run next changes (``run``) as a write would."""
        for path in paths:
            self.watched.path(path)
            self._record(path)

    def _ids(self, owner: str | int, group: str | int) -> tuple[int | None, int | None]:
        """Numeric owner and group. In check mode a user or group that an earlier step of
        the same call would create is None (so the file counts as changing)."""
        ids: list[int | None] = []
        for lookup, name in ((_uid, owner), (_gid, group)):
            try:
                ids.append(lookup(name))
            except NodeFileError:
                if not self.check_mode:
                    raise
                ids.append(None)
        return ids[0], ids[1]

    def _done(self, path: str, sentence: str) -> None:
        self.actions.append(sentence if not self.check_mode else f"would {sentence}")
        if path not in self.changed_paths:
            self.changed_paths.append(path)

    # --- files -------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        """Whether the path exists (a decision read: the path is watched)."""
        self.watched.path(path)
        return os.path.lexists(self.real(path))

    def listdir(self, path: str) -> list[str]:
        """The sorted entries of a directory ([] when there is none); its listing is
        watched, so an entry created, removed or renamed there moves the receipt."""
        self.watched.listing(path)
        try:
            return sorted(os.listdir(self.real(path)))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def note_read(self, path: str) -> None:
        """A path the call decided from through another reader (the account database, the
        planner's reads): watched as if read here."""
        self.watched.path(path)

    def watch_unit(self, name: str) -> None:
        """A unit the call decided from without running systemctl on it (a state read)."""
        self.watched.unit(name)

    def read(self, path: str) -> bytes | None:
        """The file's bytes (None when absent); the path is watched."""
        self.watched.path(path)
        try:
            with open(self.real(path), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def write_file(
        self,
        path: str,
        content: bytes | str,
        *,
        mode: int = 0o644,
        owner: str | int = "root",
        group: str | int = "root",
        validate: Callable[[str], None] | None = None,
        secret: bool = False,
    ) -> bool:
        """Make ``path`` hold ``content`` with this mode and owner; True when it changed.

        ``secret`` keeps the content out of the diff. ``validate`` sees the temp file
        (check mode included, when the target directory exists) and raises to refuse it.
        """
        data = content.encode("utf-8") if isinstance(content, str) else content
        real = self.real(path)
        if os.path.islink(real):
            # Never through a link (even a dangling one): as root, that writes wherever it
            # points. A module that means to write a link's target resolves it first.
            raise NodeFileError(
                f"{path} is a symbolic link; lingbot-fleet writes only regular files there. "
                "Remove the link and run again"
            )
        current = self.read(path)
        uid, gid = self._ids(owner, group)
        if current is not None:
            info = os.lstat(real)
            if not stat.S_ISREG(info.st_mode):
                raise NodeFileError(f"{path} is not a regular file; move it away and run again")
            same_meta = (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (mode, uid, gid)
            if current == data and same_meta:
                return False
        if self.check_mode:
            if validate is not None and os.path.isdir(os.path.dirname(real)):
                self._validate_only(real, data, validate)
        else:
            self._record(path)
            write_atomic(real, data, mode=mode, uid=uid, gid=gid, validate=validate)
        if current == data:
            self._done(path, f"set mode {mode:04o} and owner {owner}:{group} of {path}")
        else:
            self._done(path, f"{'create' if current is None else 'update'} {path}")
            self.diffs.append(
                {
                    "before_header": path if current is not None else f"{path} (absent)",
                    "after_header": path,
                    "before": "(secret)\n" if secret and current else _diff_text(current),
                    "after": "(secret)\n" if secret else _diff_text(data),
                }
            )
        return True

    @staticmethod
    def _validate_only(real: str, data: bytes, validate: Callable[[str], None]) -> None:
        descriptor, temp_path = tempfile.mkstemp(
            prefix=f".{os.path.basename(real)}.", suffix=".tmp", dir=os.path.dirname(real)
        )
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
            validate(temp_path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temp_path)

    def remove_file(self, path: str) -> bool:
        """Remove ``path`` (saved into the generation first); True when it existed."""
        real = self.real(path)
        current = self.read(path)
        if current is None:
            return False
        if not self.check_mode:
            self._record(path)
            os.unlink(real)
        self._done(path, f"remove {path}")
        self.diffs.append(
            {
                "before_header": path,
                "after_header": f"{path} (absent)",
                "before": _diff_text(current),
                "after": "",
            }
        )
        return True

    def remove_empty_dir(self, path: str) -> bool:
        """Remove the directory when it exists and is empty (or would be after removals)."""
        from .generations import holds_only  # noqa: PLC0415

        real = self.real(path)
        self.watched.path(path)
        if not os.path.isdir(real) or not holds_only(real, path, self.changed_paths):
            return False
        if not self.check_mode:
            os.rmdir(real)
        self._done(path, f"remove the directory {path}")
        return True

    def make_dir(
        self, path: str, *, mode: int = 0o755, owner: str | int = "root", group: str | int = "root"
    ) -> bool:
        """Make ``path`` a directory with this mode and owner; True when it changed."""
        real = self.real(path)
        self.watched.path(path)
        uid, gid = self._ids(owner, group)
        try:
            info = os.lstat(real)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISDIR(info.st_mode):
            raise NodeFileError(f"{path} exists and is not a directory; move it away")
        if info is not None and (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (
            mode,
            uid,
            gid,
        ):
            return False
        if not self.check_mode:
            if info is None:
                self._note_dirs_created(path)
            os.makedirs(real, mode=mode, exist_ok=True)
            os.chmod(real, mode)
            # Outside check mode _ids raises rather than return None.
            os.chown(real, uid, gid)  # type: ignore[arg-type]
        verb = "create" if info is None else "set mode and owner of"
        self._done(path, f"{verb} the directory {path}")
        return True

    def remove_tree(self, path: str, files: Sequence[str]) -> bool:
        """Remove a directory the toolkit made; its ``files`` are saved first, one by one.

        Refuses when the directory holds anything but ``files`` (then it is not only ours).
        """
        real = self.real(path)
        self.watched.path(path)
        self.watched.listing(path)
        if not os.path.isdir(real):
            return False
        ours = {os.path.relpath(f, path) for f in files}
        for dirpath, _dirs, names in os.walk(real):
            for name in names:
                relative = os.path.relpath(os.path.join(dirpath, name), real)
                if relative not in ours:
                    raise NodeFileError(
                        f"{path} holds {relative}, which lingbot-fleet did not write; "
                        "it was left in place. Move that file away to let the directory go"
                    )
        for file_path in files:
            self.remove_file(file_path)
        if not self.check_mode:
            shutil.rmtree(real)
        self._done(path, f"remove the directory {path}")
        return True

    # --- commands ----------------------------------------------------------------

    def run(self, argv: Sequence[str], sentence: str, *, check: bool = True) -> CommandResult:
        """Run a command that changes the node; in check mode only say it would run. The
        units a systemctl command names are watched."""
        self.watched.command(argv)
        self.actions.append(sentence if not self.check_mode else f"would {sentence}")
        if self.check_mode:
            return CommandResult(0, "", "")
        return run_command(argv, check=check)

    def result(self) -> dict[str, Any]:
        """The keys every writing module returns."""
        out: dict[str, Any] = {
            "changed": self.changed,
            "actions": list(self.actions),
            "changed_paths": list(self.changed_paths),
            "diff": list(self.diffs),
        }
        if self.recorded:
            # Tells the play's last task (generations) that this run has something to commit.
            out["ansible_facts"] = {"lingbot_generation_pending": self.run_id}
        if self.backups:
            out["backups"] = list(self.backups)
        if self.lock_notes:
            out["lock_notes"] = list(self.lock_notes)
        return out


def run_command(argv: Sequence[str], *, check: bool = True) -> CommandResult:
    """Run argv in the C locale; with ``check``, NodeFileError naming it when it fails."""
    environment = dict(os.environ, **_C_LOCALE)
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, check=False, env=environment
        )
    except FileNotFoundError as error:
        raise NodeFileError(f"{argv[0]} is not installed on this node ({error})") from error
    result = CommandResult(done.returncode, done.stdout, done.stderr)
    if check and done.returncode != 0:
        raise NodeFileError(
            f"{' '.join(argv)} failed with exit status {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[-2000:]}"
        )
    return result
