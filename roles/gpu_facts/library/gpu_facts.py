#!/usr/bin/python
"""Ansible module: gather the node's GPU facts in one call (lingbot_fleet.facts)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather GPU, PCIe, NUMA, IOMMU and P2P facts of a node in one call
description:
  - Reads NVML through pynvml (nvidia-ml-py) when it is importable, sysfs and /proc, and
    runs nvidia-smi only as a fallback when NVML is not importable.
  - Returns the facts as C(ansible_facts.lingbot_gpu), a versioned document described in
    docs/facts.md of lingbot-fleet; C(sources) tells where each field group came from.
  - Changes nothing.
options:
  root:
    description: Directory read as C(/) for sysfs and /proc (tests point it at a rendered tree).
    type: path
    default: /
  nvml:
    description: C(auto) uses NVML when pynvml imports; C(off) goes straight to nvidia-smi.
    type: str
    choices: [auto, "off"]
    default: auto
  nvml_python_path:
    description:
      - Directories to search for pynvml besides the interpreter's own path; shell-style
        patterns are expanded (e.g. C(/opt/lingbot-fleet/venv/lib/python3*/site-packages)).
    type: list
    elements: str
    default: []
  nvidia_smi:
    description: The nvidia-smi command used by the fallback.
    type: str
    default: nvidia-smi
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
author:
  - lingbot-fleet
"""

EXAMPLES = r"""
- name: Gather the GPU facts
  gpu_facts:
    nvml_python_path:
      - /opt/lingbot-fleet/venv/lib/python3*/site-packages
"""

RETURN = r"""
ansible_facts:
  description: The facts, under the single key lingbot_gpu.
  returned: always
  type: dict
  contains:
    lingbot_gpu:
      description: Facts document (schema_version 1, see docs/facts.md).
      type: dict
"""


from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.facts import FACT_NAME, gather_facts


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "nvml": {"type": "str", "choices": ["auto", "off"], "default": "auto"},
            "nvml_python_path": {"type": "list", "elements": "str", "default": []},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        },
        supports_check_mode=True,
    )
    params = module.params
    smi = module.get_bin_path(params["nvidia_smi"]) or params["nvidia_smi"]
    facts = gather_facts(
        root=params["root"],
        nvml=params["nvml"],
        nvml_python_path=params["nvml_python_path"],
        smi_command=[smi],
    )
    module.exit_json(changed=False, ansible_facts={FACT_NAME: facts})


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
