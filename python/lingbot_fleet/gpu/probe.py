"""The P2P probe: measured GPU paths through the driver's libcuda.so.1 (docs/probe.md).

Per GPU: the link read under sustained host-to-device copies (facts.load.LinkReading),
then pinned host-to-device and device-to-host bandwidth, with the probing thread bound
to the GPU's local CPUs. Per ordered GPU pair: unidirectional and bidirectional bandwidth
and small-copy latency with peer access disabled (the driver stages the copy through
pinned host memory) and enabled, plus a data check. Figures follow nvbandwidth's method:
large buffers, warm-up copies, then timed samples (each a run of copies between two CUDA
events); the figure is the median of the samples. A GPU or pair that fails is reported in
its entry's `error`; the rest of the probe goes on. GPUs can be left out on purpose (a
`skipped` reason, e.g. GPUs that serve LingBot in check mode). Stdlib only (runs on
nodes); NVML is optional.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..facts.load import LinkReading, Sampler, nvml_sampler, smi_sampler
from ..facts.nvml import NvmlUnavailableError, load_pynvml
from ..node.atomic import write_atomic
from ..parsers._common import expand_cpu_list
from .cuda import CudaDriver, CudaError
from .probe_saved import DEFAULT_SAVE_DIR, LATEST_NAME, PROBE_SCHEMA_VERSION, SAVED_PROBE_FACT_NAME

PROBE_FACT_NAME = "lingbot_probe"
SAVED_COPY_PREFIX = "probe-"
MIB = 1 << 20

# What a CUDA error means for the probe, and what to do about it.
CUDA_ERROR_MEANINGS: dict[str, str] = {
    "LIBRARY_NOT_FOUND": "the NVIDIA driver's libcuda.so.1 could not be loaded; install the "
    "driver's user-space libraries",
    "SYMBOL_NOT_FOUND": "libcuda.so.1 is older than the calls the probe needs; update the driver",
    "CUDA_ERROR_NO_DEVICE": "the driver sees no GPU (driver not loaded, or CUDA_VISIBLE_DEVICES "
    "hides every GPU)",
    "CUDA_ERROR_NOT_INITIALIZED": "the driver did not initialize; check that the nvidia kernel "
    "module is loaded and matches the user-space driver",
    "CUDA_ERROR_DEVICE_UNAVAILABLE": "the GPU is lost (fallen off the bus) or busy: held by "
    "another process in exclusive compute mode; check nvidia-smi and the kernel log for Xid "
    "errors",
    "CUDA_ERROR_LAUNCH_FAILED": "the GPU failed during the probe and its context is unusable; "
    "check the kernel log for Xid errors, then reset or replace the GPU",
    "CUDA_ERROR_ILLEGAL_ADDRESS": "the GPU failed during the probe and its context is unusable; "
    "check the kernel log for Xid errors, then reset or replace the GPU",
    "CUDA_ERROR_OUT_OF_MEMORY": "not enough free GPU or pinned host memory for the probe's "
    "buffers; lower size_mib or stop what uses the GPU",
    "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED": "the driver refuses peer access between these GPUs "
    "(topology, IOMMU or platform)",
    "CUDA_ERROR_INVALID_DEVICE": "the driver does not know this device ordinal",
    "CUDA_ERROR_INVALID_VALUE": "the driver rejected an argument (a probe bug or a driver too old "
    "for the call)",
    "CUDA_ERROR_INVALID_CONTEXT": "the GPU's context is gone (the GPU was reset during the probe)",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED": "the GPU's context is gone (the GPU was reset during the "
    "probe)",
}
UNKNOWN_MEANING = "see the CUDA driver API documentation of this error"
# Errors after which the GPU's context cannot be used again in this process.
STICKY_ERRORS = frozenset(
    {"CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_DEVICE_UNAVAILABLE"}
)


def describe_cuda_error(subject: str, error: CudaError) -> str:
    """'<subject>: <call> failed: <NAME> (<code>): <driver text>; meaning: <what to do>'."""
    return f"{subject}: {error}; meaning: {CUDA_ERROR_MEANINGS.get(error.name, UNKNOWN_MEANING)}"


# ---- parameters ----------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeParameters:
    """How the probe measures (docs/probe.md "Parameters").

    nvbandwidth measures with 512 MiB buffers, 4 warm-up copies and 3 samples of 16 copies
    each, and reports the median sample. The defaults keep that shape at a size that
    measures 8 GPUs (56 ordered pairs, both peer access modes) within the time budget.
    """

    size_bytes: int = 256 * MIB
    repetitions: int = 3  # timed samples per figure; the figure is their median
    copies_per_sample: int = 1  # copies between a sample's two events
    warmup_copies: int = 1  # untimed copies before a figure's samples
    latency_size_bytes: int = 4
    latency_repetitions: int = 50
    time_budget_s: float = 45.0
    pairs: tuple[tuple[int, int], ...] | None = None  # None: every ordered pair
    data_check_bytes: int = MIB
    link_load_s: float = 0.5  # sustained host-to-device copies before the link reading

    def problems(self) -> list[str]:
        """What is wrong with these parameters (empty when they can be used)."""
        problems = [
            f"{name} must be at least 1, not {value}"
            for name, value in (
                ("size_bytes", self.size_bytes),
                ("repetitions", self.repetitions),
                ("copies_per_sample", self.copies_per_sample),
                ("latency_size_bytes", self.latency_size_bytes),
                ("latency_repetitions", self.latency_repetitions),
                ("data_check_bytes", self.data_check_bytes),
            )
            if value < 1
        ]
        if self.warmup_copies < 0:
            problems.append(f"warmup_copies must be at least 0, not {self.warmup_copies}")
        if self.time_budget_s <= 0:
            problems.append(f"time_budget_s must be greater than 0, not {self.time_budget_s}")
        if self.link_load_s < 0:
            problems.append(f"link_load_s must be at least 0, not {self.link_load_s}")
        problems += [
            f"pair {src}->{dst}: a pair needs two different GPUs"
            for src, dst in self.pairs or ()
            if src == dst
        ]
        return problems

    def document(self) -> dict[str, Any]:
        return {
            "size_bytes": self.size_bytes,
            "repetitions": self.repetitions,
            "copies_per_sample": self.copies_per_sample,
            "warmup_copies": self.warmup_copies,
            "latency_size_bytes": self.latency_size_bytes,
            "latency_repetitions": self.latency_repetitions,
            "time_budget_s": self.time_budget_s,
            "link_load_s": self.link_load_s,
            "pairs": "all" if self.pairs is None else [list(pair) for pair in self.pairs],
        }


# The parameters that shape a figure: two probes compare like with like when they agree.
FIGURE_PARAMETERS = (
    "size_bytes",
    "repetitions",
    "copies_per_sample",
    "warmup_copies",
    "latency_size_bytes",
    "latency_repetitions",
)


def figure_parameters(probe: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A probe document's FIGURE_PARAMETERS (a key it predates: None); None without a
    parameters block."""
    parameters = (probe or {}).get("parameters")
    if not isinstance(parameters, Mapping):
        return None
    return {name: parameters.get(name) for name in FIGURE_PARAMETERS}


def parse_pairs(pairs: Any) -> tuple[tuple[int, int], ...] | None:
    """'all' -> None; [[0, 1], "1-0", ...] -> ((0, 1), (1, 0)). ValueError names a bad entry."""
    if pairs == "all" or pairs is None:
        return None
    if not isinstance(pairs, list):
        raise ValueError(f"pairs: {pairs!r}: use 'all' or a list of [src, dst] GPU indices")
    parsed: list[tuple[int, int]] = []
    for entry in pairs:
        parts = entry.split("-") if isinstance(entry, str) else entry
        try:
            src, dst = (int(part) for part in parts)
        except (TypeError, ValueError):
            raise ValueError(
                f"pairs: {entry!r} is not a GPU pair; write [src, dst] or 'src-dst' "
                "with NVML indices"
            ) from None
        parsed.append((src, dst))
    return tuple(parsed)


# ---- CPU binding ---------------------------------------------------------------------


def parse_cpulist(cpulist: str) -> set[int]:
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11} (sysfs local_cpulist format).

    The parsers' one bounded reader: ValueError for a malformed list or a CPU id above
    65535, so a list like ``0-4294967295`` is refused before anything is expanded.
    """
    return set(expand_cpu_list(cpulist))


def format_cpulist(cpus: set[int]) -> str:
    ranges: list[str] = []
    for cpu in sorted(cpus):
        if ranges and cpu == int(ranges[-1].rsplit("-", 1)[-1]) + 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{cpu}"
        else:
            ranges.append(str(cpu))
    return ",".join(ranges)


@contextlib.contextmanager
def bound_to_cpus(cpulist: str | None) -> Iterator[str | None]:
    """Bind the calling thread to `cpulist` (those of them it may use); restore on exit.

    Yields the CPUs actually bound (cpulist text), or None when no binding was made
    (no CPU list, or none of its CPUs is available to this process).
    """
    if not cpulist or not hasattr(os, "sched_setaffinity"):
        yield None
        return
    original = os.sched_getaffinity(0)
    try:
        listed = parse_cpulist(cpulist)
    except ValueError:  # a malformed local_cpulist binds nothing rather than ending the probe
        yield None
        return
    wanted = listed & original
    if not wanted:
        yield None
        return
    os.sched_setaffinity(0, wanted)
    try:
        yield format_cpulist(wanted)
    finally:
        os.sched_setaffinity(0, original)


# ---- link sampler --------------------------------------------------------------------


def start_link_sampler(
    use_nvml: bool, nvml_python_path: Sequence[str], smi_command: Sequence[str] | None
) -> tuple[Sampler | None, Callable[[], None], str | None]:
    """(sampler, stop, note): NVML when pynvml imports, else nvidia-smi, else none."""
    note = "NVML turned off"
    if use_nvml:
        try:
            pynvml = load_pynvml(nvml_python_path)
            pynvml.nvmlInit()
        except NvmlUnavailableError as error:
            note = str(error)
        except Exception as error:  # pynvml.NVMLError: the library is there but fails
            note = f"nvmlInit failed: {error}"
        else:
            return nvml_sampler(pynvml), pynvml.nvmlShutdown, None
    if smi_command:
        return smi_sampler(smi_command), lambda: None, f"{note}; link sampled through nvidia-smi"
    return None, lambda: None, f"{note}; the link is not sampled"


# ---- timing --------------------------------------------------------------------------


def gbytes_per_s(size_bytes: int, elapsed_ms: float) -> float | None:
    return round(size_bytes / (elapsed_ms / 1e3) / 1e9, 3) if elapsed_ms > 0 else None


@dataclass
class _Timer:
    """Times work queued on one stream with two events of the stream's context."""

    driver: CudaDriver
    stream: int
    start: int
    end: int

    def time_ms(self, issue: Callable[[], None], copies: int = 1) -> float:
        """Wall time on the stream of `copies` issues in a row, per issue."""
        self.driver.record(self.start, self.stream)
        for _ in range(copies):
            issue()
        self.driver.record(self.end, self.stream)
        self.driver.synchronize(self.end)
        return self.driver.elapsed_ms(self.start, self.end) / copies

    def median_ms(
        self, issue: Callable[[], None], samples: int, copies: int = 1, warmup: int = 1
    ) -> float:
        """Median per-issue time of `samples` timed runs of `copies` issues, after
        `warmup` untimed issues."""
        for _ in range(warmup):
            issue()
        self.driver.synchronize_stream(self.stream)
        return statistics.median(self.time_ms(issue, copies) for _ in range(samples))


def _quietly(call: Callable[..., None], *args: object) -> None:
    """A release during clean-up: its failure must not hide the error being reported."""
    with contextlib.suppress(CudaError):
        call(*args)


# ---- GPUs ----------------------------------------------------------------------------


@dataclass
class _Gpu:
    """One GPU during the probe: its facts, its CUDA handles and buffers, its entry."""

    index: int
    uuid: str | None
    bus_id: str | None
    numa_node: int | None
    local_cpulist: str | None
    ordinal: int | None = None
    device: int = 0
    context: int = 0
    source_pointer: int = 0  # device buffer copies read from
    landing_pointer: int = 0  # device buffer copies write to
    check_pointer: int = 0  # pinned host buffer for the data check
    error: str | None = None
    skipped: str | None = None  # why the GPU is left out on purpose
    entry: dict[str, Any] = field(default_factory=dict)

    @property
    def subject(self) -> str:
        return f"GPU {self.index} ({self.bus_id or 'unknown bus id'})"

    def fail(self, message: str) -> None:
        self.error = self.error or message
        self.entry["error"] = self.error

    def document(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "cuda_ordinal": self.ordinal,
            "uuid": self.uuid,
            "bus_id": self.bus_id,
            "numa_node": self.numa_node,
            "numa_binding": None,
            "h2d_gbytes_per_s": None,
            "d2h_gbytes_per_s": None,
            "link_under_load": None,
            "error": self.error,
            "skipped": self.skipped,
        }


def _gpus_from_facts(facts: dict[str, Any]) -> list[_Gpu]:
    return [
        _Gpu(
            index=gpu["index"],
            uuid=gpu.get("uuid"),
            bus_id=gpu.get("bus_id") or None,
            numa_node=gpu["numa_node"] if (gpu.get("numa_node") or 0) >= 0 else None,
            local_cpulist=gpu.get("local_cpulist") or None,
        )
        for gpu in facts.get("gpus", [])
    ]


def map_cuda_ordinals(driver: CudaDriver, gpus: list[_Gpu]) -> list[str]:
    """Give each GPU its CUDA ordinal, matched by UUID (bus id when the facts lack one).

    Returns probe-wide errors: CUDA devices the facts do not know.
    """
    by_uuid = {gpu.uuid: gpu for gpu in gpus if gpu.uuid}
    by_bus_id = {gpu.bus_id: gpu for gpu in gpus if gpu.bus_id}
    errors: list[str] = []
    for ordinal in range(driver.device_count()):
        device = driver.device(ordinal)
        uuid, bus_id = driver.uuid(device), driver.pci_bus_id(device)
        gpu = by_uuid.get(uuid) or by_bus_id.get(bus_id)
        if gpu is None:
            errors.append(
                f"CUDA device {ordinal} ({bus_id}, {uuid}) is not among the facts' GPUs; "
                "gather the facts again (gpu_facts) and rerun the probe"
            )
            continue
        gpu.ordinal, gpu.device = ordinal, device
    return errors


def _open_gpu(driver: CudaDriver, gpu: _Gpu, parameters: ProbeParameters, stack: Any) -> None:
    """Retain the GPU's context and allocate its buffers; release them with `stack`."""
    gpu.context = driver.retain_primary_context(gpu.device)
    stack.callback(_quietly, driver.release_primary_context, gpu.device)
    driver.set_current(gpu.context)
    for name in ("source_pointer", "landing_pointer"):
        pointer = driver.allocate_device(parameters.size_bytes)
        stack.callback(_quietly, driver.free_device, pointer)
        setattr(gpu, name, pointer)


def _measure_host_copies(
    driver: CudaDriver, gpu: _Gpu, parameters: ProbeParameters, sampler: Sampler | None
) -> None:
    """The link under sustained load, then h2d and d2h bandwidth from pinned memory local
    to the GPU (the load doubles as the figures' warm-up)."""
    with bound_to_cpus(gpu.local_cpulist) as bound_cpus, contextlib.ExitStack() as stack:
        gpu.entry["numa_binding"] = {"local_cpus": gpu.local_cpulist, "bound_cpus": bound_cpus}
        driver.set_current(gpu.context)
        host = driver.allocate_pinned_host(parameters.size_bytes)
        stack.callback(_quietly, driver.free_pinned_host, host)
        # The data-check buffer is allocated here too, so it is local to the GPU.
        gpu.check_pointer = driver.allocate_pinned_host(parameters.data_check_bytes)
        timer = _timer(driver, stack)
        size = parameters.size_bytes

        def to_device() -> None:
            driver.copy_host_to_device_async(gpu.landing_pointer, host, size, timer.stream)

        if sampler is not None and gpu.bus_id and parameters.link_load_s > 0:
            with LinkReading(sampler, gpu.bus_id, parameters.link_load_s) as reading:
                while True:
                    to_device()
                    driver.synchronize_stream(timer.stream)
                    if reading.done():
                        break
            gpu.entry["link_under_load"] = reading.result
        h2d_ms = timer.median_ms(
            to_device,
            parameters.repetitions,
            parameters.copies_per_sample,
            parameters.warmup_copies,
        )
        d2h_ms = timer.median_ms(
            lambda: driver.copy_device_to_host_async(host, gpu.source_pointer, size, timer.stream),
            parameters.repetitions,
            parameters.copies_per_sample,
            parameters.warmup_copies,
        )
    gpu.entry["h2d_gbytes_per_s"] = gbytes_per_s(size, h2d_ms)
    gpu.entry["d2h_gbytes_per_s"] = gbytes_per_s(size, d2h_ms)


def _timer(driver: CudaDriver, stack: Any) -> _Timer:
    """A stream and two events of the current context, released with `stack`."""
    stream = driver.create_stream()
    stack.callback(_quietly, driver.destroy_stream, stream)
    events = []
    for _ in range(2):
        events.append(driver.create_event())
        stack.callback(_quietly, driver.destroy_event, events[-1])
    return _Timer(driver, stream, *events)


# ---- pairs ---------------------------------------------------------------------------


DATA_CHECK_PATTERN = bytes((i * 73 + 41) & 0xFF for i in range(256))


def _pattern(size_bytes: int) -> bytes:
    return (DATA_CHECK_PATTERN * (size_bytes // len(DATA_CHECK_PATTERN) + 1))[:size_bytes]


@dataclass
class _PairRun:
    """What one pair's measurement works with: the GPUs, two streams, events, sizes."""

    driver: CudaDriver
    src: _Gpu
    dst: _Gpu
    forward: _Timer  # stream of src's context, carries src -> dst
    backward_stream: int  # second stream of src's context, carries dst -> src
    backward_end: int
    parameters: ProbeParameters

    def copy(self, src: _Gpu, dst: _Gpu, size_bytes: int, stream: int) -> None:
        self.driver.copy_peer_async(
            dst_pointer=dst.landing_pointer,
            dst_context=dst.context,
            src_pointer=src.source_pointer,
            src_context=src.context,
            size_bytes=size_bytes,
            stream=stream,
        )

    def unidirectional_ms(self, size_bytes: int, samples: int, copies: int, warmup: int) -> float:
        return self.forward.median_ms(
            lambda: self.copy(self.src, self.dst, size_bytes, self.forward.stream),
            samples,
            copies,
            warmup,
        )

    def bidirectional_ms(self) -> float:
        """Both directions started together on two streams; the later end counts."""
        driver, parameters = self.driver, self.parameters
        size, copies = parameters.size_bytes, parameters.copies_per_sample
        for _ in range(parameters.warmup_copies):
            self.copy(self.src, self.dst, size, self.forward.stream)
            self.copy(self.dst, self.src, size, self.backward_stream)
        driver.synchronize_stream(self.forward.stream)
        driver.synchronize_stream(self.backward_stream)
        samples = []
        for _ in range(parameters.repetitions):
            driver.record(self.forward.start, self.forward.stream)
            driver.stream_wait_event(self.backward_stream, self.forward.start)
            for _ in range(copies):
                self.copy(self.src, self.dst, size, self.forward.stream)
                self.copy(self.dst, self.src, size, self.backward_stream)
            driver.record(self.forward.end, self.forward.stream)
            driver.record(self.backward_end, self.backward_stream)
            driver.synchronize(self.forward.end)
            driver.synchronize(self.backward_end)
            slowest_ms = max(
                driver.elapsed_ms(self.forward.start, self.forward.end),
                driver.elapsed_ms(self.forward.start, self.backward_end),
            )
            samples.append(slowest_ms / copies)
        return statistics.median(samples)

    def figures(self) -> dict[str, Any]:
        parameters = self.parameters
        size = parameters.size_bytes
        latency_ms = self.unidirectional_ms(
            parameters.latency_size_bytes, parameters.latency_repetitions, 1, 1
        )
        bandwidth_ms = self.unidirectional_ms(
            size, parameters.repetitions, parameters.copies_per_sample, parameters.warmup_copies
        )
        return {
            "unidirectional_gbytes_per_s": gbytes_per_s(size, bandwidth_ms),
            "bidirectional_gbytes_per_s": gbytes_per_s(2 * size, self.bidirectional_ms()),
            "latency_ns": round(latency_ms * 1e6),
        }

    def data_check(self) -> str:
        """Write a pattern from src to dst, read it back on the host, compare."""
        driver, src, dst = self.driver, self.src, self.dst
        size = min(self.parameters.data_check_bytes, self.parameters.size_bytes)
        pattern = _pattern(size)
        ctypes.memmove(src.check_pointer, pattern, size)
        driver.copy_host_to_device(src.source_pointer, src.check_pointer, size)
        driver.set_current(dst.context)
        driver.memset_d8(dst.landing_pointer, 0, size)
        # The memset is queued on dst's default stream and the copy goes on a non-blocking
        # stream of src: nothing orders the two unless the memset is waited for.
        driver.synchronize_stream(0)
        driver.set_current(src.context)
        self.copy(src, dst, size, self.forward.stream)
        driver.synchronize_stream(self.forward.stream)
        driver.set_current(dst.context)
        driver.copy_device_to_host(dst.check_pointer, dst.landing_pointer, size)
        driver.set_current(src.context)
        return "passed" if ctypes.string_at(dst.check_pointer, size) == pattern else "failed"


@contextlib.contextmanager
def _peer_access(driver: CudaDriver, src: _Gpu, dst: _Gpu) -> Iterator[None]:
    """Peer access on in both directions for the block; afterwards off again where this
    block turned it on (access someone else in the process enabled stays)."""
    with contextlib.ExitStack() as stack:
        for this, peer in ((src, dst), (dst, src)):
            driver.set_current(this.context)
            if driver.enable_peer_access(peer.context):
                stack.callback(_disable_peer, driver, this, peer)
        driver.set_current(src.context)
        yield


def _disable_peer(driver: CudaDriver, this: _Gpu, peer: _Gpu) -> None:
    _quietly(driver.set_current, this.context)
    _quietly(driver.disable_peer_access, peer.context)


def _measure_pair(
    driver: CudaDriver, src: _Gpu, dst: _Gpu, parameters: ProbeParameters
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "src": src.index,
        "dst": dst.index,
        "can_access_peer": None,
        "p2p_enabled": None,
        "p2p_disabled": None,
        "data_check": "skipped",
        "error": None,
        "skipped": None,
    }
    left_out = next((gpu for gpu in (src, dst) if gpu.skipped), None)
    if left_out is not None:
        entry["skipped"] = f"{left_out.subject} is left out: {left_out.skipped}"
        return entry
    broken = next((gpu for gpu in (src, dst) if gpu.error), None)
    if broken is not None:
        entry["error"] = (
            f"pair {src.index}->{dst.index} not measured: {broken.subject} could not be "
            f"used (see gpus[{broken.index}].error)"
        )
        return entry
    try:
        entry["can_access_peer"] = driver.can_access_peer(src.device, dst.device)
        driver.set_current(src.context)
        with contextlib.ExitStack() as stack:
            forward = _timer(driver, stack)
            backward_stream = driver.create_stream()
            stack.callback(_quietly, driver.destroy_stream, backward_stream)
            backward_end = driver.create_event()
            stack.callback(_quietly, driver.destroy_event, backward_end)
            run = _PairRun(driver, src, dst, forward, backward_stream, backward_end, parameters)
            entry["p2p_disabled"] = run.figures()
            if entry["can_access_peer"]:
                with _peer_access(driver, src, dst):
                    entry["data_check"] = run.data_check()
                    entry["p2p_enabled"] = run.figures()
    except CudaError as error:
        entry["error"] = describe_cuda_error(f"pair {src.index}->{dst.index}", error)
        for gpu in (src, dst):
            _check_health(driver, gpu)
    return entry


def _check_health(driver: CudaDriver, gpu: _Gpu) -> None:
    """After a failed pair: is the GPU itself broken? Then later pairs skip it."""
    try:
        driver.set_current(gpu.context)
        driver.memset_d8(gpu.landing_pointer, 0, 1)
    except CudaError as error:
        if error.name in STICKY_ERRORS:
            gpu.fail(describe_cuda_error(f"{gpu.subject} stopped working during the probe", error))


# ---- the probe -----------------------------------------------------------------------


def _ordered_pairs(
    gpus: list[_Gpu], wanted: tuple[tuple[int, int], ...] | None
) -> tuple[list[tuple[_Gpu, _Gpu]], list[str]]:
    by_index = {gpu.index: gpu for gpu in gpus}
    if wanted is None:
        return [(a, b) for a in gpus for b in gpus if a is not b], []
    pairs, errors = [], []
    for src, dst in wanted:
        missing = [index for index in (src, dst) if index not in by_index]
        if missing:
            errors.append(
                f"pair {src}->{dst} asked for, but the node has no GPU "
                f"{', '.join(map(str, missing))} (GPU indices: {sorted(by_index)})"
            )
        else:
            pairs.append((by_index[src], by_index[dst]))
    return pairs, errors


def _prepare_gpus(
    driver: CudaDriver,
    gpus: list[_Gpu],
    parameters: ProbeParameters,
    sampler: Sampler | None,
    stack: Any,
) -> None:
    for gpu in gpus:
        if gpu.skipped:
            continue
        if gpu.ordinal is None:
            gpu.fail(
                f"{gpu.subject} ({gpu.uuid}) is not visible to the CUDA driver: lost, or "
                "hidden by CUDA_VISIBLE_DEVICES; check nvidia-smi and the kernel log"
            )
            continue
        try:
            _open_gpu(driver, gpu, parameters, stack)
            _measure_host_copies(driver, gpu, parameters, sampler)
        except CudaError as error:
            gpu.fail(describe_cuda_error(gpu.subject, error))


def run_probe(
    facts: dict[str, Any],
    parameters: ProbeParameters,
    *,
    cuda_library: str = "libcuda.so.1",
    sampler: Sampler | None = None,
    clock: Callable[[], float] = time.monotonic,
    skip: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Measure the node's GPU paths; the probe document (docs/probe.md).

    `skip`: GPUs (by UUID or bus id) to leave out, with the reason: nothing runs on them,
    and their entries and pairs carry the reason in `skipped`.
    """
    started_s = clock()
    document: dict[str, Any] = {
        "schema_version": PROBE_SCHEMA_VERSION,
        "timestamp": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "duration_s": 0.0,
        "parameters": parameters.document(),
        "path_config": path_config(facts),
        "driver": {"cuda_driver_version": None},
        "gpus": [],
        "pairs": [],
        "errors": parameters.problems(),
        "notes": [],
    }
    gpus = _gpus_from_facts(facts)
    for gpu in gpus:
        gpu.skipped = (skip or {}).get(gpu.uuid or "") or (skip or {}).get(gpu.bus_id or "")
        gpu.entry = gpu.document()
    document["gpus"] = [gpu.entry for gpu in gpus]
    if document["errors"]:
        return _finish(document, started_s, clock)
    try:
        driver = CudaDriver(cuda_library)
        document["driver"]["cuda_driver_version"] = driver.driver_version()
        document["errors"] += map_cuda_ordinals(driver, gpus)
    except CudaError as error:
        document["errors"].append(describe_cuda_error("the CUDA driver", error))
        for gpu in gpus:
            if not gpu.skipped:
                gpu.fail(f"{gpu.subject} not measured: the CUDA driver could not be used")
        return _finish(document, started_s, clock)
    for gpu in gpus:
        gpu.entry["cuda_ordinal"] = gpu.ordinal
    pairs, pair_errors = _ordered_pairs(gpus, parameters.pairs)
    document["errors"] += pair_errors
    with contextlib.ExitStack() as stack:
        _prepare_gpus(driver, gpus, parameters, sampler, stack)
        for position, (src, dst) in enumerate(pairs):
            elapsed_s = clock() - started_s
            if elapsed_s > parameters.time_budget_s:
                document["errors"].append(_budget_error(parameters, elapsed_s, pairs[position:]))
                break
            document["pairs"].append(_measure_pair(driver, src, dst, parameters))
        for gpu in gpus:
            if gpu.check_pointer:
                _quietly(driver.free_pinned_host, gpu.check_pointer)
    return _finish(document, started_s, clock)


def _budget_error(
    parameters: ProbeParameters, elapsed_s: float, left: list[tuple[_Gpu, _Gpu]]
) -> str:
    names = ", ".join(f"{src.index}->{dst.index}" for src, dst in left)
    return (
        f"time budget of {parameters.time_budget_s:g} s exceeded after {elapsed_s:.1f} s: "
        f"{len(left)} pair(s) not measured ({names}); raise time_budget_s, lower "
        "size_mib or repetitions, or probe fewer pairs"
    )


def _finish(document: dict[str, Any], started_s: float, clock: Callable[[], float]) -> dict:
    document["duration_s"] = round(clock() - started_s, 3)
    return document


# ---- saved results -------------------------------------------------------------------


def saved_copy_name(document: dict[str, Any]) -> str:
    """'probe-20261130T225500Z.json' from the document's timestamp."""
    stamp = str(document.get("timestamp", "")).replace("-", "").replace(":", "")
    return f"{SAVED_COPY_PREFIX}{stamp}.json"


def saved_copies(save_dir: str | Path) -> list[Path]:
    """The timestamped copies, oldest first."""
    return sorted(Path(save_dir).glob(f"{SAVED_COPY_PREFIX}*.json"))


def save_probe(document: dict[str, Any], save_dir: str | Path, keep: int) -> dict[str, Any]:
    """Write latest.json and a timestamped copy atomically; keep the newest `keep` copies.

    Returns {"latest": path, "copy": path, "pruned": [paths]}.
    """
    directory = Path(save_dir)
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    copy = directory / saved_copy_name(document)
    suffix = 1
    while copy.exists():
        suffix += 1
        copy = directory / saved_copy_name(document).replace(".json", f"-{suffix}.json")
    write_atomic(str(copy), text, mode=0o644)
    latest = directory / LATEST_NAME
    write_atomic(str(latest), text, mode=0o644)
    copies = saved_copies(directory)
    pruned = copies[: max(len(copies) - keep, 0)]
    for old in pruned:
        old.unlink()
    return {"latest": str(latest), "copy": str(copy), "pruned": [str(path) for path in pruned]}


def path_config(facts: Mapping[str, Any]) -> dict[str, Any]:
    """What sets the GPUs' paths besides the GPUs themselves: the IOMMU mode and the ACS
    control of every bridge above a GPU. A probe taken under another is not reused."""
    controls = {
        str(bridge.get("bdf")): (bridge.get("acs") or {}).get("control")
        for gpu in facts.get("gpus") or []
        for bridge in gpu.get("bridges") or []
    }
    return {
        "iommu_mode": (facts.get("iommu") or {}).get("mode"),
        "acs_controls": dict(sorted(controls.items())),
    }


def reuse_reason(
    saved: dict[str, Any] | None,
    facts: dict[str, Any],
    max_age_s: float,
    now_s: float,
    parameters: ProbeParameters | None = None,
) -> str | None:
    """Why the saved probe still stands for this node (None: measure again).

    A result is reused while it is younger than max_age_s, was taken on the same GPUs
    (the UUID set of the facts) under the same path configuration (``path_config``: the
    IOMMU mode, the bridges' ACS) and, given `parameters`, with the same figure
    parameters: probing loads the links, which a serving node feels.
    """
    if saved is None or max_age_s <= 0:
        return None
    if saved.get("path_config") != path_config(facts):
        return None
    if parameters is not None and figure_parameters(saved) != figure_parameters(
        {"parameters": parameters.document()}
    ):
        return None
    try:
        taken = datetime.strptime(saved["timestamp"], "%Y-%m-%dT%H:%M:%SZ")
        taken_s = taken.replace(tzinfo=timezone.utc).timestamp()
    except (KeyError, TypeError, ValueError):
        return None
    age_s = now_s - taken_s
    saved_uuids = sorted(gpu.get("uuid") or "" for gpu in saved.get("gpus", []))
    current_uuids = sorted(gpu.get("uuid") or "" for gpu in facts.get("gpus", []))
    if not 0 <= age_s < max_age_s or saved_uuids != current_uuids:
        return None
    return (
        f"reused the probe of {saved['timestamp']} ({age_s / 3600:.1f} h old, same GPUs; "
        f"max age {max_age_s / 3600:g} h)"
    )


# ---- GPUs that serve LingBot, and probes that left them out --------------------------


def serving_gpus(plan: Mapping[str, Any] | None, plan_path: str) -> dict[str, str]:
    """UUID and bus id -> why, for every GPU of the plan in force (docs/plan.md)."""
    serving: dict[str, str] = {}
    for instance in (plan or {}).get("instances") or []:
        if not isinstance(instance, Mapping):
            continue
        why = f"serves LingBot (instance {instance.get('name')} of {plan_path})"
        for key in (*(instance.get("gpu_uuids") or ()), *(instance.get("bus_ids") or ())):
            if key:
                serving[str(key)] = why
    return serving


def read_plan(plan_path: str) -> dict[str, Any] | None:
    """The plan in force, or None when there is none or it is not a JSON object."""
    try:
        plan = json.loads(Path(plan_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return plan if isinstance(plan, dict) else None


def fill_skipped(fresh: dict[str, Any], saved: Mapping[str, Any] | None) -> dict[str, Any]:
    """`fresh` with the entries it skipped taken from `saved` (taken on the same GPUs),
    each marked ``from_probe: <saved timestamp>``; `fresh` itself when nothing applies."""
    skipped_gpus = {gpu["index"] for gpu in fresh.get("gpus") or [] if gpu.get("skipped")}
    skipped_pairs = {
        (pair["src"], pair["dst"]) for pair in fresh.get("pairs") or [] if pair.get("skipped")
    }
    if not (skipped_gpus or skipped_pairs) or not saved:
        return fresh
    same_gpus = sorted(g.get("uuid") or "" for g in saved.get("gpus") or []) == sorted(
        g.get("uuid") or "" for g in fresh.get("gpus") or []
    )
    if not same_gpus:
        return fresh
    stamp = {"from_probe": saved.get("timestamp")}
    saved_gpus = {gpu.get("index"): gpu for gpu in saved.get("gpus") or []}
    saved_pairs = {(p.get("src"), p.get("dst")): p for p in saved.get("pairs") or []}
    filled = dict(fresh)
    filled["gpus"] = [
        {**saved_gpus[gpu["index"]], **stamp}
        if gpu["index"] in skipped_gpus and gpu["index"] in saved_gpus
        else gpu
        for gpu in fresh.get("gpus") or []
    ]
    filled["pairs"] = [
        {**saved_pairs[key], **stamp}
        if (key := (pair["src"], pair["dst"])) in skipped_pairs and key in saved_pairs
        else pair
        for pair in fresh.get("pairs") or []
    ]
    return filled


# ---- the module's options, and the reuse decided on the controller -------------------

# The p2p_probe module's options: the module and its action plugin validate with this.
PROBE_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "size_mib": {"type": "int", "default": 256},
    "repetitions": {"type": "int", "default": 3},
    "copies_per_sample": {"type": "int", "default": 1},
    "warmup_copies": {"type": "int", "default": 1},
    "link_load_s": {"type": "float", "default": 0.5},
    "latency_repetitions": {"type": "int", "default": 50},
    "time_budget_s": {"type": "float", "default": 45.0},
    "pairs": {"type": "raw", "default": "all"},
    "save_dir": {"type": "path", "default": DEFAULT_SAVE_DIR},
    "keep": {"type": "int", "default": 10},
    "save": {"type": "bool", "default": True},
    "parameters_from": {"type": "path"},
    "probe_serving_gpus": {"type": "bool", "default": False},
    "plan_path": {"type": "path", "default": "/etc/lingbot/plan.json"},
    "read_only": {"type": "bool", "default": False},
    "max_age_s": {"type": "float", "default": 0.0},
    "facts": {"type": "dict"},
    "root": {"type": "path", "default": "/"},
    "cuda_library": {"type": "str", "default": "libcuda.so.1"},
    "use_nvml": {"type": "bool", "default": True},
    "nvml_python_path": {"type": "list", "elements": "str", "default": []},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
}


def figures_of(document: Any, path: str) -> tuple[dict[str, Any], str | None]:
    """The figure parameters of the probe document read from `path` ({} when it has no
    complete set), and the note the probe carries about them."""
    figures = figure_parameters(document if isinstance(document, dict) else None)
    if not figures or any(value is None for value in figures.values()):
        return {}, f"parameters_from {path} has no complete parameters; the options apply"
    timestamp = document.get("timestamp")
    return figures, f"figure parameters taken from {path} (the probe of {timestamp})"


def options_parameters(
    options: Mapping[str, Any], figures: Mapping[str, Any]
) -> tuple[ProbeParameters | None, list[str]]:
    """The module's validated options (with the figures of parameters_from) as
    ProbeParameters, or None and what is wrong with them."""
    try:
        pairs = parse_pairs(options["pairs"])
    except ValueError as error:
        return None, [str(error)]
    parameters = ProbeParameters(
        **{
            "size_bytes": options["size_mib"] * MIB,
            "repetitions": options["repetitions"],
            "copies_per_sample": options["copies_per_sample"],
            "warmup_copies": options["warmup_copies"],
            "latency_repetitions": options["latency_repetitions"],
            **figures,
        },
        time_budget_s=options["time_budget_s"],
        link_load_s=options["link_load_s"],
        pairs=pairs,
    )
    # size_bytes is what the module computes from size_mib: name the option instead.
    problems = [p for p in parameters.problems() if not p.startswith("size_bytes ")]
    if options["size_mib"] < 1:
        problems.insert(0, f"size_mib must be at least 1, not {options['size_mib']}")
    if options["keep"] < 1:
        problems.append(f"keep must be at least 1, not {options['keep']}")
    return (None, problems) if problems else (parameters, [])


def probe_problems(probe: Mapping[str, Any] | None) -> list[str]:
    """Everything a probe document could not measure: probe-wide errors, then GPUs, then pairs."""
    if not isinstance(probe, Mapping):
        return []
    problems = [str(error) for error in probe.get("errors") or []]
    for key in ("gpus", "pairs"):
        problems += [
            str(entry["error"])
            for entry in probe.get(key) or []
            if isinstance(entry, Mapping) and entry.get("error")
        ]
    return problems


def reused_result(probe: dict[str, Any], reason: str) -> dict[str, Any]:
    """What p2p_probe returns when the saved probe stands for the node."""
    return {
        "changed": False,
        "probe": probe,
        "saved": {},
        "msg": reason,
        "ansible_facts": {PROBE_FACT_NAME: probe},
    }


def controller_reuse(  # noqa: PLR0911 - one return per reason the module must run
    options: Mapping[str, Any], saved_fact: Any, now_s: float
) -> tuple[str | None, str]:
    """(why the saved probe stands for the node, "") when the controller can answer the
    p2p_probe task with these validated options and ``ansible_facts.lingbot_saved_probe``
    without running the module; else (None, why the module runs).

    The rules are the module's: ``options_parameters`` and ``reuse_reason``. The node's
    clock when gpu_facts read the file is a floor for `now_s` (the controller's clock), so
    a controller clock behind the node's does not make the probe younger than it was then.
    Whatever only the node can tell makes the module run: read_only, facts the module
    gathers itself, another save directory, a parameters_from other than its latest.json.
    """
    if options["read_only"]:
        return None, "read_only returns the node's file"
    if not options["facts"]:
        return None, "the module gathers the facts itself"
    if not isinstance(saved_fact, Mapping) or not isinstance(saved_fact.get("save_dir"), str):
        return None, f"no ansible_facts.{SAVED_PROBE_FACT_NAME} (the gpu_facts role reads it)"
    save_dir = Path(options["save_dir"])
    if not save_dir.is_absolute() or save_dir != Path(saved_fact["save_dir"]):
        return None, (
            f"save_dir {options['save_dir']} is not the directory gpu_facts read "
            f"({saved_fact['save_dir']})"
        )
    saved = saved_fact.get("probe")
    if not isinstance(saved, dict):
        return None, f"no usable saved probe in {saved_fact['save_dir']}"
    figures: Mapping[str, Any] = {}
    if options["parameters_from"]:
        if Path(options["parameters_from"]) != save_dir / LATEST_NAME:
            return None, f"parameters_from {options['parameters_from']} is read on the node"
        figures = figures_of(saved, options["parameters_from"])[0]
    parameters, problems = options_parameters(options, figures)
    if parameters is None:
        return None, "; ".join(problems)
    read_at_s = saved_fact.get("read_at_s")
    if isinstance(read_at_s, int | float) and not isinstance(read_at_s, bool):
        now_s = max(now_s, float(read_at_s))
    reason = reuse_reason(saved, options["facts"], options["max_age_s"], now_s, parameters)
    if reason is None:
        return None, "the saved probe is too old, of other GPUs or of other figure parameters"
    return reason, ""
