#!/usr/bin/python
"""Ansible module: sample every GPU's PCIe link during a short host-to-device copy."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_link_load
short_description: Sample each GPU's PCIe link generation, width and performance state under load
description:
  - For each GPU, runs host-to-device copies from pinned memory through the driver's
    libcuda.so.1 (ctypes, no CUDA toolkit) for I(duration_s), while sampling the current
    link generation, width and performance state through NVML (nvidia-smi when pynvml
    does not import).
  - Changes nothing on the node; the GPUs are busy for about I(duration_s) each.
  - When no load can be made (no libcuda, no device), C(possible) is false with the reason.
options:
  duration_s:
    description: Seconds of copies per GPU.
    type: float
    default: 1.0
  size_mib:
    description: Size of each copy in MiB.
    type: int
    default: 64
  interval_s:
    description: Seconds between two samples.
    type: float
    default: 0.05
  cuda_library:
    description: The driver library to load.
    type: str
    default: libcuda.so.1
  use_nvml:
    description: Sample through NVML when pynvml imports; false samples with nvidia-smi.
    type: bool
    default: true
  nvml_python_path:
    description: Directories (patterns allowed) searched for pynvml.
    type: list
    elements: str
    default: []
  nvidia_smi:
    description: The nvidia-smi command used when NVML is not available.
    type: str
    default: nvidia-smi
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - lingbot-fleet
"""

EXAMPLES = r"""
- name: Sample the links under load
  gpu_link_load:
    duration_s: 1.0
  register: link_load
"""

RETURN = r"""
load:
  description: possible, reason (when not), sampler (nvml or nvidia-smi), notes, and per GPU
    ordinal, bus_id, possible, copies, copied_bytes, elapsed_ms, h2d_gbytes_per_s and
    samples ({t_s, gen, width, pstate}).
  returned: always
  type: dict
"""


from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.facts.load import link_under_load


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "duration_s": {"type": "float", "default": 1.0},
            "size_mib": {"type": "int", "default": 64},
            "interval_s": {"type": "float", "default": 0.05},
            "cuda_library": {"type": "str", "default": "libcuda.so.1"},
            "use_nvml": {"type": "bool", "default": True},
            "nvml_python_path": {"type": "list", "elements": "str", "default": []},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["duration_s"] <= 0 or params["size_mib"] <= 0 or params["interval_s"] <= 0:
        module.fail_json(msg="duration_s, size_mib and interval_s must be greater than 0")
    paths = params["nvml_python_path"]
    smi = module.get_bin_path(params["nvidia_smi"]) or params["nvidia_smi"]
    load = link_under_load(
        cuda_library=params["cuda_library"],
        duration_s=params["duration_s"],
        size_bytes=params["size_mib"] << 20,
        interval_s=params["interval_s"],
        nvml_python_path=paths,
        smi_command=[smi],
        use_nvml=params["use_nvml"],
    )
    module.exit_json(changed=False, load=load)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
