#!/usr/bin/python
"""Ansible module: read everything the fleet audit needs from a node, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lingbot_audit_node
short_description: Read a node's GPU facts, boot parameters, probe, LingBot config and generations
description:
  - One read-only call per node for the fleet audit (playbooks/audit.yml). Returns the GPU
    facts (as gpu_facts gathers them), the running kernel command line, the parameters the
    next boot gets (default BLS entry, else grub.cfg) and the grub defaults, the last saved
    probe result, the deployed LingBot configs and plan.json, and the generations list.
  - The node only reads. The boot files are sent as text and the generations as their
    manifests and saved copies' checksums; the action plugin parses and checks them on the
    controller, with the same code as on the node (lingbot_fleet.audit.node_document), so
    a node never compiles the grub parsers for a read-only call.
  - Changes nothing, in check mode or not. A section that cannot be read carries an
    C(error) and the other sections still come back.
  - Paired with the action plugin of the same name, which evaluates the result on the
    controller (findings, plan, drift, pending reboot); see docs/audit.md.
options:
  root:
    description: Directory read as C(/) (tests point it at a rendered lab tree).
    type: path
    default: /
  use_nvml:
    description: Read through NVML when pynvml imports; false reads with nvidia-smi.
    type: bool
    default: true
  nvml_python_path:
    description: Directories (patterns allowed) searched for pynvml.
    type: list
    elements: str
    default: []
  nvidia_smi:
    description: The nvidia-smi command of the fallback.
    type: str
    default: nvidia-smi
  probe_path:
    description: The last saved probe result (p2p_probe).
    type: path
    default: /var/lib/lingbot-fleet/probe/latest.json
  lingbot_dir:
    description: Where the deployed LingBot configs live (C(<dir>/<instance>/config.yaml)).
    type: path
    default: /etc/lingbot
  plan_path:
    description: The deployed plan document.
    type: path
    default: /etc/lingbot/plan.json
  generations_dir:
    description: Where the node keeps its generations.
    type: path
    default: /var/lib/lingbot-fleet/generations
attributes:
  check_mode:
    description: Can run in check mode and predicts the change without making it.
    support: full
  diff_mode:
    description: Returns the before and after of what it changes (or would change) with --diff.
    support: none
author:
  - lingbot-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the node for the audit
  lingbot_audit_node:
  register: audit_node
"""

RETURN = r"""
node:
  description: >-
    schema_version, facts (docs/facts.md), kernel (boot_files {node path: text},
    cpu_vendor), probe (docs/probe.md or null), probe_path, lingbot (configs {instance:
    {path, sha256, text}}, plan), generations (the listing, manifests and checksums the
    action plugin checks); any section may be {error}. The action plugin returns the
    completed document (docs/audit.md) evaluated, as C(audit).
  returned: always
  type: dict
"""


from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.facts.audit_reading import (
    DEFAULT_GENERATIONS_DIR,
    DEFAULT_PROBE_PATH,
    read_node,
)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "use_nvml": {"type": "bool", "default": True},
            "nvml_python_path": {"type": "list", "elements": "str", "default": []},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "probe_path": {"type": "path", "default": DEFAULT_PROBE_PATH},
            "lingbot_dir": {"type": "path", "default": "/etc/lingbot"},
            "plan_path": {"type": "path", "default": "/etc/lingbot/plan.json"},
            "generations_dir": {"type": "path", "default": DEFAULT_GENERATIONS_DIR},
        },
        supports_check_mode=True,
    )
    params = module.params
    paths = params["nvml_python_path"]
    smi = module.get_bin_path(params["nvidia_smi"]) or params["nvidia_smi"]
    node = read_node(
        root=params["root"],
        use_nvml=params["use_nvml"],
        nvml_python_path=paths,
        smi_command=[smi],
        probe_path=params["probe_path"],
        lingbot_dir=params["lingbot_dir"],
        plan_path=params["plan_path"],
        generations_dir=params["generations_dir"],
    )
    module.exit_json(changed=False, node=node)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
