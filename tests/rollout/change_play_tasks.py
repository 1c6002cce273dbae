"""Prints, as JSON, the tasks of a playbook's play that changes the node, as Ansible
compiles it for one host of inventory/example: each task's role and action, and for every
gpu_facts reading its arguments as templated for that host. Run as a script (Ansible reads
its configuration when imported): change_play_tasks.py <playbook> <play name>."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ansible import context
from ansible.inventory.manager import InventoryManager
from ansible.module_utils.common.collections import ImmutableDict
from ansible.parsing.dataloader import DataLoader
from ansible.playbook import Playbook
from ansible.playbook.block import Block
from ansible.playbook.task import Task
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar
from ansible.vars.manager import VariableManager

REPO = Path(__file__).resolve().parents[2]
RUN_ID = "run-1"


def tasks_of(items: list[Any]) -> Iterator[Task]:
    for item in items:
        if isinstance(item, Block):
            for part in (item.block, item.rescue, item.always):
                yield from tasks_of(part)
        else:
            yield item


def main(playbook: str, play_name: str) -> None:
    context.CLIARGS = ImmutableDict(tags=[], skip_tags=[], check=False, diff=False, verbosity=0)
    init_plugin_loader()
    loader = DataLoader()
    inventory = InventoryManager(
        loader=loader, sources=[str(REPO / "inventory" / "example" / "hosts.yml")]
    )
    variables = VariableManager(loader=loader, inventory=inventory)
    host = inventory.get_hosts("gpu-nodes")[0]
    # What generations' tasks/open.yml sets in the first play.
    variables.set_host_variable(host.name, "generations_run_id", RUN_ID)
    [play] = [
        play
        for play in Playbook.load(str(REPO / playbook), variables, loader).get_plays()
        if play.get_name() == play_name
    ]
    found = []
    for task in tasks_of(play.compile()):
        entry: dict[str, Any] = {
            "role": task._role.get_name() if task._role else None,
            "action": task.action,
        }
        if task.action == "gpu_facts":
            templar = Templar(loader, variables.get_vars(play=play, host=host, task=task))
            entry["args"] = templar.template(task.args)
        found.append(entry)
    print(json.dumps(found, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:])
