"""After a reboot: did the GPUs come back? Stdlib only (runs on the node, in the
kernel_cmdline module's verify mode).

The kernel command line can be right while the node is useless: the boot came up in a
kernel the NVIDIA module was not built for (the driver is not loaded), a GPU fell off the
bus or did not train, or the driver failed to initialise one of them. The proof holds the
node to the GPUs it had before the reboot (their bus ids) and to a driver that answers for
every NVIDIA GPU on the PCI bus. A driver that cannot be asked (no NVML binding and no
nvidia-smi) proves nothing either way: that is said in the evidence, and is no problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..facts import sysfs
from ..facts.document import (
    DRIVER_ANSWERS,
    DRIVER_NOT_LOADED,
    DRIVER_VERSION_MISMATCH,
    read_driver_view,
)

SMI_COMMAND = ("nvidia-smi",)


def _listed(bus_ids: Sequence[str]) -> str:
    return ", ".join(bus_ids)


def gpu_problems(
    root: str,
    gpus_before: Sequence[str],
    *,
    smi_command: Sequence[str] = SMI_COMMAND,
    nvml_python_path: Sequence[str] = (),
) -> tuple[list[str], dict[str, Any]]:
    """(problems, evidence) of the GPUs after a reboot. ``gpus_before``: the bus ids of the
    NVIDIA GPUs the node had before it (empty: nothing to hold it to)."""
    on_bus = sysfs.nvidia_gpu_bus_ids(root)
    present = {bus_id.lower() for bus_id in on_bus}
    problems: list[str] = []
    evidence: dict[str, Any] = {"gpus_on_bus": on_bus, "gpus_before": list(gpus_before)}
    gone = [bus_id for bus_id in gpus_before if bus_id.lower() not in present]
    if gone and len(on_bus) >= len(gpus_before):
        # As many GPUs as before under other bus numbers: the firmware renumbered the bus
        # (a changed PCI option can), no GPU is missing. The driver check below still holds.
        evidence["renumbered"] = gone
    elif gone:
        problems.append(
            f"{len(gone)} GPU(s) on the PCI bus before the reboot are not there now"
            f" ({_listed(gone)}): fallen off the bus or not trained; check the kernel log"
            " (Xid 79, AER) and the slot, and power-cycle the node"
        )
    if not on_bus:
        return problems, evidence
    driver, _source, _notes, state = read_driver_view(True, nvml_python_path, smi_command)
    evidence["driver"] = state
    if state["state"] == DRIVER_NOT_LOADED:
        problems.append(
            f"the NVIDIA driver is not loaded after the reboot, so none of the {len(on_bus)}"
            f" GPU(s) on the PCI bus can be used ({'; '.join(state['evidence'])}): load it"
            " (modprobe nvidia); when that fails its module is not built for this kernel:"
            " build it (dkms autoinstall) or boot the kernel it was built for"
        )
    elif state["state"] == DRIVER_VERSION_MISMATCH:
        problems.append(
            f"the NVIDIA driver's libraries and the kernel module loaded after the reboot are"
            f" of different versions, so none of the {len(on_bus)} GPU(s) on the PCI bus can"
            f" be used ({'; '.join(state['evidence'])}): the module built for this kernel is"
            " not the installed driver's; rebuild it (dkms autoinstall) and reboot again"
        )
    elif state["state"] == DRIVER_ANSWERS:
        answered = {str(gpu.get("bus_id")).lower() for gpu in (driver or {}).get("gpus", [])}
        lost = {
            str(gpu.get("bus_id")).lower()
            for gpu in (driver or {}).get("gpus", [])
            if gpu.get("lost")
        }
        silent = [b for b in on_bus if b.lower() not in answered or b.lower() in lost]
        if silent:
            problems.append(
                f"the driver answers for {len(on_bus) - len(silent)} of the {len(on_bus)}"
                f" GPU(s) on the PCI bus; not for {_listed(silent)}: check the kernel log"
                " (NVRM, Xid) for why it did not initialise them"
            )
    return problems, evidence
