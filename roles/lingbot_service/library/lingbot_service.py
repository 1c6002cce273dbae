#!/usr/bin/python
"""Ansible module lingbot_service: the plan's LingBot instances, from files to readiness."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lingbot_service
short_description: Plan LingBot on the node and run its instances as numactl-bound lingbot@ services
description:
  - With O(plan_inputs) (what the C(lingbot_service) action gathers on the controller -
    the GPU facts, the probe, the link findings and the typed policy), plans on the node -
    reads the plan in force (C(/etc/lingbot/plan.json)), so the planner keeps its decisions
    while the measurements stay near them, and the model's decoder layer count
    (C(num_hidden_layers) of O(model_path)/C(config.json), or of its C(text_config); the
    policy's C(model_num_layers) when it has none, which must agree when it has one), builds
    the plan with C(lingbot_fleet.plan.build_plan) (the audit's planner) and sets it as the
    fact C(lingbot_plan). The plan's findings (such as C(PLAN_GPUS_IDLE)) become warnings.
    It fails before any change when the policy cannot be planned with, when the plan has
    instances but the layer count is unknown, and when the plan has no instance and
    O(fail_without_instances) is true; with no instance and O(fail_without_instances)
    false it changes nothing.
  - Then, in the same call, for the instances of the plan (O(plan) or the one made
    here) - ensures the service group and user exist (C(groupadd), C(useradd),
    C(usermod) only for what is missing); checks that O(model_path) holds C(config.json); writes
    C(/etc/lingbot/plan.json), each instance's directory, C(config.yaml) (O(config_overrides)
    merged on top and validated against LingBot's schema), C(secrets.env) and the marker
    that says the toolkit made the directory, C(lingbot@.service) and one drop-in per
    instance; stops, disables and removes the instances the plan no longer has; runs
    C(systemctl daemon-reload) when a unit changed; restarts exactly the instances whose
    files changed; enables and starts every planned instance; then waits until each one is
    ready.
  - The layout (paths, unit names, ExecStart) is the one of
    C(lingbot_fleet.lingbot.layout).
  - Nothing is written when an override, the model directory, an instance name or the
    units are wrong; the units are checked with C(systemd-analyze verify) in a temporary
    directory before they land, in check mode too.
  - Whatever O(verify_units) says, every value that lands in a unit is checked for its
    kind first (C(lingbot_fleet.node.values) - user and group names, the model path, words
    without a control character, ports from 1 to 65535, the plan's GPU UUIDs), so no value
    can start a new line or directive; and a listener beyond loopback without O(api_key),
    or an O(api_key) the readiness check would send to another host, fails the module
    before any change.
  - plan.json is left as it is when it differs only in the probe's timestamp.
  - Only directories under C(/etc/lingbot) that hold the toolkit's marker (or a
    C(config.yaml) with the toolkit's header) are taken for stale instances; a stale
    directory holding a file the toolkit did not write fails the run before anything
    changes.
  - With O(warm_up), each instance's drop-in also runs the warm-up around the start, so
    the unit is active only once LingBot has answered; the warm-up program is written with
    the other files.
  - Ready means - the unit is active, the process listening on the instance's port belongs
    to the unit, C(GET /metrics) answers 200 with C(lingbot_balancer_weight), and a
    one-token C(POST /v1/chat/completions) succeeds. The module polls for up to
    O(health_timeout_s) seconds, then fails with the instance's last journal lines.
  - Every write goes through C(NodeChanges) (saved first into the run's generation when
    O(generation_run_id) is set). In check mode nothing is written, started or restarted;
    the result says what would be.
  - With O(plan_inputs) and O(receipt_digest), a call that changes nothing and ends with
    every instance ready leaves a receipt (C(/var/lib/lingbot-fleet/receipts/
    lingbot_service.json), see docs/converged-runs.md) - its own result, and what its
    NodeChanges read, wrote, listed and ran systemctl on (the files it manages, the model's
    config.json, numactl, the account files, the directories where instances show, each
    instance's unit properties, its main PID and invocation id as it answered), every
    instance's address (gpu_facts sends it C(GET /metrics) on every later run), plan.json
    and the model's layer count. A later run whose action finds all of them as they were,
    every instance still answering, and plans the plan in force from its inputs, answers
    with that result without a call. Any other call outside check mode (and a readiness
    check that fails) removes the receipt first.
extends_documentation_fragment:
  - lingbot_generation
  - lingbot_receipt
options:
  plan:
    description:
      - A plan document made elsewhere (C(lingbot_fleet.plan.build_plan)); written to
        C(/etc/lingbot/plan.json). Each of its C(instances) needs C(name), C(port),
        C(numa_node), C(gpus), C(gpus_argument), C(environment),
        C(peer_access_threshold_gbytes_per_s) and C(config).
      - Mutually exclusive with O(plan_inputs); one of them is required (the action plugin
        fills O(plan_inputs) when the task gives neither).
    type: dict
  plan_inputs:
    description:
      - The planner's inputs from the controller; the module adds the plan in force and the
        model's layer count from the node and plans with them.
    type: dict
    suboptions:
      facts:
        description: The GPU facts (C(ansible_facts.lingbot_gpu), role gpu_facts).
        type: dict
        required: true
      probe:
        description:
          - The probe result (C(ansible_facts.lingbot_probe), role p2p_probe); without it
            the plan is provisional.
        type: dict
      policy:
        description:
          - The planner's policy, the C(lingbot_service_*) keys of docs/plan.md without the
            prefix, typed as the role's argument spec declares.
        type: dict
        default: {}
      findings:
        description: The link findings of gpu_checks (C(ansible_facts.lingbot_link_findings)).
        type: list
        elements: dict
        default: []
  fail_without_instances:
    description:
      - With O(plan_inputs), fail when the plan has no instance (naming why); false leaves
        this node's LingBot as it is.
    type: bool
    default: true
  readiness_only:
    description:
      - Only check that the plan's instances are ready (O(plan) needs just C(instances)
        with C(name) and C(port)); writes and starts nothing, also outside check mode.
    type: bool
    default: false
  python:
    description: The Python that runs LingBot.
    type: path
    default: /usr/bin/python3
  entry:
    description: The words after the Python that start LingBot.
    type: list
    elements: str
    default: ["-m", "lingbot"]
  pythonpath:
    description: PYTHONPATH of the service; empty leaves it unset.
    type: str
    default: ""
  model_path:
    description: LingBot's C(--model-path); must hold C(config.json).
    type: path
    default: /var/lib/lingbot/model
  numactl:
    description: The numactl binary ExecStart runs.
    type: path
    default: /usr/bin/numactl
  listen_host:
    description:
      - LingBot's C(--host), the address every instance listens on (an IP address or a
        host name). Loopback by default; any other address needs O(api_key), or the module
        fails before any change.
    type: str
    default: 127.0.0.1
  extra_args:
    description: Extra LingBot options for every instance, one word per item.
    type: list
    elements: str
    default: []
  user:
    description: The system user the instances run as.
    type: str
    default: lingbot
  group:
    description: The service user's primary group; also the group of the config files.
    type: str
    default: lingbot
  device_groups:
    description: Existing groups that give the user the GPU device nodes.
    type: list
    elements: str
    default: [video]
  api_key:
    description:
      - LINGBOT_API_KEY for C(secrets.env) (0600); empty removes the file. One word of
        visible ASCII characters; a mapping, a list or a number is refused (not turned
        into its text).
      - Sent by the readiness check and the warm-up only to a loopback O(health_host) or
        to the O(listen_host) address itself, never elsewhere over plain HTTP.
    type: raw
    default: ""
  config_overrides:
    description: config.yaml keys merged on top of every instance's planned config.
    type: dict
    default: {}
  hardening:
    description: systemd sandboxing in C(lingbot@.service).
    type: bool
    default: true
  restart_delay_s:
    description: C(RestartSec=) of the instances.
    type: int
    default: 5
  start_limit_burst:
    description: C(StartLimitBurst=).
    type: int
    default: 5
  start_limit_interval_s:
    description: C(StartLimitIntervalSec=).
    type: int
    default: 300
  verify_units:
    description: Check the units with C(systemd-analyze verify) before writing them.
    type: bool
    default: true
  remove_stale_instances:
    description: Stop, disable and remove the toolkit's instances the plan no longer has.
    type: bool
    default: true
  health_timeout_s:
    description:
      - How long to wait for every instance to be ready; also the limit of the warm-up's
        wait for LingBot (O(warm_up)).
    type: int
    default: 60
  warm_up:
    description:
      - Warm each instance around its start (C(lingbot_fleet.lingbot.warmup), installed at
        C(/usr/local/libexec/lingbot-fleet/lingbot-warm-up)) - C(ExecStartPre) makes a
        context on every GPU and maps and checks every peer pair the plan uses, through
        C(libcuda.so.1), under the instance's numactl binding; C(ExecStartPost) waits for
        C(/metrics) and sends one-token chat completions until their time is steady, so
        LingBot pays its first-use costs before the unit is active. False leaves both
        out (the program is still installed).
    type: bool
    default: true
  health_host:
    description:
      - The address the readiness check (and the warm-up) connects to, on the node. With
        O(api_key), a loopback address or O(listen_host) itself.
    type: str
    default: 127.0.0.1
  journal_lines:
    description: Journal lines shown when an instance is not ready.
    type: int
    default: 30
  header:
    description: Comment lines at the top of the unit files and C(secrets.env).
    type: str
    default: Managed by lingbot-fleet (role lingbot_service); changes made here are overwritten.
  root:
    description: Directory taken as C(/) for every file (tests); systemctl acts on the host.
    type: path
    default: /
attributes:
  check_mode:
    description: Can run in check mode and predicts the change without making it.
    support: full
  diff_mode:
    description: Returns the before and after of what it changes (or would change) with --diff.
    support: full
author:
  - lingbot-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Plan LingBot, run its instances and check that each one is ready
  lingbot_service:
    python: /opt/lingbot/venv/bin/python
    model_path: /srv/models/lingbot-7b
    config_overrides: {kv_cache_sync_interval_ms: 20}
    generation_run_id: "{{ generations_run_id | default(omit) }}"

- name: Check that one instance is ready
  lingbot_service:
    plan: {instances: [{name: main, port: 8000}]}
    readiness_only: true
"""

RETURN = r"""
plan:
  description:
    - The plan document made on the node (with O(plan_inputs)); also set as the fact
      C(lingbot_plan). Returned on failure too when the plan was made.
  returned: when O(plan_inputs) is set
  type: dict
model_layers_source:
  description: Where the plan's C(model_num_layers) comes from (the file, or the policy).
  returned: success, when O(plan_inputs) is set
  type: str
instances:
  description: The planned instances, in plan order.
  returned: always
  type: list
  elements: str
files:
  description: Files and directories written or removed (or that would be), in order.
  returned: success
  type: list
  elements: str
restarted:
  description: Running instances restarted (or that would be) because their files changed.
  returned: success
  type: list
  elements: str
started:
  description: Instances started (or that would be) because they were not running.
  returned: success
  type: list
  elements: str
enabled:
  description: Instances enabled (or that would be).
  returned: success
  type: list
  elements: str
removed_instances:
  description: Stale instances stopped, disabled and removed (or that would be).
  returned: success
  type: list
  elements: str
daemon_reload:
  description: Whether systemd was (or would be) reloaded.
  returned: success
  type: bool
readiness:
  description:
    - Instance -> C({ready, port, main_pid, waited_s}); empty in check mode (instances
      that would change are not started yet). Answered from the receipt -
      C({ready, port, main_pid, since}).
  returned: success
  type: dict
receipt:
  description:
    - C(written), C(unchanged), C(not written) with the reason, or C(stands) when the
      action answered from the receipt without a call.
  returned: when a receipt was kept or answered from
  type: str
actions:
  description: One sentence per change made (or that would be).
  returned: always
  type: list
  elements: str
problems:
  description: Every schema problem of a config.yaml, each with its key path.
  returned: failure
  type: list
  elements: str
journal:
  description: The last journal lines of the instance that is not ready.
  returned: failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.lingbot import layout
from ansible.module_utils.lingbot_fleet.lingbot.service import (
    ARGUMENT_SPEC,
    INSTANCE_KEYS,
    NO_CHANGES,
    ServiceError,
    check_values,
    converge,
    drop_receipt,
    keep_receipt,
    plan_fields,
    plan_here,
    planned_instances,
    wait_ready,
    with_plan_fact,
)
from ansible.module_utils.lingbot_fleet.node.nodefiles import NodeChanges, NodeFileError


def run_module() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=[("plan", "plan_inputs")],
        required_one_of=[("plan", "plan_inputs")],
        supports_check_mode=True,
    )
    params = module.params
    planned = None
    try:
        check_values(params)
    except ServiceError as error:
        module.fail_json(msg=str(error), instances=[], changed=False)
    if not params["readiness_only"]:
        drop_receipt(module)
    changes = NodeChanges.for_module(params, module.check_mode, params["root"])
    if params["plan_inputs"] is not None:
        planned = plan_here(module, changes)
        params["plan"] = planned.plan
        if not params["plan"]["instances"]:
            # No instance and lingbot_service_fail_without_instances=false: left as it is.
            done = {"changed": False, "instances": [], "actions": [], **NO_CHANGES}
            module.exit_json(**with_plan_fact(done, planned))
    made = plan_fields(planned)
    names: list[str] = []
    try:
        keys = ("name", "port") if params["readiness_only"] else INSTANCE_KEYS
        instances = planned_instances(params["plan"], keys)
        names = [instance["name"] for instance in instances]
        if params["readiness_only"]:
            systemctl = module.get_bin_path("systemctl", required=True)
            result = {"readiness": wait_ready(module, systemctl, instances)}
        else:
            result = converge(module, changes, instances)
    except ServiceError as error:
        drop_receipt(module)
        module.fail_json(
            msg=str(error), instances=names, **error.details, **changes.result(), **made
        )
    except (NodeFileError, layout.LayoutError) as error:
        module.fail_json(msg=str(error), instances=names, **changes.result(), **made)
    result = with_plan_fact({"instances": names, **result, **changes.result()}, planned)
    if planned is not None and params["receipt_digest"] and not module.check_mode:
        result["receipt"] = keep_receipt(module, changes, result, planned.config_layers)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
