"""A minimal ctypes binding to the CUDA driver API (libcuda.so.1), no CUDA toolkit needed.

Only what a short host-to-device load needs: devices, primary contexts, device and pinned
host memory, host-to-device copies and events for timing. Every failing call raises
CudaError naming the call, the CUresult name and the driver's description. Stdlib only.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

CUDA_LIBRARY = "libcuda.so.1"
CUDA_SUCCESS = 0
PCI_BUS_ID_LENGTH = 32
CU_EVENT_DEFAULT = 0

CUresult = ctypes.c_int
CUdevice = ctypes.c_int
CUdeviceptr = ctypes.c_ulonglong
CUcontext = ctypes.c_void_p
CUevent = ctypes.c_void_p
CUstream = ctypes.c_void_p


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
    ("cuDeviceGetCount",): [ctypes.POINTER(ctypes.c_int)],
    ("cuDeviceGet",): [ctypes.POINTER(CUdevice), ctypes.c_int],
    ("cuDeviceGetPCIBusId",): [ctypes.c_char_p, ctypes.c_int, CUdevice],
    ("cuDevicePrimaryCtxRetain",): [ctypes.POINTER(CUcontext), CUdevice],
    ("cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"): [CUdevice],
    ("cuCtxSetCurrent",): [CUcontext],
    ("cuMemAlloc_v2",): [ctypes.POINTER(CUdeviceptr), ctypes.c_size_t],
    ("cuMemFree_v2",): [CUdeviceptr],
    ("cuMemAllocHost_v2",): [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t],
    ("cuMemFreeHost",): [ctypes.c_void_p],
    ("cuMemcpyHtoD_v2",): [CUdeviceptr, ctypes.c_void_p, ctypes.c_size_t],
    ("cuEventCreate",): [ctypes.POINTER(CUevent), ctypes.c_uint],
    ("cuEventRecord",): [CUevent, CUstream],
    ("cuEventSynchronize",): [CUevent],
    ("cuEventElapsedTime",): [ctypes.POINTER(ctypes.c_float), CUevent, CUevent],
    ("cuEventDestroy_v2", "cuEventDestroy"): [CUevent],
    ("cuGetErrorName",): [CUresult, ctypes.POINTER(ctypes.c_char_p)],
    ("cuGetErrorString",): [CUresult, ctypes.POINTER(ctypes.c_char_p)],
}


class CudaDriver:
    """The driver library with typed entry points; `cuInit` runs on construction."""

    def __init__(self, library: str = CUDA_LIBRARY) -> None:
        try:
            self._lib = ctypes.CDLL(library)
        except OSError as error:
            raise CudaError(
                "dlopen", -1, "LIBRARY_NOT_FOUND", f"{library}: {error} (is the driver installed?)"
            ) from None
        self._calls: dict[str, ctypes._CFuncPtr] = {}
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

    @contextmanager
    def primary_context(self, device: int) -> Iterator[int]:
        """Retain the device's primary context and make it current; release on exit."""
        context = CUcontext()
        self._check("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
        try:
            self._check("cuCtxSetCurrent", context)
            yield context.value or 0
        finally:
            self._check("cuDevicePrimaryCtxRelease_v2", device)

    @contextmanager
    def device_memory(self, size_bytes: int) -> Iterator[int]:
        pointer = CUdeviceptr()
        self._check("cuMemAlloc_v2", ctypes.byref(pointer), size_bytes)
        try:
            yield pointer.value
        finally:
            self._check("cuMemFree_v2", pointer)

    @contextmanager
    def pinned_host_memory(self, size_bytes: int) -> Iterator[int]:
        pointer = ctypes.c_void_p()
        self._check("cuMemAllocHost_v2", ctypes.byref(pointer), size_bytes)
        try:
            yield pointer.value or 0
        finally:
            self._check("cuMemFreeHost", pointer)

    def copy_host_to_device(self, device_pointer: int, host_pointer: int, size_bytes: int) -> None:
        self._check(
            "cuMemcpyHtoD_v2",
            CUdeviceptr(device_pointer),
            ctypes.c_void_p(host_pointer),
            size_bytes,
        )

    @contextmanager
    def event(self) -> Iterator[int]:
        event = CUevent()
        self._check("cuEventCreate", ctypes.byref(event), CU_EVENT_DEFAULT)
        try:
            yield event.value or 0
        finally:
            self._check("cuEventDestroy_v2", event)

    def record(self, event: int) -> None:
        self._check("cuEventRecord", CUevent(event), CUstream(None))

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
    driver: CudaDriver, ordinal: int, size_bytes: int, duration_s: float
) -> CopyResult:
    """Copy pinned host memory to the device, back to back, for about `duration_s`."""
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
        while copies == 0 or time.monotonic() < deadline_s:
            driver.copy_host_to_device(device_pointer, host_pointer, size_bytes)
            copies += 1
        driver.record(end)
        driver.synchronize(end)
        elapsed_ms = driver.elapsed_ms(start, end)
    return CopyResult(bus_id, copies, copies * size_bytes, elapsed_ms)
