"""The server's CUDA state and the timing of the GPU-to-GPU paths it uses, through the
CUDA driver API.

Like a server that initializes CUDA lazily, the stand-in brings CUDA up on its first chat
completion (lingbot/server.py): a context on each of its GPUs, then peer access for every
usable route, then the timing below. Whatever the driver spends on that (the lab's libcuda
makes a process's first context and first peer mapping slow, as a driver is) is part of
that first request.

For each directed pair (source ordinal, target ordinal) the server asks the driver
whether peer access is possible (``cuDeviceCanAccessPeer``); when it is and the
deployment wants it, it enables it (``cuCtxEnablePeerAccess``). It then times a small
and a large ``cuMemcpyPeer`` between the two GPUs with CUDA events: the driver takes the
peer path when peer access is on and stages the copy through host memory otherwise. The
two copies give the path's latency and bandwidth:

    gbytes_per_s = (LARGE - SMALL) / (t_large - t_small),  latency = t_small - SMALL / bw

``LINGBOT_CUDA_LIBRARY`` (for tests) names the driver library, default ``libcuda.so.1``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .latency import PATH_HOST_STAGED, PATH_PEER, MeasuredPath

CUDA_SUCCESS = 0
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
SMALL_COPY_BYTES = 4096
LARGE_COPY_BYTES = 32 * 1024 * 1024
CU_EVENT_DEFAULT = 0


class CudaUnavailableError(RuntimeError):
    """The driver library cannot be loaded or answers with an error."""


@dataclass(frozen=True)
class PairRequest:
    source: str
    target: str
    source_ordinal: int
    target_ordinal: int


class _Driver:
    def __init__(self, library_name: str) -> None:
        try:
            self.lib = ctypes.CDLL(library_name)
        except OSError as error:
            raise CudaUnavailableError(f"cannot load {library_name}: {error}") from None
        self.library_name = library_name
        try:
            self.lib.cuMemcpyPeer.argtypes = [
                ctypes.c_uint64,
                ctypes.c_void_p,
                ctypes.c_uint64,
                ctypes.c_void_p,
                ctypes.c_size_t,
            ]
            self.lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
            self.lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
            self.lib.cuCtxEnablePeerAccess.argtypes = [ctypes.c_void_p, ctypes.c_uint]
            self.lib.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            self.lib.cuEventSynchronize.argtypes = [ctypes.c_void_p]
            self.lib.cuEventDestroy_v2.argtypes = [ctypes.c_void_p]
            self.lib.cuEventElapsedTime.argtypes = [
                ctypes.POINTER(ctypes.c_float),
                ctypes.c_void_p,
                ctypes.c_void_p,
            ]
            self.lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        except AttributeError as error:
            raise CudaUnavailableError(f"{library_name} lacks a call: {error}") from None
        self.contexts: dict[int, ctypes.c_void_p] = {}

    def error_name(self, code: int) -> str:
        name = ctypes.c_char_p()
        if self.lib.cuGetErrorName(code, ctypes.byref(name)) != CUDA_SUCCESS or not name.value:
            return f"CUDA error {code}"
        return name.value.decode()

    def check(self, code: int, call: str) -> None:
        if code != CUDA_SUCCESS:
            raise CudaUnavailableError(f"{call} failed: {self.error_name(code)}")

    def context(self, ordinal: int) -> ctypes.c_void_p:
        if ordinal not in self.contexts:
            device = ctypes.c_int()
            self.check(self.lib.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
            context = ctypes.c_void_p()
            self.check(
                self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
                "cuDevicePrimaryCtxRetain",
            )
            self.contexts[ordinal] = context
        return self.contexts[ordinal]

    def can_access_peer(self, ordinal: int, peer_ordinal: int) -> bool:
        can_access = ctypes.c_int()
        self.check(
            self.lib.cuDeviceCanAccessPeer(ctypes.byref(can_access), ordinal, peer_ordinal),
            "cuDeviceCanAccessPeer",
        )
        return bool(can_access.value)

    def enable_peer_access(self, ordinal: int, peer_ordinal: int) -> None:
        self.check(self.lib.cuCtxSetCurrent(self.context(ordinal)), "cuCtxSetCurrent")
        result = self.lib.cuCtxEnablePeerAccess(self.context(peer_ordinal), 0)
        if result != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
            self.check(result, "cuCtxEnablePeerAccess")

    def allocate(self, ordinal: int, size_bytes: int) -> int:
        self.check(self.lib.cuCtxSetCurrent(self.context(ordinal)), "cuCtxSetCurrent")
        pointer = ctypes.c_uint64()
        self.check(self.lib.cuMemAlloc_v2(ctypes.byref(pointer), size_bytes), "cuMemAlloc_v2")
        return pointer.value

    def free(self, ordinal: int, pointer: int) -> None:
        self.lib.cuCtxSetCurrent(self.context(ordinal))
        self.lib.cuMemFree_v2(pointer)

    def timed_peer_copy_s(
        self, target_ordinal: int, target: int, source_ordinal: int, source: int, size_bytes: int
    ) -> float:
        """One synchronous peer copy timed with events on the source's default stream."""
        self.check(self.lib.cuCtxSetCurrent(self.context(source_ordinal)), "cuCtxSetCurrent")
        start, stop = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.lib.cuEventCreate(ctypes.byref(start), CU_EVENT_DEFAULT), "cuEventCreate")
        self.check(self.lib.cuEventCreate(ctypes.byref(stop), CU_EVENT_DEFAULT), "cuEventCreate")
        try:
            self.check(self.lib.cuEventRecord(start, None), "cuEventRecord")
            self.check(
                self.lib.cuMemcpyPeer(
                    target,
                    self.context(target_ordinal),
                    source,
                    self.context(source_ordinal),
                    size_bytes,
                ),
                "cuMemcpyPeer",
            )
            self.check(self.lib.cuEventRecord(stop, None), "cuEventRecord")
            self.check(self.lib.cuEventSynchronize(stop), "cuEventSynchronize")
            elapsed_ms = ctypes.c_float()
            self.check(
                self.lib.cuEventElapsedTime(ctypes.byref(elapsed_ms), start, stop),
                "cuEventElapsedTime",
            )
            return elapsed_ms.value / 1000.0
        finally:
            self.lib.cuEventDestroy_v2(start)
            self.lib.cuEventDestroy_v2(stop)


def _time_pair(driver: _Driver, request: PairRequest, peer_access_on: bool) -> MeasuredPath:
    source_buffer = driver.allocate(request.source_ordinal, LARGE_COPY_BYTES)
    target_buffer = driver.allocate(request.target_ordinal, LARGE_COPY_BYTES)
    try:
        small_s, large_s = (
            driver.timed_peer_copy_s(
                request.target_ordinal,
                target_buffer,
                request.source_ordinal,
                source_buffer,
                size_bytes,
            )
            for size_bytes in (SMALL_COPY_BYTES, LARGE_COPY_BYTES)
        )
    finally:
        driver.free(request.source_ordinal, source_buffer)
        driver.free(request.target_ordinal, target_buffer)
    if large_s <= small_s:
        raise CudaUnavailableError(
            f"peer copy {request.source}->{request.target}: {LARGE_COPY_BYTES} bytes took"
            f" {large_s:g} s, no longer than {SMALL_COPY_BYTES} bytes ({small_s:g} s)"
        )
    bytes_per_s = (LARGE_COPY_BYTES - SMALL_COPY_BYTES) / (large_s - small_s)
    latency_s = max(0.0, small_s - SMALL_COPY_BYTES / bytes_per_s)
    return MeasuredPath(
        source=request.source,
        target=request.target,
        kind=PATH_PEER if peer_access_on else PATH_HOST_STAGED,
        gbytes_per_s=bytes_per_s / 1e9,
        latency_ns=latency_s * 1e9,
    )


class GpuSession:
    """The server's CUDA state: a context on each of its GPUs and the peer mappings it
    enabled, kept for the life of the process (contexts and mappings never outlive it)."""

    def __init__(self, ordinals: Sequence[int], log: logging.Logger) -> None:
        library_name = os.environ.get("LINGBOT_CUDA_LIBRARY", "libcuda.so.1")
        self.driver = _Driver(library_name)
        self.library_name = library_name
        self.log = log
        self.driver.check(self.driver.lib.cuInit(0), "cuInit")
        for ordinal in ordinals:
            started_s = time.monotonic()
            self.driver.context(ordinal)
            log.info(
                "CUDA context on GPU ordinal %d in %.0f ms",
                ordinal,
                (time.monotonic() - started_s) * 1000,
            )
        self.peer_enabled: set[tuple[int, int]] = set()

    def enable_peer_access(self, source: str, target: str, pair: tuple[int, int]) -> bool:
        """Peer access from the pair's first GPU to its second; False (logged) when the
        driver reports it is not possible: copies between them are then host-staged."""
        if not self.driver.can_access_peer(*pair):
            self.log.warning(
                "peer access %s->%s: the driver reports it is not possible"
                " (cuDeviceCanAccessPeer 0); copies are host-staged",
                source,
                target,
            )
            return False
        started_s = time.monotonic()
        self.driver.enable_peer_access(*pair)
        self.peer_enabled.add(pair)
        self.log.info(
            "peer access %s->%s enabled in %.0f ms",
            source,
            target,
            (time.monotonic() - started_s) * 1000,
        )
        return True

    def measure_paths(self, requests: Sequence[PairRequest]) -> list[MeasuredPath]:
        """Each requested directed pair, timed through the driver."""
        measured: list[MeasuredPath] = []
        for request in requests:
            pair = (request.source_ordinal, request.target_ordinal)
            path = _time_pair(self.driver, request, pair in self.peer_enabled)
            self.log.info(
                "measured %s->%s: %s %.2f GB/s, latency %.0f ns (through %s)",
                path.source,
                path.target,
                path.kind,
                path.gbytes_per_s,
                path.latency_ns,
                self.library_name,
            )
            measured.append(path)
        return measured
