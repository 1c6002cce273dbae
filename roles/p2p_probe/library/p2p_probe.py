#!/usr/bin/python
"""Ansible module: measure the node's GPU paths (lingbot_fleet.gpu.probe) and save the result."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: p2p_probe
short_description: Measure GPU host and peer-to-peer bandwidth, latency and data integrity
description:
  - Through the driver's libcuda.so.1 (ctypes, no CUDA toolkit) measures per GPU the link
    under sustained host-to-device copies (generation, width and performance state before
    and after, through NVML or nvidia-smi) and the pinned host-to-device and device-to-host
    bandwidth (the probing thread bound to the GPU's local CPUs), and per ordered GPU pair
    the unidirectional and bidirectional bandwidth and small-copy latency with peer access
    enabled and disabled (host-staged), plus a data check of a peer-to-peer write.
  - Figures follow nvbandwidth's method (large buffers, warm-up copies, the median of
    several timed samples); docs/probe.md of lingbot-fleet gives the defaults.
  - Returns the result document (docs/probe.md) as C(probe) and as
    C(ansible_facts.lingbot_probe), and saves it as C(latest.json) plus a timestamped copy
    in I(save_dir) (written atomically; the newest I(keep) copies are kept), unless
    I(save) is false.
  - C(changed) is always false. Measuring only reads the GPUs; the saved files are a cache
    of the measurement for the audit and the planner, not configuration a user manages,
    so rewriting them is not reported as a change.
  - A GPU or pair that cannot be measured (lost, busy, failing) is reported in its entry's
    C(error); the module fails only when its arguments are wrong or the result cannot be
    saved.
  - With I(read_only), nothing is measured; the last saved result is returned (null when
    there is none).
  - In check mode the GPUs that serve LingBot (those of the plan at I(plan_path)) are left
    out, with a C(skipped) reason, unless I(probe_serving_gpus) is true; their entries (and
    their pairs') are then taken from the saved result when it was taken on the same GPUs
    (marked C(from_probe)).
options:
  size_mib:
    description: Size of each bandwidth copy (the buffers) in MiB.
    type: int
    default: 256
  repetitions:
    description: Timed samples per bandwidth figure (the median is reported).
    type: int
    default: 3
  copies_per_sample:
    description: Copies between the two events of one timed sample.
    type: int
    default: 1
  warmup_copies:
    description: Untimed copies before a figure's samples.
    type: int
    default: 1
  link_load_s:
    description: Seconds of sustained host-to-device copies before each GPU's link is read
      (0 skips the reading).
    type: float
    default: 0.5
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
    description: Where latest.json and the timestamped copies are written
      (C(lingbot_fleet.node.state_dirs.PROBE_DIR)).
    type: path
    default: /var/lib/lingbot-fleet/probe
  keep:
    description: Timestamped copies kept in I(save_dir) (the newest).
    type: int
    default: 10
  save:
    description: Save the result in I(save_dir). False measures and returns the result
      only (a look that must not replace what the planner reads).
    type: bool
    default: true
  parameters_from:
    description:
      - A saved probe document (e.g. C(latest.json)) whose figure parameters (size,
        samples, copies per sample, warm-up, latency) this probe uses instead of the
        options, so the two compare like with like. When the file is missing or has no
        parameters, the options apply.
    type: path
  probe_serving_gpus:
    description: In check mode, also run copies on the GPUs that serve LingBot.
    type: bool
    default: false
  plan_path:
    description: The plan in force; its instances' GPUs are the ones that serve LingBot.
    type: path
    default: /etc/lingbot/plan.json
  max_age_s:
    description:
      - Reuse the saved result instead of measuring while it is younger than this and was
        taken on the same GPUs (UUIDs) with the same figure parameters. 0 always measures.
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
    description: Can run in check mode and predicts the change without making it.
    support: full
    details: Measures (read-only on the GPUs, leaving out the GPUs that serve LingBot unless
      I(probe_serving_gpus)) but writes no file.
  diff_mode:
    description: Returns the before and after of what it changes (or would change) with --diff.
    support: none
  facts:
    description: Returns C(ansible_facts) that update the host's facts.
    support: full
author:
  - lingbot-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Measure the GPU paths
  p2p_probe:
    facts: "{{ ansible_facts['lingbot_gpu'] }}"
    time_budget_s: 60

- name: Return the last saved result (audit)
  p2p_probe:
    read_only: true

- name: Measure again with the saved probe's sizes, saving nothing
  p2p_probe:
    parameters_from: /var/lib/lingbot-fleet/probe/latest.json
    save: false
"""

RETURN = r"""
probe:
  description: The probe document (schema_version 1, docs/probe.md); null in read_only mode
    when nothing was saved yet.
  returned: always
  type: dict
saved:
  description: latest (path), copy (path) and pruned (paths) of the files written; empty
    in check mode, read_only mode and with save false.
  returned: always
  type: dict
ansible_facts:
  description: The probe document under the key lingbot_probe.
  returned: always
  type: dict
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.facts import gather_facts
from ansible.module_utils.lingbot_fleet.gpu.probe import (
    PROBE_ARGUMENT_SPEC,
    PROBE_FACT_NAME,
    ProbeParameters,
    figures_of,
    fill_skipped,
    options_parameters,
    read_plan,
    reuse_reason,
    reused_result,
    run_probe,
    save_probe,
    serving_gpus,
    start_link_sampler,
)
from ansible.module_utils.lingbot_fleet.gpu.probe_saved import LATEST_NAME, read_saved_probe


def read_only_result(module: AnsibleModule) -> None:
    save_dir = module.params["save_dir"]
    probe, unusable = read_saved_probe(save_dir)
    msg = (
        f"returned the saved result {save_dir}/{LATEST_NAME}"
        if probe is not None
        else f"no saved probe result at {save_dir}/{LATEST_NAME}; run the p2p_probe role "
        "without read_only to measure" + (f" ({unusable})" if unusable else "")
    )
    module.exit_json(changed=False, probe=probe, saved={}, msg=msg)


def figures_like(path: str | None) -> tuple[dict, str | None]:
    """The figure parameters of the saved probe at `path` ({} when there is none usable)."""
    if not path:
        return {}, None
    try:
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)
    except (OSError, ValueError) as error:
        return {}, f"parameters_from {path} not used ({error}); the options apply"
    return figures_of(saved, path)


def parameters_from(module: AnsibleModule) -> tuple[ProbeParameters, str | None]:
    figures, note = figures_like(module.params["parameters_from"])
    parameters, problems = options_parameters(module.params, figures)
    if parameters is None:
        module.fail_json(msg="; ".join(problems))
    return parameters, note


def run_module() -> None:
    module = AnsibleModule(argument_spec=PROBE_ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    if params["read_only"]:
        read_only_result(module)
    parameters, parameters_note = parameters_from(module)
    python_path = params["nvml_python_path"]
    smi = module.get_bin_path(params["nvidia_smi"]) or params["nvidia_smi"]
    facts = params["facts"] or gather_facts(
        params["root"],
        use_nvml=params["use_nvml"],
        nvml_python_path=python_path,
        smi_command=[smi],
    )
    saved_probe, unusable_note = read_saved_probe(params["save_dir"])
    reused = reuse_reason(saved_probe, facts, params["max_age_s"], time.time(), parameters)
    if reused:
        module.exit_json(**reused_result(saved_probe, reused))
    skip = {}
    if module.check_mode and not params["probe_serving_gpus"]:
        plan_path = params["plan_path"]
        skip = {
            key: f"{why}; check mode runs no copies on it (probe_serving_gpus measures it)"
            for key, why in serving_gpus(read_plan(plan_path), plan_path).items()
        }
    sampler, stop_sampler, note = start_link_sampler(params["use_nvml"], python_path, [smi])
    try:
        probe = run_probe(
            facts, parameters, cuda_library=params["cuda_library"], sampler=sampler, skip=skip
        )
    finally:
        stop_sampler()
    probe["notes"] += [text for text in (parameters_note, note, unusable_note) if text]
    if skip:
        # What the planner reads in check mode: the left-out GPUs' last saved figures.
        filled = fill_skipped(probe, saved_probe)
        if filled is not probe:
            filled["notes"] = [
                *probe["notes"],
                f"entries left out are taken from the saved probe of {saved_probe['timestamp']}"
                " (from_probe)",
            ]
            probe = filled
    if module.check_mode or not params["save"]:
        why = "check mode" if module.check_mode else "save is false"
        msg = f"measured; {why}: nothing written to {params['save_dir']}"
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
