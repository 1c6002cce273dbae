"""libcuda.so.1 driven through ctypes, the way the toolkit's copy-engine probe uses it."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from native_support import (
    ACS_PASSTHROUGH_CMDLINE,
    ACS_PROFILE,
    ACS_REDIRECT_BITS,
    ACS_TRANSLATED_CMDLINE,
    NVLINK_P2P,
    PHB_HOST_STAGED,
    PHB_P2P,
    RUN_SUBDIR,
    boot_profile,
    flatten,
    profile_names,
    profile_states,
    read_acs_control,
    scenario_state,
    write_acs_control,
)

pytestmark = pytest.mark.native

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_DEVICE_UNAVAILABLE = 46
CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705
CUDA_ERROR_LAUNCH_FAILED = 719
CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33
CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50
CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED = 2
PROBE_BYTES = 64 * 1024 * 1024
BANDWIDTH_TOLERANCE = 0.03


class Cuda:
    """A thin checked wrapper: call(name, *args) asserts CUDA_SUCCESS unless told."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self.lib = library
        self.lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        for name in ("cuMemcpyHtoD_v2", "cuMemsetD8_v2"):
            getattr(self.lib, name).argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        self.lib.cuMemsetD8_v2.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t]
        self.lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        self.lib.cuMemcpyPeerAsync.argtypes = [
            ctypes.c_uint64,
            ctypes.c_void_p,
            ctypes.c_uint64,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
        ]
        self.lib.cuMemcpyPeer.argtypes = self.lib.cuMemcpyPeerAsync.argtypes[:5]
        self.lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]

    def error_name(self, code: int) -> str:
        name = ctypes.c_char_p()
        self.lib.cuGetErrorName(code, ctypes.byref(name))
        return (name.value or b"?").decode()

    def call(self, name: str, *args: Any, expect: int = CUDA_SUCCESS) -> None:
        result = getattr(self.lib, name)(*args)
        assert result == expect, f"{name} returned {self.error_name(result)}"

    def context(self, ordinal: int) -> ctypes.c_void_p:
        context = ctypes.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(context), ordinal)
        return context

    def use(self, context: ctypes.c_void_p) -> None:
        self.call("cuCtxSetCurrent", context)

    def alloc(self, context: ctypes.c_void_p, size: int) -> int:
        self.use(context)
        pointer = ctypes.c_uint64()
        self.call("cuMemAlloc_v2", ctypes.byref(pointer), ctypes.c_size_t(size))
        return pointer.value

    def stream(self) -> ctypes.c_void_p:
        stream = ctypes.c_void_p()
        self.call("cuStreamCreate", ctypes.byref(stream), 0)
        return stream

    def event(self) -> ctypes.c_void_p:
        event = ctypes.c_void_p()
        self.call("cuEventCreate", ctypes.byref(event), 0)
        return event

    def elapsed_ms(self, start: ctypes.c_void_p, end: ctypes.c_void_p) -> float:
        milliseconds = ctypes.c_float()
        self.call("cuEventElapsedTime", ctypes.byref(milliseconds), start, end)
        return milliseconds.value


@pytest.fixture
def cuda_on(cuda_loader: Any, lab_root: Path) -> Any:
    def start(state_text: str) -> Cuda:
        cuda = Cuda(cuda_loader(state_text, lab_root))
        cuda.call("cuInit", 0)
        return cuda

    return start


def timed_peer_copy_gbytes_per_s(cuda: Cuda, peer_access: bool, size: int = PROBE_BYTES) -> float:
    first, second = cuda.context(0), cuda.context(1)
    src, dst = cuda.alloc(first, size), cuda.alloc(second, size)
    if peer_access:
        cuda.use(second)
        cuda.call("cuCtxEnablePeerAccess", first, 0)
    cuda.use(first)
    stream, start, end = cuda.stream(), cuda.event(), cuda.event()
    cuda.call("cuEventRecord", start, stream)
    cuda.call("cuMemcpyPeerAsync", dst, second, src, first, size, stream)
    cuda.call("cuEventRecord", end, stream)
    cuda.call("cuEventSynchronize", end)
    return size / (cuda.elapsed_ms(start, end) / 1e3) / 1e9


def assert_close(measured: float, expected: float) -> None:
    assert abs(measured - expected) <= BANDWIDTH_TOLERANCE * expected, (measured, expected)


def test_devices_match_the_state(cuda_on: Any) -> None:
    state = scenario_state("phb")
    cuda = cuda_on(flatten(state))
    count, version = ctypes.c_int(), ctypes.c_int()
    cuda.call("cuDeviceGetCount", ctypes.byref(count))
    cuda.call("cuDriverGetVersion", ctypes.byref(version))
    assert (count.value, version.value) == (2, 12040)
    for gpu in state["gpus"]:
        name, bus_id = ctypes.create_string_buffer(96), ctypes.create_string_buffer(32)
        total, bus, uuid = ctypes.c_size_t(), ctypes.c_int(), (ctypes.c_ubyte * 16)()
        cuda.call("cuDeviceGetName", name, 96, gpu["index"])
        cuda.call("cuDeviceGetPCIBusId", bus_id, 32, gpu["index"])
        cuda.call("cuDeviceTotalMem_v2", ctypes.byref(total), gpu["index"])
        cuda.call(
            "cuDeviceGetAttribute", ctypes.byref(bus), CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, gpu["index"]
        )
        cuda.call("cuDeviceGetUuid_v2", uuid, gpu["index"])
        assert name.value.decode() == gpu["name"]
        assert bus_id.value.decode() == gpu["bdf"].upper()
        assert total.value == gpu["memory_total_bytes"]
        assert bus.value == int(gpu["bdf"].split(":")[1], 16)
        assert bytes(uuid).hex() == gpu["uuid"].removeprefix("GPU-").replace("-", "")


def test_calls_before_init_fail(cuda_loader: Any, lab_root: Path) -> None:
    cuda = Cuda(cuda_loader(flatten(scenario_state("phb")), lab_root))
    cuda.call("cuDeviceGetCount", ctypes.byref(ctypes.c_int()), expect=CUDA_ERROR_NOT_INITIALIZED)


def test_libcuda_of_another_version_than_the_module_refuses_to_start(
    cuda_loader: Any, lab_root: Path
) -> None:
    state = scenario_state("phb")
    state["driver"]["library_version"] = "550.90.07"
    cuda = cuda_loader(flatten(state), lab_root)
    assert cuda.cuInit(0) == 803  # CUDA_ERROR_SYSTEM_DRIVER_MISMATCH


def test_timed_peer_copy_reports_the_profile_bandwidth(cuda_on: Any) -> None:
    cuda = cuda_on(flatten(scenario_state("phb")))
    assert_close(timed_peer_copy_gbytes_per_s(cuda, peer_access=True), PHB_P2P["gbytes_per_s"])


def test_peer_copy_without_peer_access_is_host_staged(cuda_on: Any) -> None:
    cuda = cuda_on(flatten(scenario_state("phb")))
    measured = timed_peer_copy_gbytes_per_s(cuda, peer_access=False)
    assert_close(measured, PHB_HOST_STAGED["gbytes_per_s"])


def test_nvlink_copy_is_fast(cuda_on: Any) -> None:
    cuda = cuda_on(flatten(scenario_state("nvlink")))
    assert_close(timed_peer_copy_gbytes_per_s(cuda, peer_access=True), NVLINK_P2P["gbytes_per_s"])


def bidirectional_gbytes_per_s(cuda: Cuda) -> float:
    """Two equal peer copies in opposite directions, started together: 2 x bytes over the
    time of the later one to finish."""
    first, second = cuda.context(0), cuda.context(1)
    a_src, a_dst = cuda.alloc(first, PROBE_BYTES), cuda.alloc(first, PROBE_BYTES)
    b_src, b_dst = cuda.alloc(second, PROBE_BYTES), cuda.alloc(second, PROBE_BYTES)
    cuda.use(second)
    cuda.call("cuCtxEnablePeerAccess", first, 0)
    cuda.use(first)
    cuda.call("cuCtxEnablePeerAccess", second, 0)
    forward, backward = cuda.stream(), cuda.stream()
    start, forward_end, backward_end = cuda.event(), cuda.event(), cuda.event()
    cuda.call("cuEventRecord", start, forward)
    cuda.call("cuMemcpyPeerAsync", b_dst, second, a_src, first, PROBE_BYTES, forward)
    cuda.call("cuMemcpyPeerAsync", a_dst, first, b_src, second, PROBE_BYTES, backward)
    cuda.call("cuEventRecord", forward_end, forward)
    cuda.call("cuEventRecord", backward_end, backward)
    cuda.call("cuCtxSynchronize")
    slowest_ms = max(cuda.elapsed_ms(start, forward_end), cuda.elapsed_ms(start, backward_end))
    return 2 * PROBE_BYTES / (slowest_ms / 1e3) / 1e9


def test_bidirectional_copies_share_the_link(cuda_on: Any) -> None:
    cuda = cuda_on(flatten(scenario_state("phb")))
    assert_close(bidirectional_gbytes_per_s(cuda), PHB_P2P["bidir_gbytes_per_s"])


def test_copies_move_the_bytes(cuda_on: Any) -> None:
    cuda = cuda_on(flatten(scenario_state("phb")))
    size = 1 << 20
    pattern = bytes(range(256)) * (size // 256)
    first, second = cuda.context(0), cuda.context(1)
    src, dst = cuda.alloc(first, size), cuda.alloc(second, size)
    cuda.use(second)
    cuda.call("cuCtxEnablePeerAccess", first, 0)
    cuda.call("cuMemsetD8_v2", dst, 0, size)
    cuda.call("cuMemcpyHtoD_v2", src, pattern, size)
    cuda.call("cuMemcpyPeer", dst, second, src, first, size)
    readback = ctypes.create_string_buffer(size)
    cuda.call("cuMemcpyDtoH_v2", readback, dst, size)
    assert readback.raw == pattern


def test_iommu_drop_fault_is_caught_by_readback(cuda_on: Any) -> None:
    cuda = cuda_on(flatten(scenario_state("iommu-drop")))
    size = 1 << 20
    first, second = cuda.context(0), cuda.context(1)
    src, dst = cuda.alloc(first, size), cuda.alloc(second, size)
    cuda.use(second)
    cuda.call("cuCtxEnablePeerAccess", first, 0)
    cuda.call("cuMemsetD8_v2", dst, 0, size)
    cuda.call("cuMemcpyHtoD_v2", src, b"\xa5" * size, size)
    cuda.call("cuMemcpyPeer", dst, second, src, first, size)
    readback = ctypes.create_string_buffer(size)
    cuda.call("cuMemcpyDtoH_v2", readback, dst, size)
    assert readback.raw == b"\x00" * size
    cuda.call("cuCtxDisablePeerAccess", first)
    cuda.call("cuMemcpyPeer", dst, second, src, first, size)
    cuda.call("cuMemcpyDtoH_v2", readback, dst, size)
    assert readback.raw == b"\xa5" * size


def test_peer_access_errors(cuda_on: Any) -> None:
    cuda = cuda_on(flatten(scenario_state("phb")))
    first, second = cuda.context(0), cuda.context(1)
    cuda.use(first)
    cuda.call("cuCtxDisablePeerAccess", second, expect=CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)
    cuda.call("cuCtxEnablePeerAccess", second, 0)
    cuda.call("cuCtxEnablePeerAccess", second, 0, expect=CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
    cuda.call("cuCtxEnablePeerAccess", second, 1, expect=CUDA_ERROR_INVALID_VALUE)
    cuda.call("cuCtxDisablePeerAccess", second)


def test_geforce_cannot_access_peer(cuda_on: Any) -> None:
    cuda = cuda_on(flatten(scenario_state("geforce")))
    can_access, attribute = ctypes.c_int(-1), ctypes.c_int(-1)
    cuda.call("cuDeviceCanAccessPeer", ctypes.byref(can_access), 0, 1)
    cuda.call(
        "cuDeviceGetP2PAttribute",
        ctypes.byref(attribute),
        CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED,
        0,
        1,
    )
    assert (can_access.value, attribute.value) == (0, 0)
    first, second = cuda.context(0), cuda.context(1)
    cuda.use(first)
    cuda.call("cuCtxEnablePeerAccess", second, 0, expect=CUDA_ERROR_PEER_ACCESS_UNSUPPORTED)


def test_lost_gpu_has_no_context(cuda_on: Any) -> None:
    cuda = cuda_on(flatten(scenario_state("lost")))
    context = ctypes.c_void_p()
    cuda.call(
        "cuDevicePrimaryCtxRetain", ctypes.byref(context), 1, expect=CUDA_ERROR_DEVICE_UNAVAILABLE
    )


def test_device_fails_mid_run(cuda_on: Any) -> None:
    cuda = cuda_on(flatten(scenario_state("fails-after-copies")))
    second = cuda.context(1)
    dst = cuda.alloc(second, 4096)
    for _ in range(5):
        cuda.call("cuMemcpyHtoD_v2", dst, b"\x01" * 4096, 4096)
    cuda.call("cuMemcpyHtoD_v2", dst, b"\x01" * 4096, 4096, expect=CUDA_ERROR_LAUNCH_FAILED)
    cuda.call("cuMemcpyHtoD_v2", dst, b"\x01" * 4096, 4096, expect=CUDA_ERROR_LAUNCH_FAILED)


def busy_record(lab_root: Path, index: int) -> tuple[float, float, float]:
    until_s, since_s, last_s = map(
        float, (lab_root / RUN_SUBDIR / "busy" / str(index)).read_text().split()
    )
    return until_s, since_s, last_s


def copy_to_device_for(cuda: Cuda, context: ctypes.c_void_p, seconds: float) -> None:
    """Back-to-back 1 MiB host-to-device copies on GPU `context` for `seconds` (wall time)."""
    size = 1 << 20
    dst = cuda.alloc(context, size)
    source = ctypes.create_string_buffer(size)
    deadline_s = time.monotonic() + seconds
    while True:
        cuda.call("cuMemcpyHtoD_v2", dst, source, size)
        if time.monotonic() >= deadline_s:
            return


def test_a_copy_puts_the_gpu_in_p0_but_the_link_ramps_later(
    cuda_on: Any, lab_root: Path, nvml_session: Any
) -> None:
    text = flatten(scenario_state("phb"))
    cuda = cuda_on(text)
    nvml = nvml_session(text)
    handle = nvml.nvmlDeviceGetHandleByIndex(1)
    assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 1
    timed_peer_copy_gbytes_per_s(cuda, peer_access=True, size=1 << 20)
    until_s, since_s, last_s = busy_record(lab_root, 1)
    assert since_s <= last_s < until_s <= time.time() + 1.5
    # One short copy: the GPU is working (P0), its link has not retrained yet.
    assert nvml.nvmlDeviceGetPerformanceState(handle) == nvml.NVML_PSTATE_0
    assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 1
    # Waiting is not load: the link rises only with sustained copies.
    time.sleep(0.3)
    assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 1


def test_sustained_copies_ramp_the_link_and_idle_drops_it(
    cuda_on: Any, lab_root: Path, nvml_session: Any
) -> None:
    text = flatten(scenario_state("phb"))  # no ramp_ms in the state: the lab's 250 ms
    cuda = cuda_on(text)
    nvml = nvml_session(text)
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    context = cuda.context(0)
    copy_to_device_for(cuda, context, 0.1)
    assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 1
    copy_to_device_for(cuda, context, 0.2)
    assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 4
    assert nvml.nvmlDeviceGetPcieSpeed(handle) == 16000
    _until_s, since_s, last_s = busy_record(lab_root, 0)
    assert last_s - since_s >= 0.25
    # The GPU goes idle 1 s after its last copy; the next load starts a new ramp.
    (lab_root / RUN_SUBDIR / "busy" / "0").write_text(f"{time.time() - 0.01} {since_s} {last_s}\n")
    assert nvml.nvmlDeviceGetPerformanceState(handle) == nvml.NVML_PSTATE_8
    assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 1
    copy_to_device_for(cuda, context, 0.05)
    assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 1


def test_the_state_sets_the_ramp_time(cuda_on: Any, lab_root: Path, nvml_session: Any) -> None:
    state = scenario_state("phb")
    state["gpus"][0]["link"]["ramp_ms"] = 0
    text = flatten(state)
    cuda = cuda_on(text)
    nvml = nvml_session(text)
    cuda.call("cuMemcpyHtoD_v2", cuda.alloc(cuda.context(0), 4096), b"\x01" * 4096, 4096)
    assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(nvml.nvmlDeviceGetHandleByIndex(0)) == 4


def readback(cuda: Cuda, pointer: int, size: int) -> bytes:
    buffer = ctypes.create_string_buffer(size)
    cuda.call("cuMemcpyDtoH_v2", buffer, pointer, size)
    return buffer.raw


def test_memset_is_asynchronous_and_lands_on_its_stream(cuda_on: Any) -> None:
    """cuMemsetD8_v2 on device memory is queued on the default stream (it returns before
    the bytes land): a copy on a non-blocking stream not ordered after it races it."""
    cuda = cuda_on(flatten(scenario_state("phb")))
    size = 1 << 20
    pattern = bytes(range(256)) * (size // 256)
    first, second = cuda.context(0), cuda.context(1)
    src, dst = cuda.alloc(first, size), cuda.alloc(second, size)
    cuda.use(first)
    cuda.call("cuMemcpyHtoD_v2", src, pattern, size)
    non_blocking = ctypes.c_void_p()
    cuda.call("cuStreamCreate", ctypes.byref(non_blocking), 1)
    # Unordered: the memset on GPU 1's default stream lands after the peer copy.
    cuda.use(second)
    cuda.call("cuMemsetD8_v2", dst, 0, size)
    cuda.use(first)
    cuda.call("cuMemcpyPeerAsync", dst, second, src, first, size, non_blocking)
    cuda.call("cuStreamSynchronize", non_blocking)
    cuda.use(second)
    assert readback(cuda, dst, size) == b"\x00" * size
    # Ordered by a host wait on the memset's stream: the copy's bytes are the last.
    cuda.call("cuMemsetD8_v2", dst, 0, size)
    cuda.call("cuStreamSynchronize", None)
    cuda.use(first)
    cuda.call("cuMemcpyPeerAsync", dst, second, src, first, size, non_blocking)
    cuda.call("cuStreamSynchronize", non_blocking)
    cuda.use(second)
    assert readback(cuda, dst, size) == pattern


def test_memset_async_orders_by_stream_and_event(cuda_on: Any) -> None:
    cuda = cuda_on(flatten(scenario_state("phb")))
    size = 4096
    context = cuda.context(0)
    target, source = cuda.alloc(context, size), cuda.alloc(context, size)
    cuda.call("cuMemcpyHtoD_v2", source, b"\x5a" * size, size)
    one, two = ctypes.c_void_p(), ctypes.c_void_p()
    cuda.call("cuStreamCreate", ctypes.byref(one), 1)
    cuda.call("cuStreamCreate", ctypes.byref(two), 1)
    cuda.lib.cuMemsetD8Async.argtypes = [
        ctypes.c_uint64,
        ctypes.c_ubyte,
        ctypes.c_size_t,
        ctypes.c_void_p,
    ]
    cuda.lib.cuMemcpyDtoDAsync_v2.argtypes = [
        ctypes.c_uint64,
        ctypes.c_uint64,
        ctypes.c_size_t,
        ctypes.c_void_p,
    ]
    # Same stream: memset, then copy; the copy wins.
    cuda.call("cuMemsetD8Async", target, 0x11, size, one)
    cuda.call("cuMemcpyDtoDAsync_v2", target, source, size, one)
    cuda.call("cuStreamSynchronize", one)
    assert readback(cuda, target, size) == b"\x5a" * size
    # Another stream waiting on an event recorded after the memset: ordered too.
    done = cuda.event()
    cuda.call("cuMemsetD8Async", target, 0x22, size, one)
    cuda.call("cuEventRecord", done, one)
    cuda.call("cuStreamWaitEvent", two, done, 0)
    cuda.call("cuMemcpyDtoDAsync_v2", target, source, size, two)
    cuda.call("cuStreamSynchronize", two)
    cuda.call("cuStreamSynchronize", one)
    assert readback(cuda, target, size) == b"\x5a" * size
    # Not ordered: a copy on another stream reads the bytes from before the memset.
    copy = cuda.alloc(context, size)
    cuda.call("cuMemsetD8Async", source, 0x33, size, one)
    cuda.call("cuMemcpyDtoDAsync_v2", copy, source, size, two)
    cuda.call("cuCtxSynchronize")
    assert readback(cuda, copy, size) == b"\x5a" * size
    assert readback(cuda, source, size) == b"\x33" * size


def test_the_legacy_default_stream_orders_blocking_streams_only(cuda_on: Any) -> None:
    cuda = cuda_on(flatten(scenario_state("phb")))
    size = 4096
    context = cuda.context(0)
    target, source = cuda.alloc(context, size), cuda.alloc(context, size)
    cuda.call("cuMemcpyHtoD_v2", source, b"\x7e" * size, size)
    cuda.lib.cuMemcpyDtoDAsync_v2.argtypes = [
        ctypes.c_uint64,
        ctypes.c_uint64,
        ctypes.c_size_t,
        ctypes.c_void_p,
    ]
    blocking = cuda.stream()  # flags 0: synchronizes with the legacy default stream
    cuda.call("cuMemsetD8_v2", target, 0, size)
    cuda.call("cuMemcpyDtoDAsync_v2", target, source, size, blocking)
    cuda.call("cuStreamSynchronize", blocking)
    assert readback(cuda, target, size) == b"\x7e" * size
    invalid = ctypes.c_void_p()
    cuda.call("cuStreamCreate", ctypes.byref(invalid), 4, expect=CUDA_ERROR_INVALID_VALUE)


def test_error_names_and_strings(cuda_on: Any) -> None:
    cuda = cuda_on(flatten(scenario_state("phb")))
    text = ctypes.c_char_p()
    cuda.lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    cuda.call("cuGetErrorString", CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, ctypes.byref(text))
    assert text.value == b"peer access is already enabled"
    assert cuda.error_name(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED) == (
        "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"
    )


def test_visible_devices_reorder_ordinals(
    cuda_loader: Any, lab_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = scenario_state("phb")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{state['gpus'][1]['uuid'][:12]},0")
    cuda = Cuda(cuda_loader(flatten(state), lab_root))
    cuda.call("cuInit", 0)
    bus = ctypes.c_int()
    cuda.call("cuDeviceGetAttribute", ctypes.byref(bus), CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0)
    assert bus.value == 0x42


@pytest.mark.parametrize("profile_name", profile_names())
def test_profile_peer_bandwidth(cuda_on: Any, profile_name: str) -> None:
    states = {name: (state, text) for name, state, text in profile_states()}
    state, text = states[profile_name]
    pair = next(p for p in state["pairs"] if (p["a"], p["b"]) == (0, 1))
    if any(gpu["lost"] for gpu in state["gpus"][:2]):
        pytest.skip("a GPU of the first pair is lost")
    cuda = cuda_on(text)
    expected = pair["p2p"] or pair["host_staged"]
    measured = timed_peer_copy_gbytes_per_s(cuda, peer_access=pair["p2p"] is not None)
    assert_close(measured, expected["gbytes_per_s"])


# ---- ACS redirect on the switch ports, read live at each copy ----------------------

ACS_PROBE_BYTES = 16 * 1024 * 1024


class PeerProbe:
    """GPU 0 to GPU 1 with peer access on, the same buffers and stream copy after copy."""

    def __init__(self, cuda: Cuda, size: int = ACS_PROBE_BYTES) -> None:
        self.cuda = cuda
        self.size = size
        first, second = cuda.context(0), cuda.context(1)
        self.src, self.dst = cuda.alloc(first, size), cuda.alloc(second, size)
        cuda.use(second)
        cuda.call("cuCtxEnablePeerAccess", first, 0)
        cuda.use(first)
        self.first, self.second = first, second
        self.stream, self.start, self.end = cuda.stream(), cuda.event(), cuda.event()

    def elapsed_ms(self, size: int) -> float:
        cuda = self.cuda
        cuda.call("cuEventRecord", self.start, self.stream)
        cuda.call(
            "cuMemcpyPeerAsync", self.dst, self.second, self.src, self.first, size, self.stream
        )
        cuda.call("cuEventRecord", self.end, self.stream)
        cuda.call("cuEventSynchronize", self.end)
        return cuda.elapsed_ms(self.start, self.end)

    def gbytes_per_s(self) -> float:
        return self.size / (self.elapsed_ms(self.size) / 1e3) / 1e9

    def latency_ns(self) -> float:
        return self.elapsed_ms(1) * 1e6


def acs_pair(state: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in state["pairs"] if (p["a"], p["b"]) == (0, 1))


def acs_configs(lab_root: Path, pair: dict[str, Any]) -> list[Path]:
    """The pair's ACS ports' config files under the temp root (the node's /sys paths)."""
    return [lab_root / port["config_path"].lstrip("/") for port in pair["acs_redirect_ports"]]


def assert_figures(probe: PeerProbe, figures: dict[str, float]) -> None:
    assert_close(probe.gbytes_per_s(), figures["gbytes_per_s"])
    assert_close(probe.latency_ns(), figures["latency_ns"])


def test_clearing_acs_redirect_gives_the_switch_figures_and_setting_it_restores(
    cuda_on: Any, lab_root: Path
) -> None:
    state, text = boot_profile(lab_root, ACS_PROFILE, ACS_PASSTHROUGH_CMDLINE)
    pair = acs_pair(state)
    redirected, direct = pair["p2p"], pair["p2p_without_acs_redirect"]
    assert direct["gbytes_per_s"] > 1.2 * redirected["gbytes_per_s"]
    configs = acs_configs(lab_root, pair)
    assert [config.parent.name for config in configs] == ["0000:18:00.0", "0000:18:01.0"]
    assert all(read_acs_control(c) & ACS_REDIRECT_BITS == ACS_REDIRECT_BITS for c in configs)
    probe = PeerProbe(cuda_on(text))
    assert_figures(probe, redirected)
    for config in configs:
        write_acs_control(config, 0x0000, ACS_REDIRECT_BITS)
    assert_figures(probe, direct)
    for config in configs:
        write_acs_control(config, ACS_REDIRECT_BITS, ACS_REDIRECT_BITS)
    assert_figures(probe, redirected)


def test_setpci_on_the_rendered_sysfs_clears_and_restores_the_redirect(
    cuda_on: Any, lab_root: Path
) -> None:
    """The operator's command itself, pointed at the temp root's sysfs."""
    if shutil.which("setpci") is None:
        pytest.skip("setpci (pciutils) is not installed")
    state, text = boot_profile(lab_root, ACS_PROFILE, ACS_PASSTHROUGH_CMDLINE)
    pair = acs_pair(state)
    access = ["-A", "linux-sysfs", "-O", f"sysfs.path={lab_root / 'sys' / 'bus' / 'pci'}"]

    def setpci_all(control: str) -> None:
        for port in pair["acs_redirect_ports"]:
            command = ["setpci", *access, "-s", port["bdf"], f"ECAP_ACS+6.w={control}"]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            assert done.returncode == 0, done.stderr

    probe = PeerProbe(cuda_on(text))
    assert_close(probe.gbytes_per_s(), pair["p2p"]["gbytes_per_s"])
    setpci_all("0000:000c")
    assert_close(probe.gbytes_per_s(), pair["p2p_without_acs_redirect"]["gbytes_per_s"])
    setpci_all("000c:000c")
    assert_close(probe.gbytes_per_s(), pair["p2p"]["gbytes_per_s"])


def test_bidirectional_copies_follow_the_acs_redirect(cuda_on: Any, lab_root: Path) -> None:
    state, text = boot_profile(lab_root, ACS_PROFILE, ACS_PASSTHROUGH_CMDLINE)
    pair = acs_pair(state)
    for config in acs_configs(lab_root, pair):
        write_acs_control(config, 0x0000, ACS_REDIRECT_BITS)
    cuda = cuda_on(text)
    assert_close(
        bidirectional_gbytes_per_s(cuda), pair["p2p_without_acs_redirect"]["bidir_gbytes_per_s"]
    )


@pytest.mark.parametrize(
    "value_mask_by_port",
    [
        ((0x0000, 0x000C), None),
        ((0x0000, 0x0004), (0x0000, 0x0004)),
        ((0x0000, 0x0008), (0x0000, 0x0008)),
    ],
    ids=["other-port-redirects", "completion-redirect-left", "request-redirect-left"],
)
def test_any_redirecting_port_keeps_the_redirected_figures(
    cuda_on: Any, lab_root: Path, value_mask_by_port: tuple[Any, ...]
) -> None:
    state, text = boot_profile(lab_root, ACS_PROFILE, ACS_PASSTHROUGH_CMDLINE)
    pair = acs_pair(state)
    for config, value_mask in zip(acs_configs(lab_root, pair), value_mask_by_port, strict=True):
        if value_mask is not None:
            write_acs_control(config, *value_mask)
    probe = PeerProbe(cuda_on(text))
    assert_close(probe.gbytes_per_s(), pair["p2p"]["gbytes_per_s"])


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_an_unreadable_config_space_keeps_the_redirected_figures(
    cuda_on: Any, lab_root: Path, damage: str
) -> None:
    state, text = boot_profile(lab_root, ACS_PROFILE, ACS_PASSTHROUGH_CMDLINE)
    pair = acs_pair(state)
    configs = acs_configs(lab_root, pair)
    for config in configs:
        write_acs_control(config, 0x0000, ACS_REDIRECT_BITS)
    probe = PeerProbe(cuda_on(text))
    assert_close(probe.gbytes_per_s(), pair["p2p_without_acs_redirect"]["gbytes_per_s"])
    if damage == "truncated":  # what an unprivileged read of a real config file returns
        configs[1].write_bytes(configs[1].read_bytes()[:64])
    else:
        configs[1].unlink()
    assert_close(probe.gbytes_per_s(), pair["p2p"]["gbytes_per_s"])


def test_a_translating_iommu_wins_over_cleared_acs_redirect(cuda_on: Any, lab_root: Path) -> None:
    state, text = boot_profile(lab_root, ACS_PROFILE, ACS_TRANSLATED_CMDLINE)
    pair = acs_pair(state)
    assert pair["p2p"]["gbytes_per_s"] == 6.1  # the profile's p2p_iommu_translated
    configs = acs_configs(lab_root, pair)
    assert len(configs) == 2
    for config in configs:
        write_acs_control(config, 0x0000, ACS_REDIRECT_BITS)
    probe = PeerProbe(cuda_on(text))
    assert_figures(probe, pair["p2p"])
