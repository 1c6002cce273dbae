"""Read GPUs, topology and P2P status through NVML (pynvml from nvidia-ml-py).

pynvml is imported lazily, inside `load_pynvml`, so nodes without it fall back to
nvidia-smi. NVML answers in index order (PCI bus order). A GPU whose handle NVML gives
but which then fails a required call (lost in between) is reported lost with the error,
and its fields come from sysfs, like a GPU NVML refuses outright; the others are read on.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

# nvmlGpuTopologyLevel_t between two different GPUs, as nvidia-smi topo -m words. INTERNAL
# (0) is two GPUs on one board (K80, dual-GPU cards): behind the board's own PCIe switch,
# which nvidia-smi shows as PIX. X is only ever a GPU with itself.
TOPOLOGY_WORDS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
P2P_WORDS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DR", 5: "NS", 6: "U"}
# nvmlGpuP2PCapsIndex_t (pynvml's READ constant is a tuple by mistake, so use numbers).
P2P_CAPS = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}
NVLINK_MAX_LINKS = 18
# nvmlNvLinkErrorCounter_t: the data link layer's error counters of one NVLink, since the
# driver loaded (or the GPU was reset). CRC and replay errors are retried by the link;
# a recovery takes the link down and up again.
NVLINK_ERROR_COUNTERS = {
    "replay": 0,
    "recovery": 1,
    "crc_flit": 2,
    "crc_data": 3,
    "ecc_data": 4,
}
# nvmlMemoryErrorType_t and nvmlEccCounterType_t (nvml.h).
MEMORY_ERROR_UNCORRECTED = 1
ECC_COUNTER_VOLATILE = 0
ECC_COUNTER_AGGREGATE = 1
# nvmlPageRetirementCause_t: pages retired (before Ampere) for repeated single-bit errors,
# and for a double-bit (uncorrectable) error.
PAGE_RETIREMENT_CAUSES = {"single_bit": 0, "double_bit": 1}
MIG_WORDS = {0: "disabled", 1: "enabled"}
# nvmlGpuFabricState_t.
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
# nvmlClocksEventReason* bits (the older nvmlClocksThrottleReason* names give the same bits).
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# The call by its current name first; drivers before it have only the older name.
CLOCK_EVENT_CALLS = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)
# Clock event reasons are read this many times, this far apart (one wait a round, all GPUs
# read in each), so that one sample never decides (gpu/throttle.py).
CLOCK_EVENT_READINGS = 4
CLOCK_EVENT_INTERVAL_S = 0.1
# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (NVML 12.8, driver R570) and
# nvmlDeviceGpuRecoveryAction_t values.
FIELD_GPU_RECOVERY_ACTION = 230
RECOVERY_ACTIONS = {
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}
# nvmlValueType_t -> the member of nvmlValue_t that holds a field's value.
FIELD_VALUE_MEMBERS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}


# nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED: the library is there, the kernel driver is not.
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_NOT_SUPPORTED = 3
# The driver's library lacks the call (an older driver than the binding).
NVML_ERROR_FUNCTION_NOT_FOUND = 13
# NVML_ERROR_LIB_RM_VERSION_MISMATCH: the libraries of one driver version, the kernel module
# of another (a driver updated without the reboot that loads its module).
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18


class NvmlUnavailableError(Exception):
    """pynvml cannot be imported, or NVML cannot be initialized; str() says which,
    ``driver_not_loaded`` whether NVML said the kernel driver is not loaded, and
    ``version_mismatch`` whether it said the libraries and the kernel module differ."""

    def __init__(
        self, message: str, *, driver_not_loaded: bool = False, version_mismatch: bool = False
    ) -> None:
        super().__init__(message)
        self.driver_not_loaded = driver_not_loaded
        self.version_mismatch = version_mismatch


def _search_also(extra_paths: Sequence[str]) -> None:
    """Append `extra_paths` (directories or glob patterns) to sys.path, after its own."""
    for path in (match for pattern in extra_paths for match in sorted(glob.glob(pattern))):
        if path not in sys.path:
            sys.path.append(path)


def find_pynvml(extra_paths: Sequence[str] = ()) -> str | None:
    """The file `load_pynvml(extra_paths)` imports pynvml from, found without importing it."""
    _search_also(extra_paths)
    if "pynvml" in sys.modules:
        return getattr(sys.modules["pynvml"], "__file__", None)
    import importlib.util  # noqa: PLC0415  (only this question needs it)

    spec = importlib.util.find_spec("pynvml")
    return spec.origin if spec is not None else None


def load_pynvml(extra_paths: Sequence[str] = ()) -> Any:
    """Import pynvml, looking in `extra_paths` too: directories or glob patterns (e.g. a
    venv's `lib/python3*/site-packages`); a pattern without a match is skipped."""
    _search_also(extra_paths)
    try:
        import pynvml  # noqa: PLC0415  (optional on nodes: imported only when asked)
    except ImportError as error:
        searched = ", ".join(extra_paths) or "sys.path only"
        raise NvmlUnavailableError(
            f"pynvml is not importable ({error}; searched {searched})"
        ) from None
    return pynvml


def bus_id_from_nvml(nvml_bus_id: str) -> str:
    """'00000000:41:00.0' -> '0000:41:00.0' (sysfs form, lower case)."""
    domain, bus, device_function = nvml_bus_id.strip().lower().split(":")
    return f"{int(domain, 16):04x}:{bus}:{device_function}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReader:
    """One NVML session: init on enter, shutdown on exit."""

    def __init__(self, pynvml: Any) -> None:
        self.nvml = pynvml
        self.handles: list[Any] = []
        # The clock event calls this binding has, the newer name first (clock_event_mask).
        self.clock_event_calls = [
            getattr(pynvml, name) for name in CLOCK_EVENT_CALLS if hasattr(pynvml, name)
        ]

    def __enter__(self) -> NvmlReader:
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as error:
            value = getattr(error, "value", None)
            raise NvmlUnavailableError(
                f"nvmlInit failed: {error}",
                driver_not_loaded=value == NVML_ERROR_DRIVER_NOT_LOADED,
                version_mismatch=value == NVML_ERROR_LIB_RM_VERSION_MISMATCH,
            ) from None
        return self

    def __exit__(self, *_exc: object) -> None:
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()

    def optional(self, call: Callable[..., Any], *args: Any) -> Any:
        """The call's value, None when NVML says not supported (or another per-call error)."""
        try:
            return call(*args)
        except self.nvml.NVMLError:
            return None

    def driver_version(self) -> str | None:
        version = self.optional(self.nvml.nvmlSystemGetDriverVersion)
        return _text(version) if version is not None else None

    def gpus(self) -> list[dict[str, Any]]:
        count = self.nvml.nvmlDeviceGetCount()
        gpus = []
        self.handles = []
        for index in range(count):
            try:
                handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            except self.nvml.NVMLError as error:
                self.handles.append(None)
                gpus.append({"index": index, "lost": True, "error": str(error)})
                continue
            try:
                gpu = self.gpu(index, handle)
            except self.nvml.NVMLError as error:
                self.handles.append(None)
                gpus.append({"index": index, "lost": True, "error": str(error)})
                continue
            self.handles.append(handle)
            gpus.append(gpu)
        return gpus

    def gpu(self, index: int, handle: Any) -> dict[str, Any]:
        nvml = self.nvml
        pci = nvml.nvmlDeviceGetPciInfo(handle)
        pstate = self.optional(nvml.nvmlDeviceGetPerformanceState, handle)
        persistence = self.optional(nvml.nvmlDeviceGetPersistenceMode, handle)
        mig = self.optional(nvml.nvmlDeviceGetMigMode, handle)
        return {
            "index": index,
            "lost": False,
            "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
            "model": _text(nvml.nvmlDeviceGetName(handle)),
            "bus_id": bus_id_from_nvml(_text(pci.busId)),
            "pcie": {
                "current_gen": self.optional(nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
                "current_width": self.optional(nvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
                "max_gen": self.optional(nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
                "max_width": self.optional(nvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
                "max_gen_gpu": self.optional(nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration, handle),
            },
            "performance_state": f"P{pstate}" if pstate is not None else None,
            "persistence_mode": bool(persistence) if persistence is not None else None,
            "mig_mode": MIG_WORDS.get(mig[0]) if mig is not None else None,
            "nvlink": self.nvlink_links(handle),
            "memory": self.memory_health(handle),
            "fabric": self.fabric_state(handle),
            "recovery_action": self.recovery_action(handle),
        }

    def recovery_action(self, handle: Any) -> dict[str, Any]:
        """What the driver asks to be done to bring the GPU back (field
        NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): ``value`` and ``name`` (``unknown <n>`` for a
        value this reader does not know), ``supported`` (False: the driver has no such field,
        before R570; None: NVML could not be asked) and ``note`` (why there is no value)."""
        if not hasattr(self.nvml, "nvmlDeviceGetFieldValues"):
            return _recovery_action(None, "this NVML binding has no nvmlDeviceGetFieldValues")
        status: int | None
        try:
            [field] = self.nvml.nvmlDeviceGetFieldValues(handle, [FIELD_GPU_RECOVERY_ACTION])
            status = int(field.nvmlReturn)
            error = f"NVML error {status}"
        except self.nvml.NVMLError as failure:
            status, error = getattr(failure, "value", None), str(failure)
        if status == NVML_ERROR_NOT_SUPPORTED:
            return _recovery_action(
                False,
                f"NVML does not support field {FIELD_GPU_RECOVERY_ACTION} (GPU recovery action): "
                "a driver before R570 (NVML 12.8)",
            )
        if status != 0:
            return _recovery_action(None, f"the GPU recovery action could not be read: {error}")
        member = FIELD_VALUE_MEMBERS.get(int(field.valueType), "uiVal")
        value = int(getattr(field.value, member))
        return {
            "value": value,
            "name": RECOVERY_ACTIONS.get(value, f"unknown {value}"),
            "supported": True,
            "note": None,
        }

    def clock_event_mask(self, handle: Any) -> int:
        """One reading of the GPU's clock event reasons (a bit mask); NVMLError when NVML
        does not answer. A driver library without the current call name (before it was
        renamed) answers to the older one, which this reader keeps to from then on."""
        while True:
            try:
                return int(self.clock_event_calls[0](handle))
            except self.nvml.NVMLError as error:
                older_left = len(self.clock_event_calls) > 1
                if getattr(error, "value", None) != NVML_ERROR_FUNCTION_NOT_FOUND or not older_left:
                    raise
                self.clock_event_calls.pop(0)

    def clock_events(
        self,
        gpus: list[dict[str, Any]],
        readings: int = CLOCK_EVENT_READINGS,
        interval_s: float = CLOCK_EVENT_INTERVAL_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Adds ``clock_events`` to every GPU with a handle: ``readings`` readings of its
        clock event reasons, ``interval_s`` apart (one wait a round, every GPU read in each
        round): how many were taken and answered, per reason how many had it set, bits this
        reader does not know (hex) likewise, and the last error NVML gave (else None)."""
        tallies: list[tuple[Any, dict[str, Any]]] = []
        for gpu, handle in zip(gpus, self.handles, strict=True):
            if handle is not None:
                gpu["clock_events"] = {
                    "readings_answered": 0,
                    "readings_taken": 0,
                    "reasons": {},
                    "unknown_bits": {},
                    "error": None,
                }
                tallies.append((handle, gpu["clock_events"]))
        if not tallies:
            return
        if not self.clock_event_calls:
            readings = 0
            for _handle, tally in tallies:
                tally["error"] = f"this NVML binding has neither {' nor '.join(CLOCK_EVENT_CALLS)}"
        for reading in range(readings):
            if reading:
                sleep(interval_s)
            for handle, tally in tallies:
                tally["readings_taken"] += 1
                try:
                    mask = self.clock_event_mask(handle)
                except self.nvml.NVMLError as error:
                    tally["error"] = str(error)
                    continue
                tally["readings_answered"] += 1
                _count_reasons(mask, tally)

    def fabric_state(self, handle: Any) -> str | None:
        """The GPU's NVLink fabric state (NVSwitch systems, Hopper and later): not_supported,
        not_started, in_progress, completed, or "unknown <n>" for a state this reader does
        not know; None when NVML (or its binding) has no such call."""
        info_type = getattr(self.nvml, "c_nvmlGpuFabricInfo_t", None)
        if info_type is None or not hasattr(self.nvml, "nvmlDeviceGetGpuFabricInfo"):
            return None
        info = info_type()
        try:
            self.nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
        except self.nvml.NVMLError:
            return None
        # nvmlGpuFabricState_t is one byte; the binding reads the padding after it too.
        state = int(info.state) & 0xFF
        return FABRIC_STATES.get(state, f"unknown {state}")

    def memory_health(self, handle: Any) -> dict[str, Any]:
        """ECC, row remapping (Ampere and later) and page retirement (before Ampere) as NVML
        reports them; a value NVML does not give (a GPU without ECC, row remapping before
        Ampere, page retirement after) is None: unknown, never healthy."""
        nvml = self.nvml
        ecc = self.optional(nvml.nvmlDeviceGetEccMode, handle)
        counters = (("volatile", ECC_COUNTER_VOLATILE), ("aggregate", ECC_COUNTER_AGGREGATE))
        counts = {
            name: self.optional(
                nvml.nvmlDeviceGetTotalEccErrors, handle, MEMORY_ERROR_UNCORRECTED, counter
            )
            for name, counter in counters
        }
        rows = self.optional(nvml.nvmlDeviceGetRemappedRows, handle)
        return {
            "ecc_enabled": bool(ecc[0]) if ecc is not None else None,
            "uncorrected_volatile": counts["volatile"],
            "uncorrected_aggregate": counts["aggregate"],
            "remapped_rows": (
                {
                    "correctable": rows[0],
                    "uncorrectable": rows[1],
                    "pending": bool(rows[2]),
                    "failed": bool(rows[3]),
                }
                if rows is not None
                else None
            ),
            "retired_pages": self.retired_pages(handle),
        }

    def retired_pages(self, handle: Any) -> dict[str, Any] | None:
        """Pages retired per cause (PAGE_RETIREMENT_CAUSES) and whether a retirement waits
        for a reset, each None where NVML does not give it; None when it gives none of them
        (Ampere and later GPUs remap rows instead)."""
        nvml = self.nvml
        pages: dict[str, Any] = {}
        for name, cause in PAGE_RETIREMENT_CAUSES.items():
            addresses = self.optional(nvml.nvmlDeviceGetRetiredPages, handle, cause)
            pages[name] = len(addresses) if addresses is not None else None
        pending = self.optional(nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        pages["pending"] = bool(pending) if pending is not None else None
        return pages if any(value is not None for value in pages.values()) else None

    def nvlink_links(self, handle: Any) -> dict[str, Any] | None:
        """How many NVLinks the GPU has (those NVML gives a state for) and how many are
        active; None when NVML gives none (a PCIe GPU, a VM without its NVLinks)."""
        links = active = 0
        for link in range(NVLINK_MAX_LINKS):
            try:
                state = self.nvml.nvmlDeviceGetNvLinkState(handle, link)
            except self.nvml.NVMLError:
                continue
            links += 1
            active += 1 if state else 0
        return {"links": links, "active": active} if links else None

    def nvlink_error_counts(self, handle: Any) -> dict[str, int] | None:
        """Per error counter (NVLINK_ERROR_COUNTERS), its sum over the GPU's NVLinks (those
        NVML gives a state for); a counter no link answers is left out, and None when none
        is answered (no NVLinks, or a driver without the call)."""
        call = getattr(self.nvml, "nvmlDeviceGetNvLinkErrorCounter", None)
        if call is None:
            return None
        counts: dict[str, int] = {}
        for link in range(NVLINK_MAX_LINKS):
            if self.optional(self.nvml.nvmlDeviceGetNvLinkState, handle, link) is None:
                continue
            for name, counter in NVLINK_ERROR_COUNTERS.items():
                value = self.optional(call, handle, link, counter)
                if value is not None:
                    counts[name] = counts.get(name, 0) + int(value)
        return counts or None

    def nvlink_errors(
        self, gpus: list[dict[str, Any]], clock: Callable[[], float] = time.monotonic
    ) -> Callable[[], None]:
        """Takes the first reading of every GPU's NVLink error counters now; the function it
        returns takes the second and adds both to each GPU's ``nvlink`` (``errors``, the
        second; ``errors_earlier``, the first; ``errors_window_s``, the time between), so a
        counter rising between the two is seen (gpu/nvlink.py). Call it after the other
        readings, to make the window as long as the reading already takes."""
        first = [
            self.nvlink_error_counts(handle) if handle is not None and gpu.get("nvlink") else None
            for gpu, handle in zip(gpus, self.handles, strict=True)
        ]
        started_s = clock()

        def second() -> None:
            window_s = round(clock() - started_s, 3)
            for gpu, handle, earlier in zip(gpus, self.handles, first, strict=True):
                if earlier is None:
                    continue
                gpu["nvlink"]["errors_earlier"] = earlier
                gpu["nvlink"]["errors"] = self.nvlink_error_counts(handle)
                gpu["nvlink"]["errors_window_s"] = window_s

        return second

    def nvlink_peers(self, handle: Any, bus_ids: list[str]) -> dict[str, int]:
        """Active NVLinks of one GPU by far end: GPU index as text, or 'nvswitch'."""
        peers: dict[str, int] = {}
        for link in range(NVLINK_MAX_LINKS):
            try:
                active = self.nvml.nvmlDeviceGetNvLinkState(handle, link)
            except self.nvml.NVMLError:
                if link == 0:
                    return peers
                continue
            if not active:
                continue
            remote = self.optional(self.nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            if remote is None:
                continue
            remote_bus_id = bus_id_from_nvml(_text(remote.busId))
            key = str(bus_ids.index(remote_bus_id)) if remote_bus_id in bus_ids else "nvswitch"
            peers[key] = peers.get(key, 0) + 1
        return peers

    def topology(self, gpus: list[dict[str, Any]]) -> list[list[str | None]]:
        """nvidia-smi topo -m words: NV<n> where NVLinks join a pair, else the PCIe level."""
        bus_ids = [gpu.get("bus_id", "") for gpu in gpus]
        peers = [
            self.nvlink_peers(handle, bus_ids) if handle is not None else {}
            for handle in self.handles
        ]
        matrix: list[list[str | None]] = []
        for a, handle_a in enumerate(self.handles):
            row: list[str | None] = []
            for b, handle_b in enumerate(self.handles):
                if a == b:
                    row.append("X")
                    continue
                links = nvlink_count(peers[a], peers[b], a, b)
                if links:
                    row.append(f"NV{links}")
                    continue
                level = None
                if handle_a is not None and handle_b is not None:
                    level = self.optional(
                        self.nvml.nvmlDeviceGetTopologyCommonAncestor, handle_a, handle_b
                    )
                row.append(TOPOLOGY_WORDS.get(level) if level is not None else None)
            matrix.append(row)
        return matrix

    def p2p(self) -> dict[str, list[list[str]]]:
        """Per capability, nvidia-smi topo -p2p words (OK, CNS, ...), X on the diagonal."""
        result: dict[str, list[list[str]]] = {}
        for name, caps_index in P2P_CAPS.items():
            matrix = []
            for a, handle_a in enumerate(self.handles):
                row = []
                for b, handle_b in enumerate(self.handles):
                    if a == b:
                        row.append("X")
                    elif handle_a is None or handle_b is None:
                        row.append("U")
                    else:
                        status = self.optional(
                            self.nvml.nvmlDeviceGetP2PStatus, handle_a, handle_b, caps_index
                        )
                        row.append(P2P_WORDS.get(status, "U") if status is not None else "U")
                matrix.append(row)
            result[name] = matrix
        return result


def _recovery_action(supported: bool | None, note: str) -> dict[str, Any]:
    return {"value": None, "name": None, "supported": supported, "note": note}


def _count_reasons(mask: int, tally: dict[str, Any]) -> None:
    """Counts each bit set in one reading: a known reason by name, another bit by its hex."""
    bit = 1
    while bit <= mask:
        if mask & bit:
            name = CLOCK_EVENT_REASONS.get(bit)
            counts, key = (tally["reasons"], name) if name else (tally["unknown_bits"], hex(bit))
            counts[key] = counts.get(key, 0) + 1
        bit <<= 1


def nvlink_count(peers_a: dict[str, int], peers_b: dict[str, int], a: int, b: int) -> int:
    """Direct links between a and b, plus the smaller link count to a shared NVSwitch."""
    direct = max(peers_a.get(str(b), 0), peers_b.get(str(a), 0))
    return direct + min(peers_a.get("nvswitch", 0), peers_b.get("nvswitch", 0))


def read_nvml(pynvml: Any) -> dict[str, Any]:
    """Everything NVML tells: driver version, GPUs, topology matrix, P2P status."""
    with NvmlReader(pynvml) as reader:
        gpus = reader.gpus()
        read_nvlink_errors_again = reader.nvlink_errors(gpus)
        reader.clock_events(gpus)
        read_nvlink_errors_again()
        return {
            "driver_version": reader.driver_version(),
            "gpus": gpus,
            "topology": reader.topology(gpus),
            "p2p": reader.p2p(),
        }
