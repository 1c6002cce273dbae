#!/usr/bin/python
"""Ansible module lingbot_config: write one LingBot config.yaml, validated first."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lingbot_config
short_description: Write a LingBot config.yaml from the plan, with overrides, validated
description:
  - Merges O(overrides) on top of O(config) (mappings key by key, anything else
    replaces), checks the result against LingBot's config.yaml schema
    (shared/LINGBOT.md) and writes it as block YAML to O(path), atomically.
  - Nothing is written when the overrides carry an unknown key or a wrong type, or when
    the merged document breaks the schema; the module fails listing every problem with
    its key path.
  - Bandwidths in config.yaml are Gbit/s. When O(peer_access_threshold_gbytes_per_s) is
    given, C(hardware_profile.p2p_threshold_gbps) must equal it times 8, since LingBot's
    command line (GB/s) wins over the file.
  - The output is deterministic (keys in the document's order), so a second run with the
    same plan changes nothing.
options:
  path:
    description: The config.yaml to write; its directory must exist (outside check mode).
    type: path
    required: true
  config:
    description: The planned config document (an instance's C(config) in the plan).
    type: dict
    required: true
  overrides:
    description: Keys merged on top of O(config) (lingbot_service_config_overrides).
    type: dict
    default: {}
  peer_access_threshold_gbytes_per_s:
    description: The instance's C(--peer-access-threshold), GB/s.
    type: float
  header:
    description: Comment lines written at the top of the file.
    type: str
    default: ""
extends_documentation_fragment:
  - files
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author:
  - lingbot-fleet
"""

EXAMPLES = r"""
- name: Write the instance's config.yaml
  lingbot_config:
    path: /etc/lingbot/main/config.yaml
    config: "{{ lingbot_plan.instances[0].config }}"
    overrides: {debug_mode: true}
    peer_access_threshold_gbytes_per_s: 25
    owner: root
    group: lingbot
    mode: "0640"
"""

RETURN = r"""
config:
  description: The document written (or that would be), overrides merged.
  returned: success
  type: dict
problems:
  description: Every schema problem, each with its key path.
  returned: failure
  type: list
  elements: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.lingbot_config import ConfigError, build_config, to_yaml


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write_atomic(module: AnsibleModule, path: str, text: str) -> None:
    directory = os.path.dirname(path) or "."
    fd, temp_path = tempfile.mkstemp(prefix=".config.yaml.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        os.unlink(temp_path)
        raise
    module.atomic_move(temp_path, path, unsafe_writes=module.params["unsafe_writes"])


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "config": {"type": "dict", "required": True},
            "overrides": {"type": "dict", "default": {}},
            "peer_access_threshold_gbytes_per_s": {"type": "float"},
            "header": {"type": "str", "default": ""},
        },
        add_file_common_args=True,
        supports_check_mode=True,
    )
    path = module.params["path"]
    try:
        document = build_config(
            module.params["config"],
            module.params["overrides"],
            module.params["peer_access_threshold_gbytes_per_s"],
        )
    except ConfigError as error:
        module.fail_json(
            msg=f"{path} not written: the config breaks LingBot's schema:\n- "
            + "\n- ".join(error.problems),
            problems=error.problems,
        )
    text = to_yaml(document, module.params["header"])
    if not module.check_mode and not os.path.isdir(os.path.dirname(path)):
        module.fail_json(msg=f"{path} not written: directory {os.path.dirname(path)} is missing")
    current = read_text(path)
    changed = current != text
    diff = {"before_header": path, "after_header": path, "before": current or "", "after": text}
    if changed and not module.check_mode:
        write_atomic(module, path, text)
    file_args = module.load_file_common_arguments(module.params, path=path)
    if current is not None or not module.check_mode:
        changed = module.set_fs_attributes_if_different(file_args, changed, diff=None)
    module.exit_json(changed=changed, config=document, diff=diff if changed else {})


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
