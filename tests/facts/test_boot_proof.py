"""After a reboot the kernel_cmdline module proves the GPUs came back (gpu/boot_proof.py):
the GPUs of before on the bus, the driver loaded and answering for each, on a lab pair."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from facts_support import SMI_COMMAND, LabNode, a6000_pair, boot_lab_node

from lingbot_fleet.gpu.boot_proof import gpu_problems

DRIVER_STATE = (Path("run/lingbot-lab/state.json"), Path("run/lingbot-lab/state.txt"))


@pytest.fixture
def pair_node(tmp_path: Path, lab_env: Any) -> LabNode:
    node = boot_lab_node(a6000_pair(), tmp_path)
    lab_env(node)
    return node


def bus_ids(node: LabNode) -> list[str]:
    return [gpu["bdf"] for gpu in node.state["gpus"]]


def test_the_same_gpus_with_the_driver_answering_prove_the_boot(
    pair_node: LabNode, lab_pynvml: Any
) -> None:
    problems, evidence = gpu_problems(str(pair_node.root), bus_ids(pair_node))
    assert problems == []
    assert evidence["driver"]["state"] == "answers"
    assert evidence["gpus_on_bus"] == bus_ids(pair_node)


def test_the_driver_not_loaded_after_the_reboot_is_named(
    pair_node: LabNode, no_pynvml: None
) -> None:
    for path in DRIVER_STATE:
        (pair_node.lab_root / path).unlink()
    problems, evidence = gpu_problems(
        str(pair_node.root), bus_ids(pair_node), smi_command=SMI_COMMAND
    )
    [problem] = problems
    assert problem.startswith(
        "the NVIDIA driver is not loaded after the reboot, so none of the 2 GPU(s) on the PCI"
        " bus can be used (nvidia-smi exited 9: "
    )
    assert problem.endswith(
        "load it (modprobe nvidia); when that fails its module is not built for this kernel:"
        " build it (dkms autoinstall) or boot the kernel it was built for"
    )
    assert evidence["driver"]["state"] == "not_loaded"


def test_a_module_of_another_version_than_the_libraries_is_named(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    profile = a6000_pair(
        faults=[{"kind": "driver_library_mismatch", "library_version": "550.90.07"}]
    )
    node = boot_lab_node(profile, tmp_path)
    lab_env(node)
    problems, evidence = gpu_problems(str(node.root), bus_ids(node), smi_command=SMI_COMMAND)
    [problem] = problems
    assert problem.startswith(
        "the NVIDIA driver's libraries and the kernel module loaded after the reboot are of"
        " different versions, so none of the 2 GPU(s) on the PCI bus can be used (NVML: "
    )
    assert problem.endswith("rebuild it (dkms autoinstall) and reboot again")
    assert evidence["driver"]["state"] == "version_mismatch"


def test_a_gpu_gone_from_the_bus_is_named_by_its_bus_id(
    pair_node: LabNode, lab_pynvml: Any
) -> None:
    gone = "0000:c1:00.0"
    problems, _evidence = gpu_problems(str(pair_node.root), [*bus_ids(pair_node), gone])
    assert problems == [
        f"1 GPU(s) on the PCI bus before the reboot are not there now ({gone}): fallen off the"
        " bus or not trained; check the kernel log (Xid 79, AER) and the slot, and power-cycle"
        " the node"
    ]


def test_a_driver_no_tool_can_ask_proves_nothing_and_fails_nothing(
    pair_node: LabNode, tmp_path: Path, no_pynvml: None
) -> None:
    problems, evidence = gpu_problems(
        str(pair_node.root), bus_ids(pair_node), smi_command=[str(tmp_path / "no-nvidia-smi")]
    )
    assert problems == []
    assert evidence["driver"]["state"] == "unknown"


def test_the_same_count_under_other_bus_numbers_is_no_gpu_gone(
    pair_node: LabNode, lab_pynvml: Any
) -> None:
    before = ["0000:c1:00.0", bus_ids(pair_node)[1]]
    problems, evidence = gpu_problems(str(pair_node.root), before)
    assert problems == []
    assert evidence["renumbered"] == ["0000:c1:00.0"]
