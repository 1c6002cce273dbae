"""nvidia-persistenced: does its unit turn persistence mode off, and is persistence mode on?

Stdlib-only: runs on nodes (shipped as ``ansible.module_utils.lingbot_fleet.gpu.persistence``).

Some distributions start the daemon with ``--no-persistence-mode``. The toolkit never edits
the vendor unit: a drop-in that resets ``ExecStart`` starts the daemon without that flag,
and goes away again once the unit no longer needs it. Persistence mode is then read per GPU
through NVML (pynvml, imported lazily), else through nvidia-smi; GPUs the driver lost are
named by their bus id from sysfs and left out of the verdict.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..facts import sysfs
from ..facts.nvml import NvmlReader, NvmlUnavailableError, bus_id_from_nvml, load_pynvml
from ..node.nodefiles import NodeFileError

NO_PERSISTENCE_FLAG = "--no-persistence-mode"
DROPIN_NAME = "lingbot-fleet.conf"
# systemctl show properties the module reads, in one call.
SHOW_PROPERTIES = (
    "LoadState",
    "FragmentPath",
    "DropInPaths",
    "UnitFileState",
    "ActiveState",
    "MainPID",
    "NeedDaemonReload",
)
# UnitFileState values that need no `systemctl enable`.
ENABLED_STATES = ("enabled", "static", "generated", "alias", "indirect")
MASKED_STATES = ("masked", "masked-runtime")


# The nvidia_persistence module's options (without the generation ones), for the module
# and for its action plugin, which answers from gpu_facts' reading with the same defaults.
DEFAULT_UNIT = "nvidia-persistenced.service"
DEFAULT_DROPIN_DIR = "/etc/systemd/system/nvidia-persistenced.service.d"
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "unit": {"type": "str", "default": DEFAULT_UNIT},
    "dropin_dir": {"type": "path", "default": DEFAULT_DROPIN_DIR},
    "verify": {"type": "bool", "default": True},
    "verify_retries": {"type": "int", "default": 10},
    "verify_delay_s": {"type": "float", "default": 1},
    "use_nvml": {"type": "bool", "default": True},
    "nvml_python_path": {"type": "list", "elements": "str", "default": []},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "systemctl": {"type": "str", "default": "systemctl"},
    "uvm_at_boot": {"type": "bool", "default": True},
    "root": {"type": "path", "default": "/"},
}
# What the controller's answer depends on (controller_answer).
DECISION_OPTIONS = ("unit", "dropin_dir", "verify", "uvm_at_boot", "root")


class PersistenceError(Exception):
    """The unit or the GPUs cannot be read; str() names the object and the fix."""


# --- the unit ------------------------------------------------------------------------


def show_argv(systemctl: str, unit: str) -> list[str]:
    return [systemctl, "show", f"--property={','.join(SHOW_PROPERTIES)}", "--", unit]


@dataclass(frozen=True)
class UnitState:
    """What systemd has loaded for the unit."""

    name: str
    fragment_path: str
    dropin_paths: tuple[str, ...]
    unit_file_state: str
    active_state: str
    main_pid: int
    need_daemon_reload: bool

    @property
    def active(self) -> bool:
        return self.active_state == "active"

    @property
    def enabled(self) -> bool:
        return self.unit_file_state in ENABLED_STATES


def unit_state(unit: str, show: dict[str, str]) -> UnitState:
    """The unit's state from ``systemctl show``; PersistenceError when it is not installed."""
    fragment = show.get("FragmentPath", "")
    if show.get("LoadState") in ("not-found", "") or not fragment:
        raise PersistenceError(
            f"unit {unit} is not installed (LoadState={show.get('LoadState') or 'unknown'}, "
            "no FragmentPath); install the NVIDIA driver's nvidia-persistenced package or "
            "set nvidia_persistence_unit to the daemon's unit"
        )
    state = show.get("UnitFileState", "")
    if state in MASKED_STATES:
        raise PersistenceError(
            f"unit {unit} is {state}; unmask it (systemctl unmask {unit}) so the daemon can run"
        )
    pid = show.get("MainPID", "0")
    return UnitState(
        name=unit,
        fragment_path=fragment,
        dropin_paths=tuple(show.get("DropInPaths", "").split()),
        unit_file_state=state,
        active_state=show.get("ActiveState", ""),
        main_pid=int(pid) if pid.isdigit() else 0,
        need_daemon_reload=show.get("NeedDaemonReload") == "yes",
    )


def exec_start_of(sources: Sequence[tuple[str, str]]) -> tuple[str, str | None]:
    """(ExecStart in effect, the file that set it) over unit texts in systemd's order.

    ``sources`` is (path, text) for the unit file, then each drop-in in the order systemd
    applies them. An empty ``ExecStart=`` resets the list; the last assignment wins.
    """
    command, origin = "", None
    for path, text in sources:
        section = ""
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("[") and line.endswith("]"):
                section = line
                continue
            if section != "[Service]" or not line.startswith("ExecStart="):
                continue
            command, origin = line.split("=", 1)[1].strip(), path
    return command, origin


def has_flag(command: str) -> bool:
    return NO_PERSISTENCE_FLAG in shlex.split(command)


def without_flag(command: str) -> str:
    """The command line without --no-persistence-mode (other arguments kept in order)."""
    return shlex.join(arg for arg in shlex.split(command) if arg != NO_PERSISTENCE_FLAG)


def dropin_order(paths: Sequence[str]) -> list[str]:
    """Drop-ins in the order systemd applies them: by file name, across directories."""
    return sorted(paths, key=os.path.basename)


def dropin_text(unit_file: str, exec_start: str) -> str:
    return (
        "# Written by lingbot-fleet (role nvidia_persistence); the next run undoes edits.\n"
        f"# {unit_file} starts the daemon with\n"
        f"# {NO_PERSISTENCE_FLAG}; start it without that flag so every GPU stays initialized.\n"
        "[Service]\n"
        "ExecStart=\n"
        f"ExecStart={exec_start}\n"
    )


@dataclass(frozen=True)
class UnitPlan:
    """What the drop-in must be, and the ExecStart systemd will use then."""

    base_exec_start: str  # the unit and every other drop-in, without ours
    dropin: str | None  # wanted content of our drop-in; None: it must not exist
    exec_start_before: str  # in effect with the files as they are
    exec_start_after: str  # in effect once our drop-in is as wanted

    @property
    def no_persistence_mode(self) -> bool:
        return has_flag(self.base_exec_start)


def plan_unit(
    unit: UnitState,
    dropin_path: str,
    read_text: Callable[[str], str | None],
) -> UnitPlan:
    """Decide our drop-in from the unit file and the other drop-ins systemd loads.

    ``read_text`` reads a node path (None when it does not exist). Raises
    PersistenceError when the unit has no ExecStart, or when a drop-in applied after ours
    sets ExecStart with the flag again (ours cannot win then).
    """
    fragment_text = read_text(unit.fragment_path)
    if fragment_text is None:
        raise PersistenceError(
            f"unit file {unit.fragment_path} of {unit.name} cannot be read; reinstall the "
            "package that ships it"
        )
    others = [path for path in unit.dropin_paths if path != dropin_path]
    texts = {path: read_text(path) or "" for path in others}
    current = read_text(dropin_path)

    def effective(ours: str | None) -> tuple[str, str | None]:
        paths = dropin_order(others + ([dropin_path] if ours is not None else []))
        texts_now = texts if ours is None else {**texts, dropin_path: ours}
        sources = [(unit.fragment_path, fragment_text)]
        sources += [(path, texts_now[path]) for path in paths]
        return exec_start_of(sources)

    base, _ = effective(None)
    if not base:
        raise PersistenceError(
            f"{unit.name} has no ExecStart in [Service] ({unit.fragment_path}); reinstall "
            "the package that ships it"
        )
    wanted = dropin_text(unit.fragment_path, without_flag(base)) if has_flag(base) else None
    after, origin = effective(wanted)
    if has_flag(after):
        raise PersistenceError(
            f"{origin} sets ExecStart with {NO_PERSISTENCE_FLAG} and systemd applies it after "
            f"{dropin_path}; remove the flag there (systemctl cat {unit.name})"
        )
    before, _ = effective(current)
    return UnitPlan(
        base_exec_start=base, dropin=wanted, exec_start_before=before, exec_start_after=after
    )


def running_with_flag(pid: int, root: str = "/") -> bool:
    """Whether the running daemon (its main pid) was started with --no-persistence-mode."""
    if pid <= 0:
        return False
    try:
        with open(os.path.join(root, "proc", str(pid), "cmdline"), "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return False
    return NO_PERSISTENCE_FLAG.encode() in argv


# --- bringing the unit and nvidia-uvm into line ---------------------------------------
#
# One owner for what the role nvidia_persistence changes: its module runs these with a
# NodeChanges that writes; gpu_facts runs them with a check-mode NodeChanges, so the facts
# say what the module would do (``assess``), and a node that needs nothing costs the role
# no connection (plugins/action/nvidia_persistence.py).

UVM_MODULES_LOAD = "/etc/modules-load.d/lingbot-fleet-nvidia-uvm.conf"
UVM_MODULES_LOAD_TEXT = (
    "# Managed by lingbot-fleet (role nvidia_persistence): CUDA's nvidia-uvm at every boot,\n"
    "# before the hardened LingBot units start (they cannot load kernel modules).\n"
    "nvidia-uvm\n"
)
# The fact gpu_facts sets when asked to assess the unit (``assess``).
STATE_FACT_NAME = "lingbot_persistence_state"


def _read_text(changes: Any, path: str) -> str | None:
    data = changes.read(path)
    return data.decode("utf-8", errors="replace") if data is not None else None


def dropin_path_of(dropin_dir: str) -> str:
    return f"{dropin_dir.rstrip('/')}/{DROPIN_NAME}"


def load_uvm_at_boot(changes: Any, modprobe: str | None, result: dict[str, Any]) -> None:
    """nvidia-uvm loaded at every boot (modules-load.d) and now, when the driver is.

    CUDA needs nvidia-uvm; the driver usually loads it on demand through the setuid
    nvidia-modprobe, which the hardened units (NoNewPrivileges, ProtectKernelModules) do
    not allow, so the module must already be there when LingBot starts.
    """
    changes.write_file(UVM_MODULES_LOAD, UVM_MODULES_LOAD_TEXT, mode=0o644)
    loaded = os.path.isdir(changes.real("/sys/module/nvidia_uvm"))
    if loaded or not os.path.isdir(changes.real("/sys/module/nvidia")):
        if not loaded:
            result["notes"].append("nvidia-uvm: the NVIDIA kernel driver is not loaded here")
        return
    changes.run([modprobe or "modprobe", "nvidia-uvm"], "load nvidia-uvm (modprobe nvidia-uvm)")


def converge_unit(
    changes: Any,
    state: UnitState,
    *,
    dropin_dir: str,
    systemctl: str,
    root: str,
    result: dict[str, Any],
) -> bool:
    """Drop-in, reload, enable, start or restart (through ``changes``, a NodeChanges);
    True when the daemon was (or, in check mode, would be) started or restarted."""
    unit = state.name
    dropin_path = dropin_path_of(dropin_dir)
    plan = plan_unit(state, dropin_path, lambda path: _read_text(changes, path))
    result.update(
        fragment_path=state.fragment_path,
        no_persistence_mode=plan.no_persistence_mode,
        exec_start=plan.exec_start_after,
        dropin={"path": dropin_path, "state": "present" if plan.dropin else "absent"},
    )
    if plan.dropin is not None:
        dropin_changed = changes.write_file(dropin_path, plan.dropin, mode=0o644)
    else:
        dropin_changed = changes.remove_file(dropin_path)
        if dropin_changed:
            changes.remove_empty_dir(dropin_dir)
    if dropin_changed or state.need_daemon_reload:
        changes.run([systemctl, "daemon-reload"], "run systemctl daemon-reload")
    if not state.enabled:
        changes.enable_unit(systemctl, unit)
    stale = plan.exec_start_before != plan.exec_start_after or (
        running_with_flag(state.main_pid, root) and not has_flag(plan.exec_start_after)
    )
    if not state.active:
        changes.run([systemctl, "start", unit], f"start {unit}")
        return True
    if stale:
        changes.run([systemctl, "restart", unit], f"restart {unit} with its new ExecStart")
        return True
    return False


def assess(  # noqa: PLR0913 - the module's options, keyword-only
    changes: Any,
    show: dict[str, str],
    *,
    unit: str,
    dropin_dir: str,
    uvm_at_boot: bool,
    systemctl: str,
    modprobe: str | None,
    root: str,
    now_s: float,
) -> dict[str, Any]:
    """What the module would do on this node, with these options (``changes`` must be in
    check mode): the options, ``pending`` (its actions, one sentence each) and what it
    would report, or ``error`` when it would fail."""
    assessment: dict[str, Any] = {
        "unit": unit,
        "dropin_dir": dropin_dir,
        "uvm_at_boot": uvm_at_boot,
        "root": root,
        "read_at_s": now_s,
        "error": None,
        "notes": [],
    }
    try:
        if uvm_at_boot:
            load_uvm_at_boot(changes, modprobe, assessment)
        converge_unit(
            changes,
            unit_state(unit, show),
            dropin_dir=dropin_dir,
            systemctl=systemctl,
            root=root,
            result=assessment,
        )
    except (PersistenceError, NodeFileError, OSError, ValueError) as error:
        assessment["error"] = str(error)
    assessment["pending"] = list(changes.actions)
    return assessment


# How old gpu_facts' assessment may be for the controller to answer from it; a node whose
# clock is off by more than this pays for the module call instead.
ASSESSMENT_MAX_AGE_S = 300.0


def controller_answer(
    options: dict[str, Any],
    assessment: dict[str, Any] | None,
    facts: dict[str, Any] | None,
    now_s: float,
) -> dict[str, Any] | None:
    """The module's result, without a call, when gpu_facts' ``assessment`` (made with
    these ``options``) says it would change nothing and the ``facts`` read in that call
    show persistence mode on for every GPU; None when only the module can tell."""
    if not isinstance(assessment, dict) or not isinstance(facts, dict):
        return None
    same_options = all(
        assessment.get(key) == options.get(key)
        for key in ("unit", "dropin_dir", "uvm_at_boot", "root")
    )
    read_at_s = assessment.get("read_at_s")
    if (
        not same_options
        or assessment.get("error")
        or assessment.get("pending") != []
        or not isinstance(read_at_s, (int, float))
        or abs(now_s - read_at_s) > ASSESSMENT_MAX_AGE_S
    ):
        return None
    gpus = [
        {key: gpu.get(key) for key in ("index", "bus_id", "lost", "persistence_mode")}
        for gpu in facts.get("gpus") or []
        if isinstance(gpu, dict)
    ]
    verify = bool(options.get("verify", True))
    if verify and (
        not gpus or any(gpu["lost"] or gpu["persistence_mode"] is not True for gpu in gpus)
    ):
        return None
    source = (facts.get("sources") or {}).get("gpu_state")
    return {
        "changed": False,
        "actions": [],
        "changed_paths": [],
        "diff": [],
        "fragment_path": assessment.get("fragment_path"),
        "no_persistence_mode": assessment.get("no_persistence_mode"),
        "exec_start": assessment.get("exec_start"),
        "dropin": assessment.get("dropin"),
        "restarted": False,
        "verified": verify,
        "source": source if verify else None,
        "reads": 0,
        "gpus": gpus if verify else [],
        "lost_gpus": [],
        "notes": [
            *assessment.get("notes", []),
            "nothing to change: read by gpu_facts in this run (unit, drop-in, nvidia-uvm"
            + (", persistence mode of every GPU" if verify else "")
            + "), no module call",
        ],
    }


# --- the GPUs ------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_nvml_persistence(pynvml: Any) -> list[dict[str, Any]]:
    """Index, bus id and persistence mode of every GPU NVML counts (lost: handle fails)."""
    gpus: list[dict[str, Any]] = []
    with NvmlReader(pynvml):
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                bus_id = bus_id_from_nvml(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
            except pynvml.NVMLError as error:
                gpus.append({"index": index, "lost": True, "error": str(error)})
                continue
            gpu: dict[str, Any] = {"index": index, "bus_id": bus_id, "lost": False}
            try:
                gpu["persistence_mode"] = bool(pynvml.nvmlDeviceGetPersistenceMode(handle))
            except pynvml.NVMLError as error:
                gpu["persistence_mode"] = None
                gpu["error"] = str(error)
            gpus.append(gpu)
    return gpus


def read_smi_persistence(command: Sequence[str]) -> list[dict[str, Any]]:
    """The same through one nvidia-smi query (a lost GPU has no row)."""
    from ..facts.smi import QUERY_FIELDS, parse_query_rows, run_smi  # noqa: PLC0415 (fallback)

    text = run_smi(
        command, [f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    rows, _ = parse_query_rows(text)
    return [
        {
            "index": row["index"],
            "bus_id": row["bus_id"],
            "lost": False,
            "persistence_mode": row["persistence_mode"],
        }
        for row in rows
    ]


def with_lost_gpus(
    gpus: list[dict[str, Any]], sysfs_bus_ids: Sequence[str]
) -> list[dict[str, Any]]:
    """Every GPU by index: the driver's answer, else lost with its bus id from sysfs order."""
    by_index = {gpu["index"]: gpu for gpu in gpus}
    count = max(len(sysfs_bus_ids), max(by_index, default=-1) + 1)
    merged = []
    for index in range(count):
        gpu = dict(by_index.get(index) or {"index": index, "lost": True})
        if gpu.get("bus_id") is None:
            gpu["bus_id"] = sysfs_bus_ids[index] if index < len(sysfs_bus_ids) else None
        if gpu["lost"]:
            gpu["persistence_mode"] = None
        merged.append(
            {key: gpu.get(key) for key in ("index", "bus_id", "lost", "persistence_mode")}
            | ({"error": gpu["error"]} if gpu.get("error") else {})
        )
    return merged


@dataclass(frozen=True)
class GpuRead:
    """One read of every GPU's persistence mode: the GPUs, where it came from, why."""

    gpus: list[dict[str, Any]]
    source: str
    notes: tuple[str, ...] = ()


def read_gpus(
    use_nvml: bool,
    nvml_python_path: Sequence[str],
    smi_command: Sequence[str],
    root: str = "/",
) -> GpuRead:
    """Every GPU's persistence mode: NVML when pynvml imports and initializes, else nvidia-smi."""
    sysfs_bus_ids = sysfs.nvidia_gpu_bus_ids(root)
    notes: list[str] = []
    if use_nvml:
        try:
            gpus = read_nvml_persistence(load_pynvml(nvml_python_path))
            return GpuRead(with_lost_gpus(gpus, sysfs_bus_ids), "nvml")
        except NvmlUnavailableError as error:
            notes.append(f"NVML not used: {error}; persistence mode read through nvidia-smi")
    else:
        notes.append("NVML not used: turned off by the caller; read through nvidia-smi")
    from ..facts.smi import SmiUnavailableError  # noqa: PLC0415 (only the fallback needs it)

    try:
        gpus = read_smi_persistence(smi_command)
    except SmiUnavailableError as error:
        raise PersistenceError(
            f"persistence mode cannot be read: {error}; install nvidia-ml-py (gpu_facts) "
            "or check the driver (nvidia-smi)"
        ) from None
    return GpuRead(with_lost_gpus(gpus, sysfs_bus_ids), "nvidia-smi", tuple(notes))


def gpus_off(gpus: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """GPUs the driver answers for whose persistence mode is not on."""
    return [gpu for gpu in gpus if not gpu["lost"] and gpu["persistence_mode"] is not True]


def read_until_on(
    read: Callable[[], GpuRead],
    retries: int,
    delay_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[GpuRead, int]:
    """Read until every GPU the driver answers for is on, at most 1 + retries times:
    (the last read, how many reads)."""
    reads = 1
    result = read()
    while gpus_off(result.gpus) and reads <= retries:
        sleep(delay_s)
        result = read()
        reads += 1
    return result, reads


def bus_ids(gpus: Sequence[dict[str, Any]]) -> str:
    return ", ".join(str(gpu.get("bus_id") or f"index {gpu['index']}") for gpu in gpus)
