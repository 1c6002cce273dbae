"""libnvidia-ml.so.1 driven through pynvml, the way the toolkit reads GPUs."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from native_support import (
    RUN_SUBDIR,
    SCENARIOS,
    flatten,
    profile_names,
    profile_states,
    scenario_state,
    write_lab_root,
)

pytestmark = pytest.mark.native

P2P_WORDS = {"OK": 0, "CNS": 1, "GNS": 2, "TNS": 3, "NS": 5, "U": 6}
DRIVER_USED_BYTES = 1024 * 1024
P2P_CAPS = ("read", "write", "nvlink", "atomics", "prop")


def cpu_mask_words(cpu_list: str, word_count: int) -> list[int]:
    words = [0] * word_count
    for part in cpu_list.split(","):
        first, _, last = part.partition("-")
        for cpu in range(int(first), int(last or first) + 1):
            words[cpu // 64] |= 1 << (cpu % 64)
    return words


def assert_gpu_matches(nvml: Any, handle: Any, gpu: dict[str, Any]) -> None:
    domain, bus, device_function = gpu["bdf"].split(":")
    device, _function = device_function.split(".")
    assert nvml.nvmlDeviceGetIndex(handle) == gpu["index"]
    assert nvml.nvmlDeviceGetName(handle) == gpu["name"]
    assert nvml.nvmlDeviceGetUUID(handle) == gpu["uuid"]
    assert nvml.nvmlDeviceGetSerial(handle) == gpu["serial"]
    pci = nvml.nvmlDeviceGetPciInfo(handle)
    assert pci.busId == f"{int(domain, 16):08X}:{bus.upper()}:{device.upper()}.0"
    assert pci.busIdLegacy == f"{int(domain, 16):04X}:{bus.upper()}:{device.upper()}.0"
    assert (pci.domain, pci.bus, pci.device) == (int(domain, 16), int(bus, 16), int(device, 16))
    assert pci.pciDeviceId == gpu["pci_device_id"]
    assert pci.pciSubSystemId == gpu["pci_subsystem_id"]
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    assert (memory.total, memory.free, memory.used) == (
        gpu["memory_total_bytes"],
        gpu["memory_total_bytes"] - DRIVER_USED_BYTES,
        DRIVER_USED_BYTES,
    )
    link = gpu["link"]
    assert nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle) == link["max_gen"]
    assert nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(handle) == link["max_gen_gpu"]
    assert nvml.nvmlDeviceGetMaxPcieLinkWidth(handle) == link["max_width"]
    assert nvml.nvmlDeviceGetCurrPcieLinkWidth(handle) == link["width"]
    assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == link["gen_idle"]
    assert nvml.nvmlDeviceGetPerformanceState(handle) == nvml.NVML_PSTATE_8
    assert nvml.nvmlDeviceGetPersistenceMode(handle) == gpu["persistence_default"]
    if gpu["mig_mode"] or "A100" in gpu["name"] or "H100" in gpu["name"]:
        assert nvml.nvmlDeviceGetMigMode(handle) == [gpu["mig_mode"], gpu["mig_mode"]]
    else:
        with pytest.raises(nvml.NVMLError_NotSupported):
            nvml.nvmlDeviceGetMigMode(handle)
    assert nvml.nvmlDeviceGetNumaNodeId(handle) == gpu["numa_node"]
    assert list(nvml.nvmlDeviceGetCpuAffinity(handle, 4)) == cpu_mask_words(gpu["cpu_list"], 4)
    assert nvml.nvmlDeviceGetPcieReplayCounter(handle) == 0
    assert nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES) == 0


def assert_state_matches(nvml: Any, state: dict[str, Any]) -> None:
    assert nvml.nvmlSystemGetDriverVersion() == state["driver"]["version"]
    assert nvml.nvmlSystemGetNVMLVersion() == state["driver"]["nvml_version"]
    assert nvml.nvmlSystemGetCudaDriverVersion() == state["driver"]["cuda_driver_version"]
    assert nvml.nvmlSystemGetCudaDriverVersion_v2() == state["driver"]["cuda_driver_version"]
    assert nvml.nvmlDeviceGetCount() == len(state["gpus"])
    handles = {}
    for gpu in state["gpus"]:
        if gpu["lost"]:
            with pytest.raises(nvml.NVMLError_GpuIsLost):
                nvml.nvmlDeviceGetHandleByIndex(gpu["index"])
            continue
        handle = nvml.nvmlDeviceGetHandleByIndex(gpu["index"])
        handles[gpu["index"]] = handle
        assert_gpu_matches(nvml, handle, gpu)
        by_uuid = nvml.nvmlDeviceGetHandleByUUID(gpu["uuid"].encode())
        by_bus = nvml.nvmlDeviceGetHandleByPciBusId(gpu["bdf"].encode())
        assert nvml.nvmlDeviceGetIndex(by_uuid) == nvml.nvmlDeviceGetIndex(by_bus) == gpu["index"]
    for pair in state["pairs"]:
        if pair["a"] not in handles or pair["b"] not in handles:
            continue
        first, second = handles[pair["a"]], handles[pair["b"]]
        level = nvml.nvmlDeviceGetTopologyCommonAncestor(first, second)
        assert level == pair["topology_level"]
        for cap_index, cap in enumerate(P2P_CAPS):
            status = nvml.nvmlDeviceGetP2PStatus(first, second, cap_index)
            assert status == P2P_WORDS[pair["p2p_status"][cap]], (pair["a"], pair["b"], cap)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_values_equal_the_hand_built_state(nvml_session: Any, scenario: str) -> None:
    state = scenario_state(scenario)
    nvml = nvml_session(flatten(state))
    assert_state_matches(nvml, state)


@pytest.mark.parametrize("profile_name", profile_names())
def test_values_equal_the_state_of_every_profile(nvml_session: Any, profile_name: str) -> None:
    states = {name: (state, text) for name, state, text in profile_states()}
    state, text = states[profile_name]
    nvml = nvml_session(text)
    assert_state_matches(nvml, state)


def test_hand_built_flatten_matches_hwstate() -> None:
    states = profile_states()
    if not states:
        pytest.skip("no lab profiles yet")
    _name, state, text = states[0]
    assert flatten(state) == text


def test_geforce_reports_gpu_not_supported(nvml_session: Any) -> None:
    nvml = nvml_session(flatten(scenario_state("geforce")))
    first, second = (nvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    # pynvml defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,); the index is 0.
    status = nvml.nvmlDeviceGetP2PStatus(first, second, 0)
    assert status == nvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED
    assert nvml.nvmlDeviceGetBrand(first) == nvml.NVML_BRAND_GEFORCE


def test_noacpi_breaks_p2p_and_numa(nvml_session: Any) -> None:
    nvml = nvml_session(flatten(scenario_state("noacpi")))
    first, second = (nvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    status = nvml.nvmlDeviceGetP2PStatus(first, second, nvml.NVML_P2P_CAPS_INDEX_WRITE)
    assert status == nvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
    assert nvml.nvmlDeviceGetNumaNodeId(first) == -1
    assert list(nvml.nvmlDeviceGetMemoryAffinity(first, 1, nvml.NVML_AFFINITY_SCOPE_NODE)) == [1]


def test_nvlink_state_and_remote_pci_info(nvml_session: Any) -> None:
    nvml = nvml_session(flatten(scenario_state("nvlink")))
    first = nvml.nvmlDeviceGetHandleByIndex(0)
    for link in range(4):
        assert nvml.nvmlDeviceGetNvLinkState(first, link) == nvml.NVML_FEATURE_ENABLED
        assert nvml.nvmlDeviceGetNvLinkRemotePciInfo(first, link).busId == "00000000:42:00.0"
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetNvLinkState(first, 4)
    second = nvml.nvmlDeviceGetHandleByIndex(1)
    status = nvml.nvmlDeviceGetP2PStatus(first, second, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
    assert status == nvml.NVML_P2P_STATUS_OK


def test_pcie_gpu_has_no_nvlink(nvml_session: Any) -> None:
    nvml = nvml_session(flatten(scenario_state("phb")))
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetNvLinkState(nvml.nvmlDeviceGetHandleByIndex(0), 0)


def test_link_generation_rises_while_busy(nvml_session: Any, lab_root: Path) -> None:
    nvml = nvml_session(flatten(scenario_state("phb")))
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 1
    busy = lab_root / RUN_SUBDIR / "busy"
    busy.mkdir()
    (busy / "0").write_text(f"{time.time() + 30:.3f}\n")
    assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 4
    assert nvml.nvmlDeviceGetPerformanceState(handle) == nvml.NVML_PSTATE_0
    assert nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES) == 24_600_000
    (busy / "0").write_text(f"{time.time() - 1:.3f}\n")
    assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 1


def test_persistence_mode_is_shared_through_the_run_file(nvml_session: Any, lab_root: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("setting persistence mode needs root, like the real NVML")
    nvml = nvml_session(flatten(scenario_state("phb")))
    handle = nvml.nvmlDeviceGetHandleByIndex(1)
    nvml.nvmlDeviceSetPersistenceMode(handle, nvml.NVML_FEATURE_ENABLED)
    assert (lab_root / RUN_SUBDIR / "persistence" / "1").read_text() == "1\n"
    assert nvml.nvmlDeviceGetPersistenceMode(handle) == nvml.NVML_FEATURE_ENABLED
    (lab_root / RUN_SUBDIR / "persistence" / "1").write_text("0\n")
    assert nvml.nvmlDeviceGetPersistenceMode(handle) == nvml.NVML_FEATURE_DISABLED


def test_persistence_set_without_root_is_refused(native_build: Path) -> None:
    system_python = Path("/usr/bin/python3")
    if not system_python.exists():
        pytest.skip("needs /usr/bin/python3 to run as an unprivileged user")
    unprivileged_user = 65534 if os.geteuid() == 0 else None  # nobody
    script = (
        "import ctypes, sys\n"
        "lib = ctypes.CDLL(sys.argv[1])\n"
        "assert lib.nvmlInit_v2() == 0\n"
        "handle = ctypes.c_void_p()\n"
        "assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0\n"
        "print(lib.nvmlDeviceSetPersistenceMode(handle, 1))\n"
    )
    # pytest's own tmp dirs are private to root; this one must be readable by nobody.
    with tempfile.TemporaryDirectory(prefix="lingbot-native-") as shared:
        root = Path(shared)
        root.chmod(0o755)
        write_lab_root(root, flatten(scenario_state("phb")))
        for directory in (root / "run", root / RUN_SUBDIR):
            directory.chmod(0o755)
        library = root / "libnvidia-ml.so.1"
        shutil.copy(native_build / "libnvidia-ml.so.1", library)
        library.chmod(0o755)
        result = subprocess.run(
            [str(system_python), "-c", script, str(library)],
            env={"LINGBOT_LAB_ROOT": str(root), "PATH": os.environ.get("PATH", "")},
            user=unprivileged_user,
            capture_output=True,
            text=True,
            check=False,
            cwd="/",
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "4"  # NVML_ERROR_NO_PERMISSION
        assert not (root / RUN_SUBDIR / "persistence").exists()


def test_calls_before_init_are_uninitialized(nvml_library: Any) -> None:
    import ctypes

    count = ctypes.c_uint()
    assert nvml_library.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 1
    nvml_library.nvmlErrorString.restype = ctypes.c_char_p
    assert nvml_library.nvmlErrorString(15) == b"GPU is lost"


def test_missing_state_means_driver_not_loaded(nvml_library: Any, lab_root: Path) -> None:
    import pynvml

    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()


def test_libraries_of_another_version_than_the_module_are_a_version_mismatch(
    nvml_library: Any, lab_root: Path
) -> None:
    import pynvml

    state = scenario_state("phb")
    state["driver"]["library_version"] = "550.90.07"
    write_lab_root(lab_root, flatten(state))
    with pytest.raises(pynvml.NVMLError_LibRmVersionMismatch):
        pynvml.nvmlInit()


def test_small_buffers_are_refused(nvml_session: Any, nvml_library: Any) -> None:
    import ctypes

    nvml_session(flatten(scenario_state("phb")))
    handle = ctypes.c_void_p()
    assert nvml_library.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
    name = ctypes.create_string_buffer(8)
    assert nvml_library.nvmlDeviceGetName(handle, name, 8) == 7  # INSUFFICIENT_SIZE


def test_unknown_bus_id_is_not_found(nvml_session: Any) -> None:
    nvml = nvml_session(flatten(scenario_state("phb")))
    with pytest.raises(nvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetHandleByPciBusId(b"0000:99:00.0")
