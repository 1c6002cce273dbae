"""What the facts do when the driver answers less: older nvidia-smi, a GPU lost mid-read,
NVML's INTERNAL topology level."""

from __future__ import annotations

import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from facts_support import LAB_SMI, SMI_COMMAND, LabNode, a6000_pair, boot_lab_node

from lingbot_fleet.facts import gather_facts
from lingbot_fleet.facts.document import _gpu_list
from lingbot_fleet.facts.schema import schema_problems
from lingbot_fleet.gpu.linkcheck import LinkPolicy, check_links, driver_findings

OLD_DRIVER_SMI = """#!/bin/sh
# nvidia-smi of a driver older than the pcie.link.gen.gpumax field.
case "$*" in
  *pcie.link.gen.gpumax*)
    echo 'Field "pcie.link.gen.gpumax" is not a valid field to query.'
    echo
    echo "Please run 'nvidia-smi --help-query-gpu' for the list of valid fields."
    exit 2;;
esac
exec {python} {smi} "$@"
"""


@pytest.fixture
def pair_node(tmp_path: Path, lab_env: Any) -> LabNode:
    node = boot_lab_node(a6000_pair(), tmp_path)
    lab_env(node)
    return node


def test_nvidia_smi_without_the_gpumax_field_is_asked_again(
    pair_node: LabNode, tmp_path: Path, no_pynvml: None
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(OLD_DRIVER_SMI.format(python=sys.executable, smi=LAB_SMI))
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    facts = gather_facts(pair_node.root, smi_command=[str(smi)])
    assert facts["sources"]["gpus"] == "nvidia-smi"
    assert not any("nvidia-smi not usable" in note for note in facts["notes"])
    want = pair_node.state["gpus"]
    assert [gpu["uuid"] for gpu in facts["gpus"]] == [gpu["uuid"] for gpu in want]
    for gpu, state in zip(facts["gpus"], want, strict=True):
        # The GPU's own maximum generation comes from sysfs (its LnkCap) instead.
        assert gpu["pcie"]["max_gen_gpu"] == state["link"]["max_gen_gpu"]
        assert gpu["pcie"]["max_gen"] == state["link"]["max_gen"]
    assert facts["topology"] == [["X", "PHB"], ["PHB", "X"]]


def test_other_nvidia_smi_failures_still_fall_back_to_sysfs(
    pair_node: LabNode, tmp_path: Path, no_pynvml: None
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho 'Failed to initialize NVML: Driver/library mismatch'\nexit 18\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    facts = gather_facts(pair_node.root, smi_command=[str(smi)])
    assert facts["sources"]["gpus"] == "sysfs"
    assert any("exited 18: Failed to initialize NVML" in note for note in facts["notes"])


def test_a_gpu_lost_after_its_handle_is_reported_lost(
    pair_node: LabNode, lab_pynvml: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_uuid = lab_pynvml.nvmlDeviceGetUUID

    def uuid_of(handle: Any) -> str:
        if lab_pynvml.nvmlDeviceGetIndex(handle) == 1:
            raise lab_pynvml.NVMLError(lab_pynvml.NVML_ERROR_GPU_IS_LOST)
        return real_uuid(handle)

    monkeypatch.setattr(lab_pynvml, "nvmlDeviceGetUUID", uuid_of)
    facts = gather_facts(pair_node.root)
    assert facts["sources"]["gpus"] == "nvml"
    first, lost = facts["gpus"]
    assert (first["lost"], first["uuid"]) == (False, pair_node.state["gpus"][0]["uuid"])
    assert lost["lost"] is True
    assert "GPU is lost" in lost["error"]
    assert lost["bus_id"] == pair_node.state["gpus"][1]["bdf"]  # from sysfs
    assert facts["topology"] == [["X", None], [None, "X"]]
    assert facts["p2p"]["read"] == [["X", "U"], ["U", "X"]]


def test_topology_internal_between_two_gpus_is_not_self(
    pair_node: LabNode, lab_pynvml: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML_TOPOLOGY_INTERNAL (0) between two GPUs: one board (K80 and other dual-GPU cards),
    behind the board's own switch; nvidia-smi topo -m shows PIX. X is a GPU with itself."""
    monkeypatch.setattr(lab_pynvml, "nvmlDeviceGetTopologyCommonAncestor", lambda a, b: 0)
    facts = gather_facts(pair_node.root)
    assert facts["topology"] == [["X", "PIX"], ["PIX", "X"]]


# --- the driver not loaded, or not to be asked ------------------------------------------------

# The lab driver's state, as its nvidia-smi and its libnvidia-ml read it: gone, the driver
# is not loaded.
DRIVER_STATE = (Path("run/lingbot-lab/state.json"), Path("run/lingbot-lab/state.txt"))


def test_a_driver_that_is_not_loaded_is_told_apart_and_is_critical(
    pair_node: LabNode, lab_pynvml: Any
) -> None:
    """The lab's driver is not loaded when its state is gone (as after a reboot into a
    kernel the module was not built for): NVML says Driver Not Loaded, nvidia-smi exits 9;
    sysfs still lists both GPUs, and the node is critical, not ok."""
    for path in DRIVER_STATE:
        (pair_node.lab_root / path).unlink()
    facts = gather_facts(pair_node.root, smi_command=SMI_COMMAND)
    assert facts["sources"]["gpus"] == "sysfs"
    assert facts["driver"]["state"] == "not_loaded"
    assert [line.split(":")[0] for line in facts["driver"]["evidence"]] == [
        "NVML",
        "nvidia-smi exited 9",
    ]
    assert schema_problems(facts) == []
    [finding] = [f for f in check_links(facts, LinkPolicy()) if f.code.startswith("GPU_DRIVER")]
    bus_ids = [gpu["bdf"] for gpu in pair_node.state["gpus"]]
    assert (finding.code, finding.severity, finding.subject) == (
        "GPU_DRIVER_NOT_LOADED",
        "critical",
        "node",
    )
    assert finding.message == (
        f"the NVIDIA driver is not loaded: 2 NVIDIA GPU(s) on the PCI bus ({', '.join(bus_ids)})"
        " and none can be used"
    )
    assert "dkms" in finding.fix


def test_libraries_of_another_driver_version_than_the_module_are_critical(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    """A driver updated without the reboot that loads its module (fault
    driver_library_mismatch): NVML says RM version mismatch, nvidia-smi exits 18, libcuda
    refuses too; the node is critical, with the fix, not unknown."""
    profile = a6000_pair(
        faults=[{"kind": "driver_library_mismatch", "library_version": "550.90.07"}]
    )
    node = boot_lab_node(profile, tmp_path)
    lab_env(node)
    facts = gather_facts(node.root, smi_command=SMI_COMMAND)
    assert facts["sources"]["gpus"] == "sysfs"
    assert facts["driver"]["state"] == "version_mismatch"
    assert [line.split(":")[0] for line in facts["driver"]["evidence"]] == [
        "NVML",
        "nvidia-smi exited 18",
    ]
    assert "Driver/library version mismatch" in facts["driver"]["evidence"][1]
    assert schema_problems(facts) == []
    [finding] = [f for f in check_links(facts, LinkPolicy()) if f.code.startswith("GPU_DRIVER")]
    assert (finding.code, finding.severity) == ("GPU_DRIVER_VERSION_MISMATCH", "critical")
    assert finding.fix.startswith("the driver was updated without loading its new module")


def test_a_driver_no_tool_can_ask_is_unknown_never_ok(
    pair_node: LabNode, tmp_path: Path, no_pynvml: None
) -> None:
    facts = gather_facts(pair_node.root, smi_command=[str(tmp_path / "no-nvidia-smi")])
    assert facts["driver"]["state"] == "unknown"
    findings = [f for f in check_links(facts, LinkPolicy()) if f.code.startswith("GPU_DRIVER")]
    assert [(f.code, f.severity) for f in findings] == [("GPU_DRIVER_UNKNOWN", "warning")]


def test_a_driver_that_answers_gives_no_driver_finding(pair_node: LabNode, lab_pynvml: Any) -> None:
    facts = gather_facts(pair_node.root)
    assert facts["driver"] == {
        "state": "answers",
        "evidence": [],
        "kernel_module_version": "550.54.15",
    }
    assert not [f for f in check_links(facts, LinkPolicy()) if f.code.startswith("GPU_DRIVER")]


def test_facts_of_an_older_toolkit_read_from_sysfs_alone_count_as_unknown() -> None:
    facts = {"sources": {"gpus": "sysfs"}, "notes": ["n"], "gpus": [{"index": 0, "bus_id": "b"}]}
    [finding] = driver_findings(facts)
    assert (finding.code, finding.evidence) == ("GPU_DRIVER_UNKNOWN", {"driver": ["n"]})
    assert driver_findings({**facts, "sources": {"gpus": "nvml"}}) == []


def test_a_gpu_on_the_bus_the_driver_does_not_list_is_lost_by_its_own_bus_id(
    pair_node: LabNode,
) -> None:
    """The driver lists only the second GPU (the first failed to initialise): the first is
    a lost GPU with its own bus id, not a second entry for the GPU the driver answers for."""
    first, second = (gpu["bdf"] for gpu in pair_node.state["gpus"])
    driver = {"gpus": [{"index": 0, "bus_id": second, "uuid": "GPU-b", "lost": False}]}
    gpus = _gpu_list(driver, pair_node.root, {"groups": {}})
    assert [(gpu["index"], gpu["bus_id"], gpu["lost"]) for gpu in gpus] == [
        (0, second, False),
        (1, first, True),
    ]
    [lost] = [f for f in check_links({"gpus": gpus}, LinkPolicy()) if f.code == "GPU_LOST"]
    assert (lost.severity, lost.subject) == ("critical", first)


def test_health_read_through_nvidia_smi_because_nvml_failed_is_unknown(
    pair_node: LabNode, no_pynvml: None
) -> None:
    facts = gather_facts(pair_node.root, smi_command=SMI_COMMAND)
    assert facts["sources"]["gpus"] == "nvidia-smi"
    unread = [f for f in check_links(facts, LinkPolicy()) if f.code == "GPU_HEALTH_UNREAD"]
    assert [(f.severity, f.subject) for f in unread] == [("info", "node")]
    assert "memory errors, NVLink state and error counters" in unread[0].message
    assert "nvidia-ml-py" in unread[0].fix
    assert unread[0].evidence["notes"][0].startswith("NVML not used: ")
    # NVML turned off by the caller (a test, a deliberate choice) is no finding, and NVML
    # read is none either.
    off = gather_facts(pair_node.root, use_nvml=False, smi_command=SMI_COMMAND)
    assert "GPU_HEALTH_UNREAD" not in {f.code for f in check_links(off, LinkPolicy())}
