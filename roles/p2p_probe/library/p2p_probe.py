#!/usr/bin/python
"""Ansible module: measure the node's GPU paths (lingbot_fleet.probe) and save the result."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: p2p_probe
short_description: Measure GPU host and peer-to-peer bandwidth, latency and data integrity
description:
  - Through the driver's libcuda.so.1 (ctypes, no CUDA toolkit) measures per GPU the pinned
    host-to-device and device-to-host bandwidth (the probing thread bound to the GPU's local
    CPUs, the link sampled under load through NVML or nvidia-smi), and per ordered GPU pair
    the unidirectional and bidirectional bandwidth and small-copy latency with peer access
    enabled and disabled (host-staged), plus a data check of a peer-to-peer write.
  - Returns the result document (docs/probe.md of lingbot-fleet) as C(probe) and as
    C(ansible_facts.lingbot_probe), and saves it as C(latest.json) plus a timestamped copy
    in I(save_dir) (written atomically; the newest I(keep) copies are kept).
  - C(changed) is always false. Measuring only reads the GPUs; the saved files are a cache
    of the measurement for the audit and the planner, not configuration a user manages,
    so rewriting them is not reported as a change.
  - A GPU or pair that cannot be measured (lost, busy, failing) is reported in its entry's
    C(error); the module fails only when its arguments are wrong or the result cannot be
    saved.
  - With I(read_only), nothing is measured: the last saved result is returned (null when
    there is none).
options:
  size_mib:
    description: Size of each bandwidth copy in MiB.
    type: int
    default: 64
  repetitions:
    description: Timed copies per bandwidth figure (the median is reported).
    type: int
    default: 5
  latency_repetitions:
    description: Timed 4-byte copies per latency figure (the median is reported).
    type: int
    default: 50
  time_budget_s:
    description: Seconds after which no further pair is measured (the skipped pairs are
      named in C(errors)).
    type: float
    default: 45.0
  pairs:
    description: C(all), or a list of ordered pairs of NVML GPU indices, each C([src, dst])
      or C("src-dst").
    type: raw
    default: all
  save_dir:
    description: Where latest.json and the timestamped copies are written.
    type: path
    default: /var/lib/lingbot-fleet/probe
  keep:
    description: Timestamped copies kept in I(save_dir) (the newest).
    type: int
    default: 10
  max_age_s:
    description:
      - Reuse the saved result instead of measuring while it is younger than this and was
        taken on the same GPUs (UUIDs). 0 always measures.
    type: float
    default: 0.0
  read_only:
    description: Return the last saved result without measuring.
    type: bool
    default: false
  facts:
    description: The gpu_facts document (C(ansible_facts.lingbot_gpu)); gathered by the
      module when absent.
    type: dict
  root:
    description: Directory read as C(/) when the module gathers the facts itself.
    type: path
    default: /
  cuda_library:
    description: The driver library to load.
    type: str
    default: libcuda.so.1
  use_nvml:
    description: Read the GPUs and sample the link through NVML when pynvml imports.
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
    details: Measures (read-only on the GPUs) but writes no file.
  diff_mode:
    support: none
  facts:
    support: full
author:
  - lingbot-fleet
"""

EXAMPLES = r"""
- name: Measure the GPU paths
  p2p_probe:
    facts: "{{ ansible_facts['lingbot_gpu'] }}"
    time_budget_s: 60

- name: Return the last saved result (audit)
  p2p_probe:
    read_only: true
"""

RETURN = r"""
probe:
  description: The probe document (schema_version 1, docs/probe.md); null in read_only mode
    when nothing was saved yet.
  returned: always
  type: dict
saved:
  description: latest (path), copy (path) and pruned (paths) of the files written; empty
    in check mode and read_only mode.
  returned: always
  type: dict
ansible_facts:
  description: The probe document under the key lingbot_probe.
  returned: always
  type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.facts import gather_facts
from ansible.module_utils.lingbot_fleet.probe import (
    LATEST_NAME,
    MIB,
    PROBE_FACT_NAME,
    ProbeParameters,
    load_saved_probe,
    parse_pairs,
    reuse_reason,
    run_probe,
    save_probe,
    start_link_sampler,
)


def read_only_result(module: AnsibleModule) -> None:
    save_dir = module.params["save_dir"]
    probe = load_saved_probe(save_dir)
    msg = (
        f"returned the saved result {save_dir}/{LATEST_NAME}"
        if probe is not None
        else f"no saved probe result at {save_dir}/{LATEST_NAME}; run the p2p_probe role "
        "without read_only to measure"
    )
    module.exit_json(changed=False, probe=probe, saved={}, msg=msg)


def parameters_from(module: AnsibleModule) -> ProbeParameters:
    params = module.params
    try:
        pairs = parse_pairs(params["pairs"])
    except ValueError as error:
        module.fail_json(msg=str(error))
    parameters = ProbeParameters(
        size_bytes=params["size_mib"] * MIB,
        repetitions=params["repetitions"],
        latency_repetitions=params["latency_repetitions"],
        time_budget_s=params["time_budget_s"],
        pairs=pairs,
    )
    # size_bytes is what the module computes from size_mib: name the option instead.
    problems = [p for p in parameters.problems() if not p.startswith("size_bytes ")]
    if params["size_mib"] < 1:
        problems.insert(0, f"size_mib must be at least 1, not {params['size_mib']}")
    if params["keep"] < 1:
        problems.append(f"keep must be at least 1, not {params['keep']}")
    if problems:
        module.fail_json(msg="; ".join(problems))
    return parameters


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "size_mib": {"type": "int", "default": 64},
            "repetitions": {"type": "int", "default": 5},
            "latency_repetitions": {"type": "int", "default": 50},
            "time_budget_s": {"type": "float", "default": 45.0},
            "pairs": {"type": "raw", "default": "all"},
            "save_dir": {"type": "path", "default": "/var/lib/lingbot-fleet/probe"},
            "keep": {"type": "int", "default": 10},
            "read_only": {"type": "bool", "default": False},
            "max_age_s": {"type": "float", "default": 0.0},
            "facts": {"type": "dict"},
            "root": {"type": "path", "default": "/"},
            "cuda_library": {"type": "str", "default": "libcuda.so.1"},
            "use_nvml": {"type": "bool", "default": True},
            "nvml_python_path": {"type": "list", "elements": "str", "default": []},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["read_only"]:
        read_only_result(module)
    parameters = parameters_from(module)
    python_path = params["nvml_python_path"]
    smi = module.get_bin_path(params["nvidia_smi"]) or params["nvidia_smi"]
    facts = params["facts"] or gather_facts(
        params["root"],
        nvml="auto" if params["use_nvml"] else "off",
        nvml_python_path=python_path,
        smi_command=[smi],
    )
    saved_probe = load_saved_probe(params["save_dir"])
    reused = reuse_reason(saved_probe, facts, params["max_age_s"], time.time())
    if reused:
        module.exit_json(
            changed=False,
            probe=saved_probe,
            saved={},
            msg=reused,
            ansible_facts={PROBE_FACT_NAME: saved_probe},
        )
    sampler, stop_sampler, note = start_link_sampler(params["use_nvml"], python_path, [smi])
    try:
        probe = run_probe(facts, parameters, cuda_library=params["cuda_library"], sampler=sampler)
    finally:
        stop_sampler()
    if note:
        probe["notes"].append(note)
    if module.check_mode:
        msg = f"measured; check mode: nothing written to {params['save_dir']}"
        saved: dict = {}
    else:
        try:
            saved = save_probe(probe, params["save_dir"], params["keep"])
        except OSError as error:
            module.fail_json(
                msg=f"could not save the probe result in {params['save_dir']}: {error}",
                probe=probe,
            )
        msg = f"measured; saved {saved['latest']} and {saved['copy']}"
    module.exit_json(
        changed=False, probe=probe, saved=saved, msg=msg, ansible_facts={PROBE_FACT_NAME: probe}
    )


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
