"""Documentation fragment: the options of every module that writes through NodeChanges."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  generation_run_id:
    description:
      - The run's id (the generations role's C(generations_run_id)). When set, every file
        the module changes is first saved into C(<generations_dir>/pending/<run id>/), under
        the node's run lock (C(<generations_dir>/lock.json)), and the result sets the fact
        C(lingbot_generation_pending) for the play's commit.
    type: str
  generations_dir:
    description: Where the node keeps its generations (the generations role's C(generations_dir)).
    type: path
    default: /var/lib/lingbot-fleet/generations
  generations_live_runs:
    description:
      - The runs of this controller still running (C(generations_live_runs)). A node lock
        held by another run of this controller that is not among them is taken over (that
        run is gone), and its open generation is committed as incomplete, never dropped.
    type: list
    elements: str
"""
