"""Link under load: a short host-to-device copy through libcuda while sampling the link.

The copy runs in this thread (ctypes releases the GIL during driver calls); a sampler
thread reads the current link generation, width and performance state every interval,
through NVML when pynvml imports, else through nvidia-smi.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..cuda import CudaDriver, CudaError, host_to_device_load
from .nvml import NvmlUnavailableError, bus_id_from_nvml, load_pynvml
from .smi import SmiUnavailableError, run_smi

Sample = dict[str, Any]
Sampler = Callable[[str], Sample]


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


def sample_during(
    sampler: Sampler, bus_id: str, interval_s: float, work: Callable[[], Any]
) -> tuple[Any, list[Sample]]:
    """Run `work` while sampling the GPU every `interval_s`; (work's result, samples)."""
    samples: list[Sample] = []
    done = threading.Event()
    started_s = time.monotonic()

    def loop() -> None:
        while not done.is_set():
            take()
            done.wait(interval_s)

    def take() -> None:
        try:
            reading = sampler(bus_id)
        except Exception as error:  # a failed reading is recorded, not fatal
            reading = {"error": str(error)}
        samples.append({"t_s": round(time.monotonic() - started_s, 4), **reading})

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        result = work()
        # One reading as the last copy completes, so a short load is never missed by
        # the sampler's interval (the link stays up for a while after a copy).
        done.set()
        thread.join()
        take()
    finally:
        done.set()
        thread.join()
    return result, samples


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
    interval_s: float = 0.05,
    nvml_python_path: Sequence[str] = (),
    smi_command: Sequence[str] = ("nvidia-smi",),
    use_nvml: bool = True,
) -> dict[str, Any]:
    """Per GPU: whether a load could be made, the copy's bandwidth and the link samples."""
    pynvml, note = _start_nvml(nvml_python_path) if use_nvml else (None, "turned off")
    if note:
        note = f"NVML not used for sampling: {note}; sampling through nvidia-smi"
    sampler = nvml_sampler(pynvml) if pynvml is not None else smi_sampler(smi_command)
    result: dict[str, Any] = {
        "sampler": "nvml" if pynvml is not None else "nvidia-smi",
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
        for ordinal in range(count):
            result["gpus"].append(
                _one_gpu(
                    driver,
                    ordinal,
                    sampler,
                    duration_s=duration_s,
                    size_bytes=size_bytes,
                    interval_s=interval_s,
                )
            )
    finally:
        if pynvml is not None:
            pynvml.nvmlShutdown()
    return result


def _one_gpu(
    driver: CudaDriver,
    ordinal: int,
    sampler: Sampler,
    *,
    duration_s: float,
    size_bytes: int,
    interval_s: float,
) -> dict[str, Any]:
    try:
        bus_id = bus_id_from_nvml(driver.pci_bus_id(driver.device(ordinal)))
    except CudaError as error:
        return {"ordinal": ordinal, "bus_id": None, "possible": False, "reason": str(error)}
    entry: dict[str, Any] = {"ordinal": ordinal, "bus_id": bus_id}
    try:
        copy, samples = sample_during(
            sampler,
            bus_id,
            interval_s,
            lambda: host_to_device_load(driver, ordinal, size_bytes, duration_s),
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
        "samples": samples,
    }
