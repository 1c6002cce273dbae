#!/usr/bin/python
"""Ansible module lingbot_instances: the LingBot instances present on a node."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lingbot_instances
short_description: List the lingbot@<instance> instances a node has, and their files
description:
  - An instance is present when any of these exists - C(<config_dir>/<instance>/), the
    drop-in directory C(<unit_dir>/lingbot@<instance>.service.d/), or an enable link
    C(<unit_dir>/*.wants/lingbot@<instance>.service).
  - Returns, per instance, its regular files (to record before removing them) and
    whether it is enabled. Changes nothing.
options:
  config_dir:
    description: Where the instances' config directories live.
    type: path
    default: /etc/lingbot
  unit_dir:
    description: Where systemd units live.
    type: path
    default: /etc/systemd/system
  keep:
    description: Instance names to leave out of RV(stale).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - lingbot-fleet
"""

EXAMPLES = r"""
- name: List the LingBot instances on the node
  lingbot_instances:
    keep: "{{ lingbot_plan.instances | map(attribute='name') }}"
  register: present
"""

RETURN = r"""
instances:
  description: Instance name -> {files, enabled, config_dir, dropin_dir}.
  returned: always
  type: dict
stale:
  description: Present instances not in O(keep), sorted.
  returned: always
  type: list
  elements: str
template_present:
  description: Whether C(<unit_dir>/lingbot@.service) exists.
  returned: always
  type: bool
stale_files:
  description: Every regular file of the stale instances, sorted.
  returned: always
  type: list
  elements: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

DROPIN_DIR_RE = re.compile(r"lingbot@(.+)\.service\.d")
ENABLE_LINK_RE = re.compile(r"lingbot@(.+)\.service")


def listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def regular_files(directory: str) -> list[str]:
    files = []
    for base, _dirs, names in os.walk(directory):
        for name in names:
            path = os.path.join(base, name)
            if os.path.isfile(path) and not os.path.islink(path):
                files.append(path)
    return sorted(files)


def find_instances(config_dir: str, unit_dir: str) -> dict[str, dict]:
    instances: dict[str, dict] = {}

    def entry(name: str) -> dict:
        return instances.setdefault(
            name,
            {
                "files": [],
                "enabled": False,
                "config_dir": os.path.join(config_dir, name),
                "dropin_dir": os.path.join(unit_dir, f"lingbot@{name}.service.d"),
            },
        )

    for name in listdir(config_dir):
        if os.path.isdir(os.path.join(config_dir, name)):
            entry(name)
    for name in listdir(unit_dir):
        match = DROPIN_DIR_RE.fullmatch(name)
        if match and os.path.isdir(os.path.join(unit_dir, name)):
            entry(match.group(1))
        if name.endswith(".wants"):
            for link in listdir(os.path.join(unit_dir, name)):
                found = ENABLE_LINK_RE.fullmatch(link)
                if found and found.group(1):
                    entry(found.group(1))["enabled"] = True
    for info in instances.values():
        info["files"] = regular_files(info["config_dir"]) + regular_files(info["dropin_dir"])
    return instances


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "config_dir": {"type": "path", "default": "/etc/lingbot"},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "keep": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    instances = find_instances(module.params["config_dir"], module.params["unit_dir"])
    stale = sorted(set(instances) - set(module.params["keep"]))
    module.exit_json(
        changed=False,
        instances=instances,
        stale=stale,
        template_present=os.path.isfile(
            os.path.join(module.params["unit_dir"], "lingbot@.service")
        ),
        stale_files=sorted(path for name in stale for path in instances[name]["files"]),
    )


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
