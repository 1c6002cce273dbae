"""The one-step rollback of a node, safe to run again after any failure.

Stdlib-only: runs on nodes (the generations role's module). One call, under the node's
run lock (``runlock``):

1. An earlier rollback that was cut off after it had restored the files (killed, or one of
   its commands failed) is finished first: the effects it still owed the node are run and
   nothing else is rolled back, so running rollback.yml again completes the rollback
   instead of undoing it.
2. Otherwise ``generations.plan_rollback`` decides what to restore, and raises before
   anything is touched. The files are saved into this run's generation and staged; only
   then are the effects noted in the run's open manifest (``effects_pending``) and the
   units the rollback takes away stopped and disabled (their files still exist); then the
   files are swapped in.
3. The effects run in order, each cleared from the manifest once it ran: remove the
   outputs of the units taken away (the monitor's metrics and fallback flag), then the
   directories the undone generations created, now empty; regenerate grub.cfg (Debian
   family; the RedHat family's boot entries are restored byte for byte), daemon-reload,
   restart the services whose files came back (skipped when the node reboots next: the
   boot starts them), and wait until they are active.
4. The run's generation is committed (the lock is given back), and the result says
   whether the restored kernel command line needs a reboot.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..boot import bootloader
from ..boot.grub import next_boot, reboot_pending
from . import generations, runlock
from .nodefiles import NodeChanges, NodeFileError, run_command
from .systemd import parse_properties

EFFECTS_KEY = "effects_pending"
SWAPPED_KEY = "rollback_swapped"


class RollbackError(Exception):
    """The rollback stopped; str() says where, what is left and how to finish it."""


@dataclass
class RollbackRequest:
    generations_dir: str
    run_id: str
    root: str = "/"
    target: int | None = None
    force: bool = False
    keep: int = generations.DEFAULT_KEEP
    plan_path: str = generations.DEFAULT_PLAN_PATH
    ran: Mapping[str, Any] = field(default_factory=dict)
    live_runs: Sequence[str] | None = None
    bootloader: str = "auto"
    reboot_follows: bool = False
    health_retries: int = 10
    health_delay_s: float = 3.0
    # Files (or directories) the inventory's own tasks record (generations_record_paths):
    # restorable besides the files the toolkit's roles write.
    also_restorable: Sequence[str] = ()


def effects_of(plan: generations.RollbackPlan, bootloader_kind: str) -> dict[str, Any]:
    """What must follow the restore, as the open manifest keeps it."""
    effects = plan.effects()
    return {
        "remove_outputs": list(plan.outputs_to_remove),
        "remove_dirs": list(plan.dirs_to_remove),
        "bootloader": bootloader_kind
        if effects["grub_changed"] and bootloader_kind == "grub_d"
        else None,
        "daemon_reload": bool(
            effects["units_changed"] or effects["services_to_restart"] or effects["units_to_stop"]
        ),
        "restart": list(effects["services_to_restart"]),
    }


def _wait_active(changes: NodeChanges, units: Sequence[str], retries: int, delay_s: float) -> None:
    if changes.check_mode:
        return
    waiting = list(units)
    for attempt in range(retries + 1):
        waiting = [
            unit
            for unit in waiting
            if run_command(["systemctl", "is-active", "--quiet", unit], check=False).rc != 0
        ]
        if not waiting:
            return
        if attempt < retries:
            time.sleep(delay_s)
    raise RollbackError(
        f"restored and restarted, but {', '.join(waiting)} did not become active; the files "
        "are the restored ones. Read journalctl -u <unit>, fix the cause, and run the rollback "
        "again to finish it"
    )


class _Effects:
    """Runs the effects a rollback owes the node and clears each from its manifest."""

    def __init__(
        self,
        request: RollbackRequest,
        changes: NodeChanges,
        run_id: str,
        find_bin: Callable[[str], str | None],
    ) -> None:
        self.request = request
        self.changes = changes
        self.run_id = run_id
        self.find_bin = find_bin
        self.restarted: list[str] = []

    def _cleared(self, pending: dict[str, Any], key: str) -> dict[str, Any]:
        pending = {**pending, key: None if key == "bootloader" else []}
        if not self.changes.check_mode:
            generations.update_pending(
                self.request.generations_dir,
                self.run_id,
                {EFFECTS_KEY: pending},
                self.request.root,
            )
        return pending

    def run(self, pending: dict[str, Any]) -> None:
        if pending.get("remove_outputs"):
            # Outputs, not managed files: not saved into the generation (the monitor
            # rewrites them every run; a saved copy would only read as drift later).
            for path in pending["remove_outputs"]:
                if not self.changes.check_mode:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(generations.on_root(self.request.root, path))
            pending = self._cleared(pending, "remove_outputs")
        if pending.get("remove_dirs"):
            if not self.changes.check_mode:
                generations.remove_emptied_dirs(
                    pending["remove_dirs"],
                    self.request.generations_dir,
                    self.run_id,
                    self.request.root,
                )
            pending = self._cleared(pending, "remove_dirs")
        if pending.get("bootloader") == "grub_d":
            command = self.find_bin("update-grub")
            if command is None:
                raise RollbackError(
                    "the grub files are restored but update-grub is not installed, so grub.cfg "
                    "still boots the old command line; install grub2-common and run the "
                    "rollback again to finish it"
                )
            self._step([command], "run update-grub for the restored grub files")
            pending = self._cleared(pending, "bootloader")
        if pending.get("daemon_reload"):
            self._step(["systemctl", "daemon-reload"], "run systemctl daemon-reload")
            pending = self._cleared(pending, "daemon_reload")
        units = list(pending.get("restart") or [])
        # Enabled in any case: a rollback of a rollback brings back units the first one
        # disabled, and the boot that follows starts only enabled ones.
        for unit in units:
            self._step(["systemctl", "enable", unit], f"enable {unit}")
        if units and self.request.reboot_follows:
            self.changes.actions.append(f"leave {', '.join(units)} to the reboot that follows")
            self._cleared(pending, "restart")
        elif units:
            for unit in units:
                self._step(["systemctl", "restart", unit], f"restart {unit}")
            self.restarted += units
            _wait_active(
                self.changes, units, self.request.health_retries, self.request.health_delay_s
            )
            self._cleared(pending, "restart")

    def _step(self, argv: list[str], sentence: str) -> None:
        try:
            self.changes.run(argv, sentence)
        except NodeFileError as error:
            raise RollbackError(
                f"{error}. The restored files are in place and the rest of the rollback is "
                f"noted on the node (run {self.run_id}); fix the cause and run the rollback "
                "again to finish it"
            ) from error


def _finish_interrupted(
    request: RollbackRequest, changes: NodeChanges, find_bin: Callable[[str], str | None]
) -> list[str]:
    """Finish the rollbacks other runs left half done; the run ids finished."""
    finished = []
    for run_id, manifest in generations.open_runs(request.generations_dir, request.root).items():
        if run_id == request.run_id or not manifest.get(SWAPPED_KEY):
            continue
        pending = manifest.get(EFFECTS_KEY) or {}
        changes.actions.append(f"finish the rollback run {run_id} left unfinished")
        _Effects(request, changes, run_id, find_bin).run(dict(pending))
        finished.append(run_id)
    return finished


def roll_back(
    request: RollbackRequest, *, check_mode: bool, find_bin: Callable[[str], str | None]
) -> dict[str, Any]:
    """Roll the node back (or finish an interrupted rollback); the module's result."""
    changes = NodeChanges(
        check_mode=check_mode,
        root=request.root,
        generations_dir=request.generations_dir,
        run_id=request.run_id,
        live_runs=list(request.live_runs) if request.live_runs is not None else None,
    )
    base_real = changes.real(request.generations_dir)
    if not check_mode:
        try:
            taken = runlock.take(base_real, request.run_id, live_runs=request.live_runs)
        except runlock.LockedError as error:
            raise RollbackError(f"nothing was touched: {error}") from error
        if taken.replaced_run:
            changes.actions.append(
                f"took the node's lock over from run {taken.replaced_run} ({taken.replaced_reason})"
            )
    try:
        return _roll_back_locked(request, changes, check_mode=check_mode, find_bin=find_bin)
    except BaseException:
        # Nothing saved in this run: nothing of it to finish, so nobody need wait for it.
        pending = generations.pending_dir(request.generations_dir, request.run_id, request.root)
        if not check_mode and not os.path.isdir(pending):
            runlock.release(base_real, request.run_id)
        raise


def _roll_back_locked(
    request: RollbackRequest,
    changes: NodeChanges,
    *,
    check_mode: bool,
    find_bin: Callable[[str], str | None],
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "finished_runs": [],
        "rollback": None,
        "files": [],
        "generation": None,
    }
    finished = [] if check_mode else _finish_interrupted(request, changes, find_bin)
    if finished:
        result["finished_runs"] = finished
    else:
        if not check_mode:
            # Runs that are gone left their saved copies open (this run holds the lock now):
            # committed first, as incomplete generations, so the rollback undoes them too.
            result["committed_gone_runs"] = generations.commit_gone_runs(
                request.generations_dir,
                request.run_id,
                root=request.root,
                plan_path=request.plan_path,
            )
        plan = generations.plan_rollback(
            request.generations_dir,
            request.target,
            request.force,
            request.root,
            request.also_restorable,
        )
        plan = generations.with_outputs_removed(
            plan, monitor_outputs_taken_away(plan, request.root), request.root
        )
        try:
            kind = bootloader.detect(request.bootloader, request.root, find_bin)
        except bootloader.BootloaderError:
            kind = "unknown"
        effects = effects_of(plan, kind)
        result["rollback"] = plan.to_json()
        result["files"] = [restore.path for restore in plan.to_change]
        result["effects"] = effects
        for restore in plan.to_change:
            changes.actions.append(
                f"{'would ' if check_mode else ''}{restore.action} {restore.path}"
            )
        for unit in plan.units_disabled:
            changes.actions.append(f"{'would ' if check_mode else ''}stop and disable {unit}")
        for path in plan.outputs_to_remove:
            changes.actions.append(
                f"{'would ' if check_mode else ''}remove {path} (an output of the monitor "
                "the rollback takes away)"
            )
        for directory in plan.dirs_to_remove:
            changes.actions.append(
                f"{'would ' if check_mode else ''}remove the directory {directory} "
                "(created by an undone generation, empty once its files are removed)"
            )
        if plan.needs_action and not check_mode:
            _swap(request, plan, effects, changes)
            _Effects(request, changes, request.run_id, find_bin).run(dict(effects))
        elif plan.needs_action:
            _Effects(request, changes, request.run_id, find_bin).run(dict(effects))
    if not check_mode:
        ran = dict(request.ran)
        if result["rollback"]:
            ran.update(
                rollback_to=result["rollback"]["target"], undone=result["rollback"]["undone"]
            )
        committed = generations.commit(
            request.generations_dir,
            request.run_id,
            ran,
            root=request.root,
            keep=request.keep,
            plan_path=request.plan_path,
        )
        result["generation"] = committed.generation
        result["commit"] = committed.to_json()
    boot = next_boot(request.root)
    running = (changes.read("/proc/cmdline") or b"").decode("utf-8", "replace").strip()
    result["reboot_required"] = bool(reboot_pending(running, boot))
    result["next_boot"] = list(boot.args) if boot.args is not None else None
    result["changed"] = bool(result["files"] or finished)
    result["actions"] = list(changes.actions)
    return result


def _stop_and_disable(changes: NodeChanges, unit: str) -> None:
    """``systemctl disable --now``; a unit systemd no longer knows (a rollback cut off after
    its unit file went away, run again) is already stopped and disabled."""
    done = changes.run(
        ["systemctl", "disable", "--now", unit], f"stop and disable {unit}", check=False
    )
    if done.rc == 0:
        return
    show = run_command(
        ["systemctl", "show", "-p", "LoadState", "-p", "ActiveState", "-p", "UnitFileState", unit],
        check=False,
    )
    state = parse_properties(show.stdout)
    if state.get("LoadState") == "not-found" and state.get("ActiveState") in ("inactive", ""):
        return
    raise NodeFileError(
        f"systemctl disable --now {unit} failed with exit status {done.rc}: "
        f"{(done.stderr or done.stdout).strip()[-2000:]}"
    )


def monitor_outputs_taken_away(plan: generations.RollbackPlan, root: str) -> list[str]:
    """The outputs others read of a monitor the rollback takes away (its metrics textfile,
    its fallback flag): left behind, node_exporter would go on exporting the last run's
    metrics, and a fallback recommended then would stand, for a monitor that is gone."""
    # The monitor's package is loaded only when the rollback stops units at all.
    stop = set(plan.effects()["units_to_stop"])
    if not stop:
        return []
    from ..monitor.units import SERVICE_NAME, TIMER_NAME  # noqa: PLC0415 - see above

    if not {SERVICE_NAME, TIMER_NAME} & stop:
        return []
    from ..monitor.config import MonitorConfigError, load_config  # noqa: PLC0415
    from ..monitor.state import FALLBACK_FLAG_NAME  # noqa: PLC0415

    outputs: list[str] = []
    for restore in plan.to_change:
        if restore.desired.exists or not restore.path.endswith(".json"):
            continue
        try:
            config = load_config(generations.on_root(root, restore.path))
        except (OSError, ValueError, MonitorConfigError):
            continue  # not the monitor's configuration
        outputs += [
            os.path.join(config.textfile_dir, config.textfile_name),
            os.path.join(config.state_dir, FALLBACK_FLAG_NAME),
        ]
    return [path for path in outputs if os.path.isfile(generations.on_root(root, path))]


def _swap(
    request: RollbackRequest,
    plan: generations.RollbackPlan,
    effects: dict[str, Any],
    changes: NodeChanges,
) -> None:
    """Note the effects, stop the units taken away, swap the files in, mark it swapped:
    from then on a later run finishes the effects instead of planning again."""
    stop = plan.effects()["units_to_stop"]

    def note_and_stop() -> None:
        generations.update_pending(
            request.generations_dir,
            request.run_id,
            {EFFECTS_KEY: effects, SWAPPED_KEY: False},
            request.root,
        )
        for unit in stop:
            _stop_and_disable(changes, unit)

    generations.swap_restored(
        plan, request.generations_dir, request.run_id, request.root, before_swap=note_and_stop
    )
    generations.update_pending(
        request.generations_dir, request.run_id, {SWAPPED_KEY: True}, request.root
    )
