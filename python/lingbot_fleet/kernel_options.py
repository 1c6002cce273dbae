"""The options of the kernel_cmdline module.

One owner for both sides: the module validates its options with ARGUMENT_SPEC and, after a
call that changed nothing outside check mode, keeps its receipt (``lingbot_fleet.receipts.
keep``) with the ``boot_state`` reading (``lingbot_fleet.bootfiles.boot_state_digest``:
every boot file, /proc/cmdline and the boot id). The action plugin of the same name
validates the task's options with the same spec; when the receipt stands (same digest of
options and code, same boot state), it answers with the module's recorded result and no
connection is made (docs/converged-runs.md).

Stdlib only: runs on nodes too.
"""

from __future__ import annotations

from typing import Any

from .nodefiles import GENERATION_ARGUMENT_SPEC
from .receipts import RECEIPT_ARGUMENT_SPEC

RECEIPT_ROLE = "kernel_cmdline"
ARGUMENT_SPEC: dict[str, Any] = {
    "present": {"type": "dict", "default": {}},
    "absent": {"type": "list", "elements": "str", "default": []},
    "iommu_vendor_switch": {"type": "bool", "default": False},
    "bootloader": {"type": "str", "choices": ["auto", "grub_d", "grubby"], "default": "auto"},
    "dropin_name": {"type": "str", "default": "lingbot-fleet"},
    "update_bootloader": {"type": "bool", "default": True},
    "backup_dir": {"type": "path", "default": "/var/lib/lingbot-fleet/backup"},
    "root": {"type": "path", "default": "/"},
    "verify": {"type": "bool", "default": False},
    "verify_gpu_numa": {"type": "bool", "default": True},
    "verify_against": {"type": "str", "choices": ["policy", "configuration"], "default": "policy"},
    **GENERATION_ARGUMENT_SPEC,
    **RECEIPT_ARGUMENT_SPEC,
}
