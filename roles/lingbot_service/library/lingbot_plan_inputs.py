#!/usr/bin/python
"""Ansible module lingbot_plan_inputs: what the planner needs from the node itself."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lingbot_plan_inputs
short_description: Read the plan in force and the model's layer count for the LingBot planner
description:
  - Reads, and never writes, what the C(lingbot_plan) action needs from the node - the
    plan in force (C(/etc/lingbot/plan.json)), so the planner keeps its decisions while the
    measurements stay near them (docs/plan.md, hysteresis), and the decoder layer count of
    the model (C(num_hidden_layers) of O(model_path)/C(config.json), or of its
    C(text_config)), so the planner spreads the layers over every GPU of an instance.
  - A model directory without a usable layer count is not a failure here - the result's
    C(model_problem) names the file and the fix, and the role fails with it when the plan
    has an instance. O(model_num_layers), when set, is used when C(config.json) has no
    layer count, and must agree with it when it has one.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  model_path:
    description: LingBot's C(--model-path).
    type: path
    required: true
  model_num_layers:
    description: The layer count from the inventory (lingbot_service_model_num_layers).
    type: int
  root:
    description: Directory taken as C(/) (tests).
    type: path
    default: /
author:
  - lingbot-fleet
"""

EXAMPLES = r"""
- name: Read the plan in force and the model's layer count
  lingbot_plan_inputs:
    model_path: /var/lib/lingbot/model
  register: plan_inputs
"""

RETURN = r"""
deployed_plan:
  description: The plan in force (plan.json), or null when there is none or it is unreadable.
  returned: always
  type: dict
model_num_layers:
  description: The model's decoder layer count, or null when it is not known.
  returned: always
  type: int
model_layers_source:
  description: Where model_num_layers comes from (the file, or the inventory variable).
  returned: always
  type: str
model_problem:
  description: Why the layer count is not known (names the file and the fix); null when it is.
  returned: always
  type: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet import lingbot_layout as layout

LAYER_KEY = "num_hidden_layers"
POLICY_VARIABLE = "lingbot_service_model_num_layers"


def _layer_count(document: object) -> object:
    if not isinstance(document, dict):
        return None
    if LAYER_KEY in document:
        return document[LAYER_KEY]
    text_config = document.get("text_config")
    return text_config.get(LAYER_KEY) if isinstance(text_config, dict) else None


def model_layers(
    root: str, model_path: str, configured: int | None
) -> tuple[int | None, str, str | None]:
    """(layer count, where it comes from, problem naming the file and the fix)."""
    path = os.path.join(model_path, "config.json")
    try:
        with open(layout.on_root(root, path), encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        return (
            None,
            "",
            (
                f"{path} does not exist: LingBot's --model-path must be a model directory (Hugging "
                "Face style, with config.json). Put the model there, or point "
                "lingbot_service_model_path at it; this role installs no model"
            ),
        )
    except (OSError, UnicodeDecodeError) as error:
        return None, "", f"{path} cannot be read ({error}); make it readable"
    except ValueError as error:
        return (
            None,
            "",
            (
                f"{path} is not JSON ({error}); LingBot and the planner read {LAYER_KEY} from it: "
                "replace it with the model's own config.json"
            ),
        )
    found = _layer_count(document)
    valid = isinstance(found, int) and not isinstance(found, bool) and found > 0
    if found is not None and not valid:
        return (
            None,
            "",
            (
                f"{path}: {LAYER_KEY} is {found!r}, not a positive integer; replace it with the "
                "model's own config.json"
            ),
        )
    if valid and configured is not None and configured != found:
        return (
            None,
            "",
            (
                f"{path} says {LAYER_KEY} {found} but {POLICY_VARIABLE} is {configured}; unset "
                f"{POLICY_VARIABLE} (the model's config.json is the one to trust) or fix it"
            ),
        )
    if valid:
        return found, f"{path} ({LAYER_KEY})", None  # type: ignore[return-value]
    if configured is not None:
        return configured, POLICY_VARIABLE, None
    return (
        None,
        "",
        (
            f"{path} has no {LAYER_KEY} (nor text_config.{LAYER_KEY}), so the planner cannot "
            f"spread the decoder layers over the GPUs; set {POLICY_VARIABLE} to the model's "
            "decoder layer count"
        ),
    )


def deployed_plan(root: str) -> tuple[dict | None, list[str]]:
    path = layout.on_root(root, layout.PLAN_PATH)
    try:
        with open(path, encoding="utf-8") as handle:
            plan = json.load(handle)
    except FileNotFoundError:
        return None, []
    except (OSError, ValueError) as error:
        return None, [
            f"{layout.PLAN_PATH} cannot be read ({error}); the plan is made without the "
            "deployed decisions and rewrites it"
        ]
    if not isinstance(plan, dict):
        return None, [f"{layout.PLAN_PATH} is not a plan document; the plan rewrites it"]
    return plan, []


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "model_path": {"type": "path", "required": True},
            "model_num_layers": {"type": "int"},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    params = module.params
    count, source, problem = model_layers(
        params["root"], params["model_path"], params["model_num_layers"]
    )
    plan, warnings = deployed_plan(params["root"])
    module.exit_json(
        changed=False,
        deployed_plan=plan,
        model_num_layers=count,
        model_layers_source=source,
        model_problem=problem,
        warnings=warnings,
    )


if __name__ == "__main__":
    main()
