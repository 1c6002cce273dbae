"""Link under load: copies sustained long enough for the link to train up, then one reading.

A GPU idles its PCIe link at a low generation and retrains it once it is busy, which
takes a while. A reading follows DCGM's rule: the copies run for at least `min_load_s`
before it and go on while it is taken, the performance state is read before and after
the link, and the reading counts only when the GPU was in P0 at both ends (the judge,
lingbot_fleet.gpu.linkcheck, applies that rule and the minimum load). The copies run in the
calling thread (ctypes releases the GIL during driver calls); the reading is taken by a
helper thread through NVML when pynvml imports, else through nvidia-smi.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..gpu.cuda import CudaDriver, CudaError, host_to_device_load
from .nvml import NvmlUnavailableError, bus_id_from_nvml, load_pynvml
from .smi import SmiUnavailableError, run_smi

Sample = dict[str, Any]
Sampler = Callable[[str], Sample]
# The longest a reading may take once the load has lasted its minimum: three nvidia-smi
# calls within their own timeout.
READING_TIMEOUT_S = 40.0
# A pause between two copies longer than this, and than four times the usual copy, breaks
# the load (a starved thread on a busy node, a stalled call): the GPU may idle its link
# down meanwhile, so the minimum load is counted again from the end of the pause.
MIN_LOAD_BREAK_S = 0.25


def nvml_sampler(pynvml: Any) -> Sampler:
    """A sampler reading one GPU (by bus id) through an initialized NVML."""

    def sample(bus_id: str) -> Sample:
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id.encode())
        return {
            "gen": pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle),
            "width": pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle),
            "pstate": f"P{pynvml.nvmlDeviceGetPerformanceState(handle)}",
        }

    return sample


def smi_sampler(command: Sequence[str]) -> Sampler:
    def sample(bus_id: str) -> Sample:
        text = run_smi(
            command,
            [
                "-i",
                bus_id,
                "--query-gpu=pcie.link.gen.current,pcie.link.width.current,pstate",
                "--format=csv,noheader,nounits",
            ],
        )
        gen, width, pstate = (cell.strip() for cell in text.strip().split(",")[:3])
        return {"gen": int(gen), "width": int(width), "pstate": pstate}

    return sample


class LinkReading:
    """One GPU's link read under sustained load.

    Use it around the load: ``with LinkReading(...) as reading:`` copy, and ask
    ``reading.done()`` after every copy; stop once it is true. The load is counted from
    the first ``done()`` (the end of the first copy), and again from the end of any pause
    that breaks it (``MIN_LOAD_BREAK_S``) before the reading begins: the reading follows
    ``min_load_s`` of copies without a break. Then ``reading.result`` is ``{gen, width,
    performance_state, pstate_before, pstate_after, load_s}`` (``load_s``: how long the
    copies had run without a break when the reading began), or ``{error, load_s}`` when
    the GPU could not be read.
    """

    def __init__(
        self,
        sampler: Sampler,
        bus_id: str,
        min_load_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sampler = sampler
        self._bus_id = bus_id
        self._min_load_s = min_load_s
        self._clock = clock
        self._started_s: float | None = None
        self._first_s = 0.0
        self._last_copy_s = 0.0
        self._usual_copy_s = 0.0
        self._reading_began = False
        self._stopped = threading.Event()
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self.result: dict[str, Any] = {}

    def __enter__(self) -> LinkReading:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stopped.set()
        if self._started_s is not None:
            self._thread.join()
        if not self.result:
            load_s = 0.0 if self._started_s is None else self._clock() - self._started_s
            self.result = {"error": "the load ended before the reading", "load_s": round(load_s, 3)}

    def done(self) -> bool:
        """The reading is taken (or gave up): the load may stop."""
        now = self._clock()
        if self._started_s is None:
            self._started_s = self._first_s = self._last_copy_s = now
            self._thread.start()
        else:
            since_last_s = now - self._last_copy_s
            if self._breaks_load(since_last_s) and not self._reading_began:
                self._started_s = now
            else:
                usual_s = self._usual_copy_s or since_last_s
                self._usual_copy_s = 0.8 * usual_s + 0.2 * since_last_s
            self._last_copy_s = now
        deadline_s = self._first_s + self._min_load_s + READING_TIMEOUT_S
        return self._finished.is_set() or now > deadline_s

    def _breaks_load(self, gap_s: float) -> bool:
        return gap_s > max(MIN_LOAD_BREAK_S, 4 * self._usual_copy_s)

    def _read(self) -> None:
        assert self._started_s is not None
        while True:
            now = self._clock()
            if self._breaks_load(now - self._last_copy_s):
                # The load is paused now: wait for it to go on (its next copy moves the
                # start on), then for the minimum load again.
                wait_s = MIN_LOAD_BREAK_S / 5
            else:
                wait_s = self._started_s + self._min_load_s - now
                if wait_s <= 0:
                    break
            if self._stopped.wait(wait_s):
                return
        self._reading_began = True
        load_s = round(self._clock() - self._started_s, 3)
        try:
            before = self._sampler(self._bus_id)
            link = self._sampler(self._bus_id)
            after = self._sampler(self._bus_id)
        except Exception as error:  # a failed reading is reported, not fatal
            self.result = {"error": str(error), "load_s": load_s}
        else:
            self.result = {
                "gen": link.get("gen"),
                "width": link.get("width"),
                "performance_state": link.get("pstate"),
                "pstate_before": before.get("pstate"),
                "pstate_after": after.get("pstate"),
                "load_s": load_s,
            }
        self._finished.set()


def _start_nvml(nvml_python_path: Sequence[str]) -> tuple[Any, str | None]:
    """(initialized pynvml, None), or (None, why not)."""
    try:
        pynvml = load_pynvml(nvml_python_path)
    except NvmlUnavailableError as error:
        return None, str(error)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return None, f"nvmlInit failed: {error}"
    return pynvml, None


def link_under_load(
    *,
    cuda_library: str = "libcuda.so.1",
    duration_s: float = 1.0,
    size_bytes: int = 64 << 20,
    nvml_python_path: Sequence[str] = (),
    smi_command: Sequence[str] = ("nvidia-smi",),
    use_nvml: bool = True,
) -> dict[str, Any]:
    """Per GPU, all GPUs at once: host-to-device copies for `duration_s`, then a reading
    of the link while they go on (LinkReading), and the copies' bandwidth."""
    pynvml, note = _start_nvml(nvml_python_path) if use_nvml else (None, "turned off")
    if note:
        note = f"NVML not used for sampling: {note}; sampling through nvidia-smi"
    sampler = nvml_sampler(pynvml) if pynvml is not None else smi_sampler(smi_command)
    result: dict[str, Any] = {
        "sampler": "nvml" if pynvml is not None else "nvidia-smi",
        "min_load_s": duration_s,
        "notes": [note] if note else [],
        "gpus": [],
    }
    try:
        try:
            driver = CudaDriver(cuda_library)
            count = driver.device_count()
        except CudaError as error:
            result["possible"] = False
            result["reason"] = str(error)
            return result
        result["possible"] = True
        entries: list[dict[str, Any]] = [{} for _ in range(count)]

        def load(ordinal: int) -> None:
            entries[ordinal] = _one_gpu(
                driver, ordinal, sampler, duration_s=duration_s, size_bytes=size_bytes
            )

        threads = [threading.Thread(target=load, args=(ordinal,)) for ordinal in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        result["gpus"] = entries
    finally:
        if pynvml is not None:
            pynvml.nvmlShutdown()
    return result


def _one_gpu(
    driver: CudaDriver, ordinal: int, sampler: Sampler, *, duration_s: float, size_bytes: int
) -> dict[str, Any]:
    try:
        bus_id = bus_id_from_nvml(driver.pci_bus_id(driver.device(ordinal)))
    except CudaError as error:
        return {"ordinal": ordinal, "bus_id": None, "possible": False, "reason": str(error)}
    entry: dict[str, Any] = {"ordinal": ordinal, "bus_id": bus_id}
    try:
        with LinkReading(sampler, bus_id, duration_s) as reading:
            copy = host_to_device_load(
                driver, ordinal, size_bytes, duration_s + READING_TIMEOUT_S, stop=reading.done
            )
    except (CudaError, SmiUnavailableError) as error:
        return {**entry, "possible": False, "reason": str(error)}
    return {
        **entry,
        "possible": True,
        "copies": copy.copies,
        "copied_bytes": copy.copied_bytes,
        "elapsed_ms": round(copy.elapsed_ms, 3),
        "h2d_gbytes_per_s": round(copy.gbytes_per_s, 3),
        "reading": reading.result,
    }
