"""Documentation fragment: the option of every module that leaves a receipt."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  receipt_digest:
    description:
      - Set by the module's action plugin, not by a task. The digest of the options (every
        option but the run's and those marked no_log) and of the toolkit's code
        (C(lingbot_fleet.controller.receipt_action)) that the receipt the module keeps after a call
        that changed nothing holds, under C(/var/lib/lingbot-fleet/receipts/), with the
        call's result and what its NodeChanges watched. A later run whose gpu_facts
        reading shows the same digest and nothing moved answers with that result without
        calling the module (docs/converged-runs.md). Without it no receipt is kept.
    type: str
"""
