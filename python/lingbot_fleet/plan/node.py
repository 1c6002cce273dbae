"""The plan made on the node: the controller's inputs plus what only the node holds.

The lingbot_service module runs this on the node (through module_utils; stdlib only): the
controller gathers the facts, the probe, the link findings and the typed policy; the node
adds the plan in force (/etc/lingbot/plan.json, whose decisions the planner keeps while the
measurements stay near them) and the model's decoder layer count (``num_hidden_layers`` of
``<model_path>/config.json``, or of its ``text_config``). Both are only read here. The plan
itself is ``build_plan``'s, the function the audit plans with.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..lingbot.layout import PLAN_PATH, on_root
from .document import build_plan

LAYER_KEY = "num_hidden_layers"
LAYERS_VARIABLE = "lingbot_service_model_num_layers"
FAIL_WITHOUT_INSTANCES_VARIABLE = "lingbot_service_fail_without_instances"


def _layer_count(document: object) -> object:
    if not isinstance(document, dict):
        return None
    if LAYER_KEY in document:
        return document[LAYER_KEY]
    text_config = document.get("text_config")
    return text_config.get(LAYER_KEY) if isinstance(text_config, dict) else None


@dataclass(frozen=True)
class ModelLayers:
    """The model's decoder layer count for the planner, where it comes from, and the
    problem (naming the file and the fix) when there is none."""

    count: int | None
    source: str
    problem: str | None


def read_config_layers(root: str, model_path: str) -> tuple[object, str | None]:
    """(``num_hidden_layers`` of the model's config.json as found, or None; why it could
    not be read, naming the file and the fix, or None). Only reads."""
    path = os.path.join(model_path, "config.json")
    try:
        with open(on_root(root, path), encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        return None, (
            f"{path} does not exist: LingBot's --model-path must be a model directory (Hugging "
            "Face style, with config.json). Put the model there, or point "
            "lingbot_service_model_path at it; this role installs no model"
        )
    except (OSError, UnicodeDecodeError) as error:
        return None, f"{path} cannot be read ({error}); make it readable"
    except ValueError as error:
        return None, (
            f"{path} is not JSON ({error}); LingBot and the planner read {LAYER_KEY} from it: "
            "replace it with the model's own config.json"
        )
    return _layer_count(document), None


def decide_layers(
    model_path: str, found: object, read_problem: str | None, configured: int | None
) -> ModelLayers:
    """The layer count from what config.json holds (``read_config_layers``) and the
    policy's ``configured`` (lingbot_service_model_num_layers), which is used when
    config.json has no layer count and must agree with it when it has one."""
    path = os.path.join(model_path, "config.json")
    if read_problem is not None:
        return ModelLayers(None, "", read_problem)
    valid = isinstance(found, int) and not isinstance(found, bool) and found > 0
    if found is not None and not valid:
        return ModelLayers(
            None,
            "",
            f"{path}: {LAYER_KEY} is {found!r}, not a positive integer; replace it with the "
            "model's own config.json",
        )
    if valid and configured is not None and configured != found:
        return ModelLayers(
            None,
            "",
            f"{path} says {LAYER_KEY} {found} but {LAYERS_VARIABLE} is {configured}; unset "
            f"{LAYERS_VARIABLE} (the model's config.json is the one to trust) or fix it",
        )
    if valid:
        return ModelLayers(found, f"{path} ({LAYER_KEY})", None)  # type: ignore[arg-type]
    if configured is not None:
        return ModelLayers(configured, LAYERS_VARIABLE, None)
    return ModelLayers(
        None,
        "",
        f"{path} has no {LAYER_KEY} (nor text_config.{LAYER_KEY}), so the planner cannot "
        f"spread the decoder layers over the GPUs; set {LAYERS_VARIABLE} to the model's "
        "decoder layer count",
    )


def deployed_plan(root: str) -> tuple[dict[str, Any] | None, list[str]]:
    """(the plan in force or None, warnings): an unreadable plan.json is a warning."""
    try:
        with open(on_root(root, PLAN_PATH), encoding="utf-8") as handle:
            plan = json.load(handle)
    except FileNotFoundError:
        return None, []
    except (OSError, ValueError) as error:
        return None, [
            f"{PLAN_PATH} cannot be read ({error}); the plan is made without the "
            "deployed decisions and rewrites it"
        ]
    if not isinstance(plan, dict):
        return None, [f"{PLAN_PATH} is not a plan document; the plan rewrites it"]
    return plan, []


def finding_warnings(plan: Mapping[str, Any]) -> list[str]:
    """The plan's own findings (such as PLAN_GPUS_IDLE), one warning each."""
    return [
        f"{finding['code']}: {finding['message']}; fix: {finding['fix']}"
        for finding in plan.get("findings") or []
    ]


@dataclass(frozen=True)
class NodePlan:
    """The plan for this node and what reading the node found."""

    plan: dict[str, Any]
    model_layers_source: str
    model_problem: str | None
    warnings: list[str] = field(default_factory=list)
    # What the model's config.json held (read_config_layers), when the node was read.
    config_layers: tuple[object, str | None] = (None, None)

    def refusal(self, fail_without_instances: bool) -> str | None:
        """Why the node must fail before anything is written; None when it may go on."""
        if self.plan["instances"] and self.model_problem is not None:
            return f"{self.model_problem}. Nothing was written."
        if not self.plan["instances"] and fail_without_instances:
            said = " ".join(
                part for part in (self.plan["summary"], self.plan.get("mode_reason")) if part
            )
            return (
                f"{said} Fix the findings, or set {FAIL_WITHOUT_INSTANCES_VARIABLE}=false to "
                "leave this node's LingBot as it is."
            )
        return None


def plan_with(
    inputs: Mapping[str, Any],
    previous: Mapping[str, Any] | None,
    layers: ModelLayers,
    warnings: Sequence[str] = (),
) -> NodePlan:
    """``build_plan`` from the controller's ``inputs`` (facts, probe, policy, findings), the
    plan in force and the model's layers: what the node and, from a receipt of what the node
    held, the lingbot_service action plan with. Raises PlanInputError."""
    policy = dict(inputs.get("policy") or {})
    if layers.count is not None:
        policy["model_num_layers"] = layers.count
    plan = build_plan(
        inputs["facts"], inputs.get("probe"), policy, inputs.get("findings") or [], previous
    )
    return NodePlan(plan, layers.source, layers.problem, [*warnings, *finding_warnings(plan)])


def plan_on_node(
    inputs: Mapping[str, Any],
    root: str,
    model_path: str,
    watch: Callable[[str], None] | None = None,
) -> NodePlan:
    """``build_plan`` from the controller's ``inputs`` (facts, probe, policy, findings), the
    plan in force and the model's layer count on this node. Raises PlanInputError.
    ``watch`` is told each node path read (the module's NodeChanges, for its receipt)."""
    if watch is not None:
        watch(os.path.join(model_path, "config.json"))
        watch(PLAN_PATH)
    config_layers = read_config_layers(root, model_path)
    configured = (inputs.get("policy") or {}).get("model_num_layers")
    layers = decide_layers(model_path, *config_layers, configured)
    previous, warnings = deployed_plan(root)
    planned = plan_with(inputs, previous, layers, warnings)
    return replace(planned, config_layers=config_layers)
