"""lingbot_fleet.plan.node: the plan in force and the model's layer count, read from the node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lingbot_fleet.plan import node as plan_node

MODEL = "/srv/model"
CONFIG = f"{MODEL}/config.json"


def model_layers(root: str, model_path: str, configured: int | None) -> tuple:
    """(count, source, problem) as the node decides them from its config.json."""
    found, problem = plan_node.read_config_layers(root, model_path)
    layers = plan_node.decide_layers(model_path, found, problem, configured)
    return layers.count, layers.source, layers.problem


def write_model(root: Path, text: str) -> None:
    path = root / MODEL.lstrip("/")
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(text)


def test_layer_count_from_config_json(tmp_path: Path) -> None:
    write_model(tmp_path, '{"num_hidden_layers": 32}')
    assert model_layers(str(tmp_path), MODEL, None) == (
        32,
        f"{CONFIG} (num_hidden_layers)",
        None,
    )


def test_layer_count_from_text_config(tmp_path: Path) -> None:
    write_model(tmp_path, '{"text_config": {"num_hidden_layers": 40}}')
    assert model_layers(str(tmp_path), MODEL, None)[0] == 40


def test_the_inventory_value_is_the_fallback_and_must_agree(tmp_path: Path) -> None:
    write_model(tmp_path, '{"model_type": "x"}')
    assert model_layers(str(tmp_path), MODEL, 12) == (
        12,
        "lingbot_service_model_num_layers",
        None,
    )
    write_model(tmp_path, '{"num_hidden_layers": 32}')
    assert model_layers(str(tmp_path), MODEL, 12) == (
        None,
        "",
        f"{CONFIG} says num_hidden_layers 32 but lingbot_service_model_num_layers is 12; unset "
        "lingbot_service_model_num_layers (the model's config.json is the one to trust) or fix it",
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            None,
            f"{CONFIG} does not exist: LingBot's --model-path must be a model directory (Hugging "
            "Face style, with config.json). Put the model there, or point "
            "lingbot_service_model_path at it; this role installs no model",
        ),
        (
            "{not json",
            f"{CONFIG} is not JSON (Expecting property name enclosed in double quotes: line 1 "
            "column 2 (char 1)); LingBot and the planner read num_hidden_layers from it: replace "
            "it with the model's own config.json",
        ),
        (
            '{"num_hidden_layers": "32"}',
            f"{CONFIG}: num_hidden_layers is '32', not a positive integer; replace it with the "
            "model's own config.json",
        ),
        (
            "{}",
            f"{CONFIG} has no num_hidden_layers (nor text_config.num_hidden_layers), so the "
            "planner cannot spread the decoder layers over the GPUs; set "
            "lingbot_service_model_num_layers to the model's decoder layer count",
        ),
    ],
)
def test_a_model_without_a_usable_layer_count_names_the_file_and_the_fix(
    tmp_path: Path, text: str | None, problem: str
) -> None:
    if text is not None:
        write_model(tmp_path, text)
    assert model_layers(str(tmp_path), MODEL, None) == (None, "", problem)


def test_deployed_plan_is_read_and_a_broken_one_is_a_warning(tmp_path: Path) -> None:
    assert plan_node.deployed_plan(str(tmp_path)) == (None, [])
    etc = tmp_path / "etc" / "lingbot"
    etc.mkdir(parents=True)
    (etc / "plan.json").write_text(json.dumps({"schema_version": 1, "instances": []}))
    assert plan_node.deployed_plan(str(tmp_path)) == ({"schema_version": 1, "instances": []}, [])
    (etc / "plan.json").write_text("{broken")
    plan, warnings = plan_node.deployed_plan(str(tmp_path))
    assert plan is None
    assert warnings == [
        "/etc/lingbot/plan.json cannot be read (Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1)); the plan is made without the deployed decisions and "
        "rewrites it"
    ]
