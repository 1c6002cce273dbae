"""The probe's reuse decided on the controller: lingbot_fleet.gpu.probe.controller_reuse and
the p2p_probe action plugin, which runs the module only when the saved probe does not
stand for the node."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from lingbot_fleet.gpu.probe import (
    PROBE_ARGUMENT_SPEC,
    PROBE_FACT_NAME,
    ProbeParameters,
    controller_reuse,
    path_config,
    probe_problems,
    save_probe,
)
from lingbot_fleet.gpu.probe_saved import DEFAULT_SAVE_DIR, SAVED_PROBE_FACT_NAME, saved_probe_fact

REPO_ROOT = Path(__file__).resolve().parents[2]
SAVE_DIR = "/var/lib/lingbot-fleet/probe"
TAKEN_S = 1_780_000_000.0  # 2026-05-28T20:26:40Z
UUIDS = ["GPU-aaaa", "GPU-bbbb"]
FACTS = {"gpus": [{"index": i, "uuid": uuid} for i, uuid in enumerate(UUIDS)]}
REUSED = "reused the probe of 2026-05-28T20:26:40Z (1.0 h old, same GPUs; max age 24 h)"


def saved_probe(**parameters: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "timestamp": "2026-05-28T20:26:40Z",
        "parameters": {**ProbeParameters().document(), **parameters},
        "path_config": path_config(FACTS),
        "gpus": [{"index": i, "uuid": uuid} for i, uuid in enumerate(UUIDS)],
        "pairs": [],
        "errors": [],
        "notes": [],
    }


def options(**args: Any) -> dict[str, Any]:
    validated = ArgumentSpecValidator(PROBE_ARGUMENT_SPEC).validate(
        {"facts": FACTS, "max_age_s": 86400, **args}
    )
    assert not validated.error_messages
    return validated.validated_parameters


def fact(probe: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"save_dir": SAVE_DIR, "probe": probe or saved_probe(), "note": None, **extra}


def test_a_young_probe_of_the_same_gpus_and_parameters_is_reused() -> None:
    assert controller_reuse(options(), fact(), TAKEN_S + 3600) == (REUSED, "")


def bridged(control: str, mode: str = "passthrough") -> dict[str, Any]:
    """FACTS with a switch port above each GPU whose ACS control word is ``control``."""
    bridge = {"bdf": "0000:18:00.0", "acs": {"control": control}}
    return {
        "iommu": {"mode": mode},
        "gpus": [{**gpu, "bridges": [bridge]} for gpu in FACTS["gpus"]],
    }


def test_a_probe_taken_under_another_acs_or_iommu_setting_is_measured_again() -> None:
    # Turning ACS redirect off (role pcie_acs) or booting into iommu=pt changes the paths
    # the probe measured, with the same GPUs.
    taken = {**saved_probe(), "path_config": path_config(bridged("0x001d"))}
    reused, _ = controller_reuse(options(facts=bridged("0x001d")), fact(taken), TAKEN_S + 60)
    assert reused
    for facts in (bridged("0x0011"), bridged("0x001d", mode="translated")):
        assert controller_reuse(options(facts=facts), fact(taken), TAKEN_S + 60)[0] is None
    # A probe saved before the path configuration was recorded is measured again too.
    old = {key: value for key, value in taken.items() if key != "path_config"}
    assert controller_reuse(options(facts=bridged("0x001d")), fact(old), TAKEN_S + 60)[0] is None


def test_parameters_from_the_saved_latest_json_is_the_saved_probe() -> None:
    saved = fact(saved_probe(size_bytes=8 << 20))
    args = options(parameters_from=f"{SAVE_DIR}/latest.json")
    assert controller_reuse(args, saved, TAKEN_S + 3600) == (REUSED, "")


@pytest.mark.parametrize(
    ("args", "saved", "now_s", "why"),
    [
        (
            {},
            fact(),
            TAKEN_S + 86400,
            "the saved probe is too old, of other GPUs or of other figure parameters",
        ),
        (
            {"facts": {"gpus": [{"index": 0, "uuid": "GPU-aaaa"}]}},
            fact(),
            TAKEN_S + 60,
            "the saved probe is too old, of other GPUs or of other figure parameters",
        ),
        (
            {"size_mib": 8},
            fact(),
            TAKEN_S + 60,
            "the saved probe is too old, of other GPUs or of other figure parameters",
        ),
        (
            {"max_age_s": 0},
            fact(),
            TAKEN_S + 60,
            "the saved probe is too old, of other GPUs or of other figure parameters",
        ),
        ({"read_only": True}, fact(), TAKEN_S + 60, "read_only returns the node's file"),
        ({"facts": None}, fact(), TAKEN_S + 60, "the module gathers the facts itself"),
        ({"facts": {}}, fact(), TAKEN_S + 60, "the module gathers the facts itself"),
        (
            {},
            None,
            TAKEN_S + 60,
            "no ansible_facts.lingbot_saved_probe (the gpu_facts role reads it)",
        ),
        (
            {"save_dir": "/srv/probe"},
            fact(),
            TAKEN_S + 60,
            f"save_dir /srv/probe is not the directory gpu_facts read ({SAVE_DIR})",
        ),
        (
            {"save_dir": "probe"},
            {**fact(), "save_dir": "probe"},
            TAKEN_S + 60,
            "save_dir probe is not the directory gpu_facts read (probe)",
        ),
        ({}, {**fact(), "probe": None}, TAKEN_S + 60, f"no usable saved probe in {SAVE_DIR}"),
        (
            {"parameters_from": "/srv/old.json"},
            fact(),
            TAKEN_S + 60,
            "parameters_from /srv/old.json is read on the node",
        ),
        (
            {"pairs": ["0-x"]},
            fact(),
            TAKEN_S + 60,
            "pairs: '0-x' is not a GPU pair; write [src, dst] or 'src-dst' with NVML indices",
        ),
        ({"keep": 0}, fact(), TAKEN_S + 60, "keep must be at least 1, not 0"),
        # The node's clock when gpu_facts read the file is a floor for the controller's.
        (
            {},
            fact(read_at_s=TAKEN_S + 86400),
            TAKEN_S + 60,
            "the saved probe is too old, of other GPUs or of other figure parameters",
        ),
    ],
)
def test_the_module_runs_when_the_controller_cannot_be_sure(
    args: dict[str, Any], saved: Any, now_s: float, why: str
) -> None:
    assert controller_reuse(options(**args), saved, now_s) == (None, why)


def test_gpu_facts_reads_the_saved_probe_as_the_probe_does(tmp_path: Path) -> None:
    assert saved_probe_fact(tmp_path, 5.0) == {
        "save_dir": str(tmp_path),
        "probe": None,
        "note": None,
        "read_at_s": 5.0,
    }
    save_probe(saved_probe(), tmp_path, keep=2)
    assert saved_probe_fact(tmp_path, 5.0)["probe"] == saved_probe()
    (tmp_path / "latest.json").write_text('{"schema_version": 2}')
    assert saved_probe_fact(tmp_path, 5.0) == {
        "save_dir": str(tmp_path),
        "probe": None,
        "note": f"the saved probe {tmp_path}/latest.json is not used (schema_version is 2, "
        "this toolkit reads 1); it counts as no saved probe and the next probe that saves "
        "replaces it",
        "read_at_s": 5.0,
    }


def test_the_default_save_dir_has_one_owner() -> None:
    defaults = yaml.safe_load((REPO_ROOT / "roles/p2p_probe/defaults/main.yml").read_text())
    specs = yaml.safe_load((REPO_ROOT / "roles/p2p_probe/meta/argument_specs.yml").read_text())
    spec = specs["argument_specs"]["main"]["options"]["p2p_probe_save_dir"]
    assert defaults["p2p_probe_save_dir"] == spec["default"] == DEFAULT_SAVE_DIR
    assert PROBE_ARGUMENT_SPEC["save_dir"]["default"] == DEFAULT_SAVE_DIR
    for module in ("p2p_probe/library/p2p_probe.py", "gpu_facts/library/gpu_facts.py"):
        text = (REPO_ROOT / "roles" / module).read_text()
        assert f"    default: {DEFAULT_SAVE_DIR}\n" in text, module


# ---- the action plugin -----------------------------------------------------------------


def load_action() -> Any:
    spec = importlib.util.spec_from_file_location(
        "p2p_probe_action", REPO_ROOT / "plugins" / "action" / "p2p_probe.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ActionModule


MEASURED = {"changed": False, "probe": {"measured": True}, "saved": {}, "msg": "measured"}


def run_action(args: dict[str, Any], facts: dict[str, Any], answer: dict[str, Any] = MEASURED):
    """(the task result, the module calls) of the p2p_probe action with `args`."""
    task = mock.MagicMock(args=args, delegate_to=None, async_val=0, check_mode=False)
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    action = load_action()(task, connection, mock.MagicMock(), None, None, None)
    calls: list[dict[str, Any]] = []

    def execute(**kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        return copy.deepcopy(answer)

    with (
        mock.patch.object(action, "_execute_module", side_effect=execute),
        mock.patch.object(action, "_remove_tmp_path"),
        mock.patch("time.time", return_value=TAKEN_S + 3600),
        mock.patch("ansible.plugins.action.ActionBase.run", return_value={}),
    ):
        result = action.run(task_vars={"ansible_facts": facts})
    return result, calls


ROLE_ARGS = {"facts": FACTS, "max_age_s": "86400", "size_mib": "256", "save_dir": SAVE_DIR}


def test_the_action_answers_a_converged_node_without_the_module() -> None:
    result, calls = run_action(ROLE_ARGS, {SAVED_PROBE_FACT_NAME: fact()})
    assert calls == []
    assert result == {
        "changed": False,
        "probe": saved_probe(),
        "saved": {},
        "msg": REUSED,
        "ansible_facts": {PROBE_FACT_NAME: saved_probe()},
    }


@pytest.mark.parametrize(
    ("args", "saved"),
    [
        ({}, fact({**saved_probe(), "timestamp": "2026-05-26T20:26:40Z"})),  # stale
        ({"facts": {"gpus": [{"index": 0, "uuid": "GPU-cccc"}]}}, fact()),  # other GPUs
        ({"size_mib": 8}, fact()),  # other figure parameters
        ({"save_dir": "~/probe"}, fact()),  # expanded on the node
        ({"size_mib": "many"}, fact()),  # the module says what is wrong
    ],
)
def test_the_action_runs_the_module_once_otherwise(args: dict[str, Any], saved: Any) -> None:
    result, calls = run_action({**ROLE_ARGS, **args}, {SAVED_PROBE_FACT_NAME: saved})
    assert len(calls) == 1
    assert result == MEASURED


def test_a_probe_the_module_saves_becomes_the_saved_probe_fact() -> None:
    answer = {**MEASURED, "saved": {"latest": f"{SAVE_DIR}/latest.json", "copy": "x"}}
    result, calls = run_action(
        {**ROLE_ARGS, "size_mib": 8}, {SAVED_PROBE_FACT_NAME: fact()}, answer
    )
    assert len(calls) == 1
    assert result["ansible_facts"] == {
        SAVED_PROBE_FACT_NAME: {
            "save_dir": SAVE_DIR,
            "probe": {"measured": True},
            "note": None,
            "read_at_s": None,
        }
    }


def test_without_the_fact_the_module_runs() -> None:
    result, calls = run_action(ROLE_ARGS, {})
    assert (len(calls), result) == (1, MEASURED)


def test_the_problems_of_a_probe_are_its_errors_then_gpus_then_pairs() -> None:
    probe = {
        "errors": ["time budget reached"],
        "gpus": [{"index": 0, "error": None}, {"index": 1, "error": "GPU 1: context lost"}],
        "pairs": [{"src": 0, "dst": 1, "error": "0->1: CUDA_ERROR_ILLEGAL_ADDRESS"}, {"src": 1}],
    }
    assert probe_problems(probe) == [
        "time budget reached",
        "GPU 1: context lost",
        "0->1: CUDA_ERROR_ILLEGAL_ADDRESS",
    ]
    assert probe_problems({"errors": [], "gpus": [], "pairs": []}) == []
    assert probe_problems(None) == []
