"""A minimal ctypes binding to the CUDA driver API (libcuda.so.1), no CUDA toolkit needed.

What a copy-engine probe needs: devices (bus id, UUID, attributes, peer access), primary
contexts, device and pinned host memory, synchronous and asynchronous copies (host to
device, device to host, peer to peer), memset, streams and events for timing. Every
failing call raises CudaError naming the call, the CUresult name and the driver's
description. Stdlib only.

Ordering follows the driver's rules: memsets on device memory are asynchronous with
respect to the host (cuMemsetD8_v2 is queued on the legacy default stream, like
cuMemsetD8Async on a stream), and the streams made here are non-blocking, so nothing
orders them with the default stream: wait on the stream (or an event) before work that
must see the memset's bytes.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

CUDA_LIBRARY = "libcuda.so.1"
CUDA_SUCCESS = 0
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
PCI_BUS_ID_LENGTH = 32
CU_EVENT_DEFAULT = 0
CU_STREAM_NON_BLOCKING = 1
CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41
CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED = 2
UUID_BYTES = 16

CUresult = ctypes.c_int
CUdevice = ctypes.c_int
CUdeviceptr = ctypes.c_ulonglong
CUcontext = ctypes.c_void_p
CUevent = ctypes.c_void_p
CUstream = ctypes.c_void_p


class CUuuid(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * UUID_BYTES)]


def format_uuid(raw: bytes) -> str:
    """16 UUID bytes as NVML and nvidia-smi print them: 'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxx...'."""
    text = raw.hex()
    return f"GPU-{text[0:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"


class CudaError(RuntimeError):
    """A driver call failed (or the library could not be loaded: code -1)."""

    def __init__(self, call: str, code: int, name: str, description: str) -> None:
        super().__init__(f"{call} failed: {name} ({code}): {description}")
        self.call = call
        self.code = code
        self.name = name


# name -> (argtypes); every entry point returns CUresult. The first existing name wins.
_SIGNATURES: dict[tuple[str, ...], list[type]] = {
    ("cuInit",): [ctypes.c_uint],
    ("cuDriverGetVersion",): [ctypes.POINTER(ctypes.c_int)],
    ("cuDeviceGetCount",): [ctypes.POINTER(ctypes.c_int)],
    ("cuDeviceGet",): [ctypes.POINTER(CUdevice), ctypes.c_int],
    ("cuDeviceGetPCIBusId",): [ctypes.c_char_p, ctypes.c_int, CUdevice],
    ("cuDeviceGetUuid_v2", "cuDeviceGetUuid"): [ctypes.POINTER(CUuuid), CUdevice],
    ("cuDeviceGetAttribute",): [ctypes.POINTER(ctypes.c_int), ctypes.c_int, CUdevice],
    ("cuDeviceCanAccessPeer",): [ctypes.POINTER(ctypes.c_int), CUdevice, CUdevice],
    ("cuDeviceGetP2PAttribute",): [ctypes.POINTER(ctypes.c_int), ctypes.c_int, CUdevice, CUdevice],
    ("cuDevicePrimaryCtxRetain",): [ctypes.POINTER(CUcontext), CUdevice],
    ("cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"): [CUdevice],
    ("cuCtxSetCurrent",): [CUcontext],
    ("cuCtxEnablePeerAccess",): [CUcontext, ctypes.c_uint],
    ("cuCtxDisablePeerAccess",): [CUcontext],
    ("cuMemAlloc_v2",): [ctypes.POINTER(CUdeviceptr), ctypes.c_size_t],
    ("cuMemFree_v2",): [CUdeviceptr],
    ("cuMemAllocHost_v2",): [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t],
    ("cuMemFreeHost",): [ctypes.c_void_p],
    ("cuMemcpyHtoD_v2",): [CUdeviceptr, ctypes.c_void_p, ctypes.c_size_t],
    ("cuMemcpyDtoH_v2",): [ctypes.c_void_p, CUdeviceptr, ctypes.c_size_t],
    ("cuMemcpyHtoDAsync_v2",): [CUdeviceptr, ctypes.c_void_p, ctypes.c_size_t, CUstream],
    ("cuMemcpyDtoHAsync_v2",): [ctypes.c_void_p, CUdeviceptr, ctypes.c_size_t, CUstream],
    ("cuMemcpyPeerAsync",): [
        CUdeviceptr,
        CUcontext,
        CUdeviceptr,
        CUcontext,
        ctypes.c_size_t,
        CUstream,
    ],
    ("cuMemsetD8_v2",): [CUdeviceptr, ctypes.c_ubyte, ctypes.c_size_t],
    ("cuMemsetD8Async",): [CUdeviceptr, ctypes.c_ubyte, ctypes.c_size_t, CUstream],
    ("cuStreamCreate",): [ctypes.POINTER(CUstream), ctypes.c_uint],
    ("cuStreamDestroy_v2", "cuStreamDestroy"): [CUstream],
    ("cuStreamSynchronize",): [CUstream],
    ("cuStreamWaitEvent",): [CUstream, CUevent, ctypes.c_uint],
    ("cuEventCreate",): [ctypes.POINTER(CUevent), ctypes.c_uint],
    ("cuEventRecord",): [CUevent, CUstream],
    ("cuEventSynchronize",): [CUevent],
    ("cuEventElapsedTime",): [ctypes.POINTER(ctypes.c_float), CUevent, CUevent],
    ("cuEventDestroy_v2", "cuEventDestroy"): [CUevent],
    ("cuGetErrorName",): [CUresult, ctypes.POINTER(ctypes.c_char_p)],
    ("cuGetErrorString",): [CUresult, ctypes.POINTER(ctypes.c_char_p)],
}


class CudaDriver:
    """The driver library with typed entry points; `cuInit` runs on construction.

    Handles (contexts, streams, events, pointers) are plain ints. Context managers free
    what they allocated; when the block is left by an exception, a failing release is
    ignored so that the first error is the one reported.
    """

    def __init__(self, library: str = CUDA_LIBRARY) -> None:
        try:
            self._lib = ctypes.CDLL(library)
        except OSError as error:
            raise CudaError(
                "dlopen", -1, "LIBRARY_NOT_FOUND", f"{library}: {error} (is the driver installed?)"
            ) from None
        self._calls: dict[str, Callable[..., int]] = {}
        for names, argtypes in _SIGNATURES.items():
            function = next((getattr(self._lib, n) for n in names if hasattr(self._lib, n)), None)
            if function is None:
                raise CudaError(names[0], -1, "SYMBOL_NOT_FOUND", f"{library} lacks {names[0]}")
            function.argtypes = argtypes
            function.restype = CUresult
            self._calls[names[0]] = function
        self._check("cuInit", 0)

    def _error_text(self, code: int) -> tuple[str, str]:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self._calls["cuGetErrorName"](code, ctypes.byref(name))
        self._calls["cuGetErrorString"](code, ctypes.byref(text))
        return (
            (name.value or b"CUDA_ERROR_UNKNOWN").decode(),
            (text.value or b"no description").decode(),
        )

    def _check(self, call: str, *args: object) -> None:
        code = self._calls[call](*args)
        if code != CUDA_SUCCESS:
            name, text = self._error_text(code)
            raise CudaError(call, code, name, text)

    @contextmanager
    def _released_by(self, call: str, *args: object) -> Iterator[None]:
        """Run `call(*args)` after the block; checked only when the block succeeded."""
        try:
            yield
        except BaseException:
            self._calls[call](*args)
            raise
        self._check(call, *args)

    # ---- driver and devices ------------------------------------------------------------

    def driver_version(self) -> int:
        """The CUDA version the driver supports, e.g. 12040 for 12.4."""
        version = ctypes.c_int()
        self._check("cuDriverGetVersion", ctypes.byref(version))
        return version.value

    def device_count(self) -> int:
        count = ctypes.c_int()
        self._check("cuDeviceGetCount", ctypes.byref(count))
        return count.value

    def device(self, ordinal: int) -> int:
        device = CUdevice()
        self._check("cuDeviceGet", ctypes.byref(device), ordinal)
        return device.value

    def pci_bus_id(self, device: int) -> str:
        """'0000:41:00.0' (lower case, as sysfs names it)."""
        buffer = ctypes.create_string_buffer(PCI_BUS_ID_LENGTH)
        self._check("cuDeviceGetPCIBusId", buffer, PCI_BUS_ID_LENGTH, device)
        return buffer.value.decode().lower()

    def uuid(self, device: int) -> str:
        """The GPU's UUID as NVML prints it ('GPU-...')."""
        raw = CUuuid()
        self._check("cuDeviceGetUuid_v2", ctypes.byref(raw), device)
        return format_uuid(bytes(raw.bytes))

    def attribute(self, attribute: int, device: int) -> int:
        value = ctypes.c_int()
        self._check("cuDeviceGetAttribute", ctypes.byref(value), attribute, device)
        return value.value

    def can_access_peer(self, device: int, peer: int) -> bool:
        """Whether contexts on `device` can map memory of `peer` (the driver's P2P verdict)."""
        value = ctypes.c_int()
        self._check("cuDeviceCanAccessPeer", ctypes.byref(value), device, peer)
        return bool(value.value)

    def p2p_attribute(self, attribute: int, src_device: int, dst_device: int) -> int:
        value = ctypes.c_int()
        self._check(
            "cuDeviceGetP2PAttribute", ctypes.byref(value), attribute, src_device, dst_device
        )
        return value.value

    # ---- contexts ----------------------------------------------------------------------

    def retain_primary_context(self, device: int) -> int:
        context = CUcontext()
        self._check("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
        return context.value or 0

    def release_primary_context(self, device: int) -> None:
        self._check("cuDevicePrimaryCtxRelease_v2", device)

    def set_current(self, context: int) -> None:
        self._check("cuCtxSetCurrent", CUcontext(context))

    @contextmanager
    def primary_context(self, device: int) -> Iterator[int]:
        """Retain the device's primary context and make it current; release on exit."""
        context = self.retain_primary_context(device)
        with self._released_by("cuDevicePrimaryCtxRelease_v2", device):
            self.set_current(context)
            yield context

    def enable_peer_access(self, peer_context: int) -> bool:
        """Let the current context map memory of `peer_context`'s device.

        True when this call enabled it; False when it was on already
        (CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: another user of this process enabled it,
        and that user's access must stay).
        """
        code = self._calls["cuCtxEnablePeerAccess"](CUcontext(peer_context), 0)
        if code == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
            return False
        if code != CUDA_SUCCESS:
            name, text = self._error_text(code)
            raise CudaError("cuCtxEnablePeerAccess", code, name, text)
        return True

    def disable_peer_access(self, peer_context: int) -> None:
        self._check("cuCtxDisablePeerAccess", CUcontext(peer_context))

    # ---- memory ------------------------------------------------------------------------

    def allocate_device(self, size_bytes: int) -> int:
        """Device memory of the current context's GPU; free it with free_device."""
        pointer = CUdeviceptr()
        self._check("cuMemAlloc_v2", ctypes.byref(pointer), size_bytes)
        return pointer.value

    def free_device(self, pointer: int) -> None:
        self._check("cuMemFree_v2", CUdeviceptr(pointer))

    def allocate_pinned_host(self, size_bytes: int) -> int:
        """Page-locked host memory (first touched by the calling thread's CPUs)."""
        pointer = ctypes.c_void_p()
        self._check("cuMemAllocHost_v2", ctypes.byref(pointer), size_bytes)
        return pointer.value or 0

    def free_pinned_host(self, pointer: int) -> None:
        self._check("cuMemFreeHost", ctypes.c_void_p(pointer))

    @contextmanager
    def device_memory(self, size_bytes: int) -> Iterator[int]:
        pointer = self.allocate_device(size_bytes)
        with self._released_by("cuMemFree_v2", CUdeviceptr(pointer)):
            yield pointer

    @contextmanager
    def pinned_host_memory(self, size_bytes: int) -> Iterator[int]:
        pointer = self.allocate_pinned_host(size_bytes)
        with self._released_by("cuMemFreeHost", ctypes.c_void_p(pointer)):
            yield pointer

    def copy_host_to_device(self, device_pointer: int, host_pointer: int, size_bytes: int) -> None:
        self._check(
            "cuMemcpyHtoD_v2",
            CUdeviceptr(device_pointer),
            ctypes.c_void_p(host_pointer),
            size_bytes,
        )

    def copy_device_to_host(self, host_pointer: int, device_pointer: int, size_bytes: int) -> None:
        self._check(
            "cuMemcpyDtoH_v2",
            ctypes.c_void_p(host_pointer),
            CUdeviceptr(device_pointer),
            size_bytes,
        )

    def copy_host_to_device_async(
        self, device_pointer: int, host_pointer: int, size_bytes: int, stream: int
    ) -> None:
        self._check(
            "cuMemcpyHtoDAsync_v2",
            CUdeviceptr(device_pointer),
            ctypes.c_void_p(host_pointer),
            size_bytes,
            CUstream(stream),
        )

    def copy_device_to_host_async(
        self, host_pointer: int, device_pointer: int, size_bytes: int, stream: int
    ) -> None:
        self._check(
            "cuMemcpyDtoHAsync_v2",
            ctypes.c_void_p(host_pointer),
            CUdeviceptr(device_pointer),
            size_bytes,
            CUstream(stream),
        )

    def copy_peer_async(
        self,
        *,
        dst_pointer: int,
        dst_context: int,
        src_pointer: int,
        src_context: int,
        size_bytes: int,
        stream: int,
    ) -> None:
        """GPU to GPU: direct when peer access is on, else staged by the driver through host
        memory."""
        self._check(
            "cuMemcpyPeerAsync",
            CUdeviceptr(dst_pointer),
            CUcontext(dst_context),
            CUdeviceptr(src_pointer),
            CUcontext(src_context),
            size_bytes,
            CUstream(stream),
        )

    def memset_d8(self, device_pointer: int, value: int, count: int) -> None:
        """Queued on the current context's legacy default stream; returns before the bytes
        land (synchronize_stream(0) waits for them)."""
        self._check("cuMemsetD8_v2", CUdeviceptr(device_pointer), value, count)

    def memset_d8_async(self, device_pointer: int, value: int, count: int, stream: int) -> None:
        self._check("cuMemsetD8Async", CUdeviceptr(device_pointer), value, count, CUstream(stream))

    # ---- streams and events ------------------------------------------------------------

    def create_stream(self) -> int:
        """A non-blocking stream of the current context; destroy it with destroy_stream."""
        stream = CUstream()
        self._check("cuStreamCreate", ctypes.byref(stream), CU_STREAM_NON_BLOCKING)
        return stream.value or 0

    def destroy_stream(self, stream: int) -> None:
        self._check("cuStreamDestroy_v2", CUstream(stream))

    @contextmanager
    def stream(self) -> Iterator[int]:
        stream = self.create_stream()
        with self._released_by("cuStreamDestroy_v2", CUstream(stream)):
            yield stream

    def synchronize_stream(self, stream: int) -> None:
        """Wait for the work queued on `stream` (0: the current context's default stream)."""
        self._check("cuStreamSynchronize", CUstream(stream or None))

    def stream_wait_event(self, stream: int, event: int) -> None:
        """Work queued on `stream` after this waits for `event`."""
        self._check("cuStreamWaitEvent", CUstream(stream), CUevent(event), 0)

    def create_event(self) -> int:
        """A timing event; destroy it with destroy_event."""
        event = CUevent()
        self._check("cuEventCreate", ctypes.byref(event), CU_EVENT_DEFAULT)
        return event.value or 0

    def destroy_event(self, event: int) -> None:
        self._check("cuEventDestroy_v2", CUevent(event))

    @contextmanager
    def event(self) -> Iterator[int]:
        event = self.create_event()
        with self._released_by("cuEventDestroy_v2", CUevent(event)):
            yield event

    def record(self, event: int, stream: int = 0) -> None:
        """Record `event` on `stream` (0: the current context's default stream)."""
        self._check("cuEventRecord", CUevent(event), CUstream(stream or None))

    def synchronize(self, event: int) -> None:
        self._check("cuEventSynchronize", CUevent(event))

    def elapsed_ms(self, start: int, end: int) -> float:
        milliseconds = ctypes.c_float()
        self._check("cuEventElapsedTime", ctypes.byref(milliseconds), CUevent(start), CUevent(end))
        return float(milliseconds.value)


@dataclass(frozen=True)
class CopyResult:
    bus_id: str
    copies: int
    copied_bytes: int
    elapsed_ms: float

    @property
    def gbytes_per_s(self) -> float:
        return self.copied_bytes / (self.elapsed_ms / 1000.0) / 1e9 if self.elapsed_ms else 0.0


def host_to_device_load(
    driver: CudaDriver,
    ordinal: int,
    size_bytes: int,
    duration_s: float,
    stop: Callable[[], bool] | None = None,
) -> CopyResult:
    """Copy pinned host memory to the device, back to back, for about `duration_s`; with
    `stop`, until stop() is true (`duration_s` is then the longest the load lasts)."""
    device = driver.device(ordinal)
    bus_id = driver.pci_bus_id(device)
    copies = 0
    with (
        driver.primary_context(device),
        driver.device_memory(size_bytes) as device_pointer,
        driver.pinned_host_memory(size_bytes) as host_pointer,
        driver.event() as start,
        driver.event() as end,
    ):
        deadline_s = time.monotonic() + duration_s
        driver.record(start)
        while copies == 0 or (time.monotonic() < deadline_s and not (stop and stop())):
            driver.copy_host_to_device(device_pointer, host_pointer, size_bytes)
            copies += 1
        driver.record(end)
        driver.synchronize(end)
        elapsed_ms = driver.elapsed_ms(start, end)
    return CopyResult(bus_id, copies, copies * size_bytes, elapsed_ms)
