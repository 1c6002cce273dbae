"""The options of the kernel_cmdline module.

One owner for both sides: the module validates its options with ARGUMENT_SPEC and, after a
call that changed nothing outside check mode, keeps its receipt (``lingbot_fleet.node.receipts.
keep``) with the ``boot_state`` reading (``lingbot_fleet.boot.bootfiles.boot_state_digest``:
every boot file, /proc/cmdline and the boot id). The action plugin of the same name
validates the task's options with the same spec; when the receipt stands (same digest of
options and code, same boot state), it answers with the module's recorded result and no
connection is made (docs/converged-runs.md).

Stdlib only: runs on nodes too.
"""

from __future__ import annotations

from typing import Any

from ..node import values
from ..node.nodefiles import GENERATION_ARGUMENT_SPEC
from ..node.receipts import RECEIPT_ARGUMENT_SPEC
from ..node.state_dirs import KERNEL_CMDLINE_BACKUP_DIR
from .cmdline import PolicyError, build_policy

RECEIPT_ROLE = "kernel_cmdline"
ARGUMENT_SPEC: dict[str, Any] = {
    "present": {"type": "dict", "default": {}},
    "absent": {"type": "list", "elements": "str", "default": []},
    "iommu_vendor_switch": {"type": "bool", "default": False},
    "bootloader": {"type": "str", "choices": ["auto", "grub_d", "grubby"], "default": "auto"},
    "dropin_name": {"type": "str", "default": "lingbot-fleet"},
    "allow_risky_params": {"type": "list", "elements": "str", "default": []},
    "update_bootloader": {"type": "bool", "default": True},
    "backup_dir": {"type": "path", "default": KERNEL_CMDLINE_BACKUP_DIR},
    "root": {"type": "path", "default": "/"},
    "verify": {"type": "bool", "default": False},
    "verify_gpu_numa": {"type": "bool", "default": True},
    "verify_gpus": {"type": "bool", "default": True},
    "verify_gpus_before": {"type": "list", "elements": "str", "default": []},
    "verify_against": {"type": "str", "choices": ["policy", "configuration"], "default": "policy"},
    "guard_reboot": {"type": "bool", "default": False},
    **GENERATION_ARGUMENT_SPEC,
    **RECEIPT_ARGUMENT_SPEC,
}
# The role variable each checked option comes from: messages name what the operator sets.
DROPIN_NAME_VARIABLE = "kernel_cmdline_dropin_name"
PRESENT_VARIABLE = "kernel_cmdline_present"
ABSENT_VARIABLE = "kernel_cmdline_absent"


def check_values(present: Any, absent: Any, dropin_name: Any, allow_risky_params: Any = ()) -> None:
    """Refuse a drop-in name that is not a plain file name and a present or absent kernel
    parameter outside the grammar or on the deny-list (``lingbot_fleet.node.values``), with the
    message the policy play gives. A policy ``build_policy`` refuses is left to its own
    message (the module reports it). Raises values.ValueRefusedError."""
    values.file_name(dropin_name, DROPIN_NAME_VARIABLE)
    try:
        build_policy(present, absent)
    except PolicyError:
        return
    allow = list(allow_risky_params or [])
    for name, value in dict(present or {}).items():
        values.kernel_parameter(name, value, f"{PRESENT_VARIABLE}.{name}", allow_risky=allow)
    for position, entry in enumerate(absent or []):
        name, sep, value = entry.strip().partition("=")
        values.kernel_parameter(
            name,
            value if sep else None,
            f"{ABSENT_VARIABLE}[{position}]",
            allow_risky=allow,
            removing=True,
        )
