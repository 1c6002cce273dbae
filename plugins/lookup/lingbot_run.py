"""Lookup plugin: this run's id, and the runs of this controller that are still running."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: lingbot_run
short_description: The id of this ansible-playbook run and the live runs of this controller
description:
  - Returns one mapping with C(run_id), the same for every host of one ansible-playbook run
    (C(<UTC start>-<controller host>-p<pid>) of the ansible-playbook process), and
    C(live_runs), the runs this controller started that are still running.
  - Notes this run in the controller's run records
    (C($XDG_STATE_HOME/lingbot-fleet/runs), else C(~/.local/state/lingbot-fleet/runs)) and
    removes the records of runs that are gone. A node lock held by a run of this controller
    that is not live is taken over by the next run (generations role, lock.json).
author:
  - lingbot-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Open this run's generation
  ansible.builtin.set_fact:
    generations_run: "{{ lookup('lingbot_run') }}"
"""

RETURN = r"""
_raw:
  description: One mapping, C({run_id, live_runs}).
  type: list
  elements: dict
"""

import os

from ansible.plugins.lookup import LookupBase

from lingbot_fleet.node.runs import live_runs, register, run_identity


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        # Lookups run in a task worker, forked by the ansible-playbook process: the run.
        identity = run_identity(os.getppid())
        register(identity)
        return [{"run_id": identity.run_id, "live_runs": live_runs()}]
