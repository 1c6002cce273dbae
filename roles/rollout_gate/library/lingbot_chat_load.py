#!/usr/bin/python
"""Ansible module lingbot_chat_load: a bounded synthetic chat load on the node's LingBot."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lingbot_chat_load
short_description: Measure the node's LingBot instances under a bounded synthetic chat load
description:
  - Sends each LingBot instance, one instance after another, O(requests) chat requests
    with a fixed reference prompt of O(prompt_words) words asking for O(max_tokens) tokens,
    and O(first_token_requests) more asking for one token (LingBot answers non-streamed,
    so their time is the time to the first token), from O(concurrency) threads, to
    C(POST /v1/chat/completions) on O(host).
  - Each time is wall time from connecting to the last byte of the answer; percentiles are
    nearest-rank. After O(max_duration_s) an instance gets no new request; what was left is
    C(not_sent), not an error.
  - Without O(instances), the instances are those of the plan in force
    (C(/etc/lingbot/plan.json)); a node without that file (no LingBot before its first
    rollout) measures nothing and C(plan_found) is false.
  - The rollout gate (role rollout_gate) measures before and after a node's change and
    compares the two (gate C(service_load), C(lingbot_fleet.rollout.gates)).
  - Changes nothing on the node. In check mode it sends no request
    (C(skipped_in_check_mode)), like the roles' health checks.
options:
  instances:
    description:
      - The instances to load, each with its C(name) and C(port); omitted, those of the
        plan in force.
    type: list
    elements: dict
    suboptions:
      name:
        description: The instance's name (the result is keyed by it).
        type: str
        required: true
      port:
        description: The port the instance listens on.
        type: int
        required: true
  host:
    description: The address the load is sent to (the node's own loopback).
    type: str
    default: 127.0.0.1
  api_key:
    description:
      - Sent as the bearer token of the C(Authorization) header when not empty (the
        instances' C(LINGBOT_API_KEY)); one string of visible ASCII characters (a mapping
        or a list is refused). Sent only when O(host) is an address of this node
        (loopback, or one the node can bind); otherwise the module fails before sending.
    type: raw
    default: ""
  requests:
    description: Chat requests with the reference prompt per instance (1 to 10000).
    type: int
    default: 20
  first_token_requests:
    description: Requests with C(max_tokens) 1 per instance (0 to 10000; 0 measures none).
    type: int
    default: 10
  concurrency:
    description: Requests in flight at once, per instance (1 to 64).
    type: int
    default: 2
  prompt_words:
    description: Whitespace-separated words of the reference prompt (1 to 32768).
    type: int
    default: 128
  max_tokens:
    description: C(max_tokens) of the reference requests (1 to 4096).
    type: int
    default: 16
  request_timeout_s:
    description: Seconds one request may take before it counts as no answer (0.1 to 600).
    type: float
    default: 30.0
  max_duration_s:
    description: Seconds after which an instance gets no new request (0.1 to 3600).
    type: float
    default: 120.0
  root:
    description: Directory read as C(/) for the plan (tests point it at a temporary tree).
    type: path
    default: /
attributes:
  check_mode:
    description: Supported; sends no request in check mode and returns an empty load.
    support: full
  diff_mode:
    description: Changes nothing, so there is no diff.
    support: none
author:
  - lingbot-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Measure LingBot under a short chat load before the change
  lingbot_chat_load:
    requests: 20
    first_token_requests: 10
    concurrency: 2
  register: load_before
"""

RETURN = r"""
load:
  description:
    - C(instances) (instance name -> result) and C(node) (the same figures pooled over
      every sample of every instance).
    - A result has requests_sent, ok (2xx), server_errors (5xx, or any status other than
      2xx and 4xx), no_answer (refused, reset or timed out), client_errors (4xx),
      error_rate_percent ((server_errors + no_answer + client_errors) / requests_sent *
      100; null when nothing was sent), latency_ms and first_token_ms ({p50, p95, max,
      count}; figures null without a successful request), first_errors (at most 3 short
      lines), not_sent and duration_s.
  returned: always
  type: dict
plan_found:
  description: Whether the plan in force was found; null when O(instances) was given.
  returned: always
  type: bool
skipped_in_check_mode:
  description: True in check mode, where no request is sent and the load is empty.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.lingbot.chat_load import (
    ChatLoadError,
    LoadSettings,
    check_instances,
    empty_load,
    instances_from_plan,
    measure_instances,
)
from ansible.module_utils.lingbot_fleet.lingbot.layout import PLAN_PATH, on_root
from ansible.module_utils.lingbot_fleet.lingbot.warmup import key_may_go_to
from ansible.module_utils.lingbot_fleet.node import values

SETTING_OPTIONS = (
    "requests",
    "first_token_requests",
    "concurrency",
    "prompt_words",
    "max_tokens",
    "request_timeout_s",
    "max_duration_s",
)
ARGUMENT_SPEC = {
    "instances": {
        "type": "list",
        "elements": "dict",
        "options": {
            "name": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
        },
    },
    "host": {"type": "str", "default": "127.0.0.1"},
    # raw: a mapping or a list is refused by values.api_key, not turned into its text.
    "api_key": {"type": "raw", "default": "", "no_log": True},
    "requests": {"type": "int", "default": 20},
    # Not secrets: "token" in these names counts LLM tokens (validate-modules asks).
    "first_token_requests": {"type": "int", "default": 10, "no_log": False},
    "concurrency": {"type": "int", "default": 2},
    "prompt_words": {"type": "int", "default": 128},
    "max_tokens": {"type": "int", "default": 16, "no_log": False},
    "request_timeout_s": {"type": "float", "default": 30.0},
    "max_duration_s": {"type": "float", "default": 120.0},
    "root": {"type": "path", "default": "/"},
}


def planned_instances(root: str) -> list[dict] | None:
    """The plan in force's instances ([{name, port}]); None when there is no plan file."""
    path = on_root(root, PLAN_PATH)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise ChatLoadError(f"{PLAN_PATH} cannot be read ({error})") from None
    return instances_from_plan(text, PLAN_PATH)


def summary_line(load: dict) -> str:
    node = load["node"]
    if not load["instances"]:
        return "no LingBot instance to measure"
    latency = node["latency_ms"]["p95"]
    first_token = node["first_token_ms"]["p95"]
    return (
        f"measured {', '.join(sorted(load['instances']))}: {node['requests_sent']} requests, "
        f"error rate {node['error_rate_percent']}%, P95 latency {latency} ms, "
        f"P95 first token {first_token} ms"
    )


def run_module() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    settings = LoadSettings(**{name: params[name] for name in SETTING_OPTIONS})
    problems = settings.problems()
    try:
        params["api_key"] = values.api_key(params["api_key"], "lingbot_service_api_key")
        values.listen_host(params["host"], "lingbot_service_health_host")
    except ValueError as error:
        problems.append(str(error))
    if not problems and params["api_key"] and not key_may_go_to(params["host"]):
        problems.append(
            f"lingbot_service_health_host {params['host']!r} is not an address of this node: "
            "the load would send lingbot_service_api_key over plain HTTP off the node. Use "
            "127.0.0.1, or the address LingBot listens on"
        )
    if problems:
        module.fail_json(msg="invalid chat load settings: " + "; ".join(problems))
    plan_found = None
    try:
        if params["instances"] is None:
            instances = planned_instances(params["root"])
            plan_found = instances is not None
            instances = instances or []
        else:
            instances = check_instances(params["instances"], "option instances")
    except ChatLoadError as error:
        module.fail_json(msg=str(error), plan_found=plan_found)
    if module.check_mode:
        module.exit_json(
            changed=False,
            load=empty_load(),
            plan_found=plan_found,
            skipped_in_check_mode=True,
            msg="check mode: no chat load sent",
        )
    load = measure_instances(instances, params["host"], settings, params["api_key"])
    module.exit_json(
        changed=False,
        load=load,
        plan_found=plan_found,
        skipped_in_check_mode=False,
        msg=summary_line(load),
    )


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
