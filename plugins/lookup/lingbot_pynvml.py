"""Lookup plugin: the controller's pynvml.py (nvidia-ml-py), its path and its checksum."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: lingbot_pynvml
short_description: The path and SHA-1 of the controller's pynvml.py
description:
  - Finds the C(pynvml) module (package C(nvidia-ml-py), one pure-Python file) of the
    Python that runs Ansible on the controller, without importing it.
  - Returns, for each term, the file's path (C(path)) or its SHA-1 checksum (C(sha1)), the
    checksum M(ansible.builtin.copy) compares. Without terms it returns the path.
  - Fails, naming the fix, when C(nvidia-ml-py) is not installed next to Ansible.
options:
  _terms:
    description: What to return, in order; each C(path) or C(sha1).
    type: list
    elements: str
    required: false
author:
  - lingbot-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Copy the controller's pynvml.py to the node
  ansible.builtin.copy:
    src: "{{ lookup('lingbot_pynvml', 'path') }}"
    dest: /opt/lingbot-fleet/venv/lib/python3/site-packages/
    mode: "0644"
"""

RETURN = r"""
_raw:
  description: One value per term, the path or the SHA-1 (hex) of pynvml.py.
  type: list
  elements: str
"""

import importlib.util

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible.utils.hashing import checksum

FIELDS = ("path", "sha1")


def controller_pynvml() -> str:
    """The pynvml.py the controller's Python would import."""
    spec = importlib.util.find_spec("pynvml")
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise AnsibleLookupError(
            "pynvml is not installed on the controller; install nvidia-ml-py into the Python "
            "that runs Ansible (pip install 'nvidia-ml-py>=12.535,<14'), or set "
            "gpu_facts_install_nvml_from: pypi"
        )
    return spec.origin


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        fields = terms or ["path"]
        unknown = [field for field in fields if field not in FIELDS]
        if unknown:
            raise AnsibleLookupError(
                f"lingbot_pynvml knows {', '.join(FIELDS)}, not {', '.join(map(str, unknown))}"
            )
        path = controller_pynvml()
        return [path if field == "path" else checksum(path) for field in fields]
