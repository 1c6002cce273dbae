"""Action plugin gpu_facts: the node is read once per boot in a run.

site.yml and rollout.yml read the facts first (playbooks/tasks/change_node.yml), so
kernel_cmdline can answer from its receipt, and the GPU roles read them again through their
gpu_facts dependency. That second task answers from the first reading, without a
connection, when the reading was made in this run (``reuse_in_run``: the run id,
``generations_run_id``), with the same options, in the boot the host is in now: the newest
boot id the run has seen (``ansible_facts.lingbot_boot_id``, which gpu_facts and
kernel_cmdline return, so a reboot in between has the facts read again), unless that
reading found the toolkit's venv without pynvml (the role installs it then; the next
reading goes through NVML). Anything else runs the module.

After a call, the plugin keeps the stamp of that reading as ``ansible_facts.
lingbot_gpu_gathered`` (run id, options digest, boot id, and the module's pynvml answers,
which the role's next task reads).
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from lingbot_fleet.boot.bootfiles import BOOT_ID_FACT
from lingbot_fleet.controller.ansible_data import plain_data as plain
from lingbot_fleet.controller.receipt_action import execute
from lingbot_fleet.node import receipts

MODULE = "gpu_facts"
GATHERED_FACT = "lingbot_gpu_gathered"
RUN_OPTION = "reuse_in_run"


def reading_stands(gathered: Any, run_id: Any, digest: str, boot_id: Any) -> bool:
    """Whether a reading (its stamp) stands in for a new one: same run, options and boot,
    and not a reading that found the venv without pynvml (the role installs it then, and
    the next reading is to go through NVML)."""
    return (
        isinstance(gathered, dict)
        and bool(run_id)
        and gathered.get("run_id") == run_id
        and gathered.get("options_digest") == digest
        and bool(boot_id)
        and gathered.get("boot_id") == boot_id
        and gathered.get("pynvml_in_venv") is not False
    )


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        facts = (task_vars or {}).get("ansible_facts") or {}
        args = plain(self._task.args)
        run_id = args.pop(RUN_OPTION, None)
        digest = receipts.options_digest(args)
        gathered = plain(facts.get(GATHERED_FACT))
        if not self._task.delegate_to and reading_stands(
            gathered, run_id, digest, facts.get(BOOT_ID_FACT)
        ):
            result.update(
                changed=False,
                pynvml_path=gathered.get("pynvml_path"),
                pynvml_in_venv=gathered.get("pynvml_in_venv"),
                reused=True,
                msg="the facts read earlier in this run, in this boot, stand; no call",
            )
            return result
        result.update(execute(self, MODULE, args, task_vars))
        new_facts = result.get("ansible_facts")
        if run_id and not result.get("failed") and isinstance(new_facts, dict):
            new_facts[GATHERED_FACT] = {
                "run_id": run_id,
                "options_digest": digest,
                "boot_id": new_facts.get(BOOT_ID_FACT),
                "pynvml_path": result.get("pynvml_path"),
                "pynvml_in_venv": result.get("pynvml_in_venv"),
            }
        return result
