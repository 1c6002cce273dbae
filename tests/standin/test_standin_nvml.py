"""Bus ids come from NVML through ctypes when it loads, from nvidia-smi when it does not.

The NVML here is a tiny C library built with gcc for the test; it answers the calls the
stand-in makes with the fake node's two GPUs.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

FAKE_NVML_SOURCE = r"""
#include <string.h>

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

static const char *uuids[] = {"GPU-3b5d6f1e-8a2c-4e7b-9d10-2f4a6c8e0b11",
                              "GPU-7c1e2a90-4b3d-4f6e-8a21-5d9c0e7f3a22"};
static const char *bus_ids[] = {"00000000:81:00.0", "00000000:C1:00.0"};
static int initialized = 0;

int nvmlInit_v2(void) { initialized = 1; return 0; }
int nvmlShutdown(void) { initialized = 0; return 0; }
const char *nvmlErrorString(int status) {
    return status == 1 ? "Uninitialized" : status == 15 ? "GPU is lost" : "Unknown";
}
int nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized) return 1;
    *count = 2;
    return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **handle) {
    if (!initialized) return 1;
    if (index > 1) return 2;
#ifdef LOST_INDEX
    if (index == LOST_INDEX) return 15;
#endif
    *handle = (void *)(unsigned long)(index + 1);
    return 0;
}
int nvmlDeviceGetUUID(void *handle, char *uuid, unsigned int length) {
    strncpy(uuid, uuids[(unsigned long)handle - 1], length);
    return 0;
}
#ifndef WITHOUT_PCI_INFO
int nvmlDeviceGetPciInfo_v3(void *handle, nvmlPciInfo_t *pci) {
    unsigned long index = (unsigned long)handle - 1;
    memset(pci, 0, sizeof(*pci));
    strncpy(pci->busId, bus_ids[index], sizeof(pci->busId));
    pci->bus = index == 0 ? 0x81 : 0xc1;
    pci->pciDeviceId = 0x223010de;
    return 0;
}
#endif
"""


def build_fake_nvml(directory, *extra_flags: str):
    source = directory / "fake_nvml.c"
    source.write_text(FAKE_NVML_SOURCE, encoding="ascii")
    library = directory / f"libnvidia-ml{''.join(extra_flags).replace('=', '')}.so.1"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(library), str(source), *extra_flags],
        check=True,
        capture_output=True,
    )
    return library


def test_bus_ids_come_from_nvml(fake_node, start_server):
    fake_node.env["LINGBOT_NVML_LIBRARY"] = str(build_fake_nvml(fake_node.root))
    (fake_node.root / "bin" / "nvidia-smi").unlink()
    server = start_server(fake_node.base_args())
    assert server.stop() == 0
    log = server.stderr()
    assert f"driver lists 2 GPU(s) through NVML {fake_node.env['LINGBOT_NVML_LIBRARY']}" in log
    assert "gpu:1 is GPU-7c1e2a90-4b3d-4f6e-8a21-5d9c0e7f3a22 at 0000:c1:00.0" in log


def test_nvml_without_pci_info_falls_back_to_nvidia_smi(fake_node, start_server):
    library = build_fake_nvml(fake_node.root, "-DWITHOUT_PCI_INFO")
    fake_node.env["LINGBOT_NVML_LIBRARY"] = str(library)
    server = start_server(fake_node.base_args())
    assert server.stop() == 0
    assert (
        "driver lists 2 GPU(s) through nvidia-smi (NVML unusable:"
        f" {library}: undefined symbol: nvmlDeviceGetPciInfo_v3)"
    ) in server.stderr()


SINGLE_GPU_0 = (
    ('"layers.*": "gpu:1"', '"layers.*": "gpu:0"'),
    (', "gpu:1": 0.85}', "}"),
)
UUID_0 = "GPU-3b5d6f1e-8a2c-4e7b-9d10-2f4a6c8e0b11"
UUID_1 = "GPU-7c1e2a90-4b3d-4f6e-8a21-5d9c0e7f3a22"
DEVICE_UNAVAILABLE = "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"


def test_a_lost_gpu_outside_its_list_does_not_stop_it(fake_node, start_server, good_config):
    fake_node.env["LINGBOT_NVML_LIBRARY"] = str(build_fake_nvml(fake_node.root, "-DLOST_INDEX=1"))
    fake_node.env["CUDA_VISIBLE_DEVICES"] = UUID_0
    for old, new in SINGLE_GPU_0:
        good_config = good_config.replace(old, new)
    fake_node.write_config(good_config)
    args = fake_node.base_args()
    args[args.index("--gpus") : args.index("--gpus") + 2] = ["--device", "gpu:0"]
    server = start_server(args)
    assert server.stop() == 0
    log = server.stderr()
    assert (" INFO driver index 1 is lost (NVML nvmlDeviceGetHandleByIndex_v2: GPU is lost)") in log
    assert f"gpu:0 is {UUID_0} at 0000:81:00.0" in log


def test_a_lost_gpu_named_by_uuid_in_its_list_stops_it(fake_node):
    fake_node.env["LINGBOT_NVML_LIBRARY"] = str(build_fake_nvml(fake_node.root, "-DLOST_INDEX=1"))
    fake_node.env["CUDA_VISIBLE_DEVICES"] = f"{UUID_0},{UUID_1}"
    result = fake_node.run_to_exit(fake_node.base_args())
    assert (result.returncode, result.stdout) == (1, "")
    lines = result.stderr.rstrip().splitlines()
    assert lines[-1] == DEVICE_UNAVAILABLE
    assert lines[-2].endswith(
        " ERROR cannot use gpu:1: CUDA device 1 is driver index 1, which the driver reports"
        " lost (NVML nvmlDeviceGetHandleByIndex_v2: GPU is lost)"
    )
