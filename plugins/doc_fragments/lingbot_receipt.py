"""Documentation fragment: the option of every module that leaves a receipt."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  receipt_digest:
    description:
      - Set by the module's action plugin, not by a task. The digest of the options and of
        the toolkit's code (C(lingbot_fleet.receipt_action.receipt_digest)) that the
        receipt the module writes after it verified the node keeps, under
        C(/var/lib/lingbot-fleet/receipts/). A later run whose gpu_facts reading shows the
        same digest and nothing moved answers without calling the module.
    type: str
"""
