"""Facts and probe documents that a hand edit, another tool or a hostile node could hand the
planner: each refused with the exact message before any GPU is chosen (the planner's output
becomes CUDA_VISIBLE_DEVICES, numactl bindings and ports in a root-installed unit).

Each case changes one field of a real lab profile's documents (pcie-4gpu-two-switches).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import plan_support
import pytest

from lingbot_fleet.plan import PlanInputError, build_plan

FACTS, PROBE = plan_support.lab_inputs("pcie-4gpu-two-switches")
GATHER = "gather the facts again with gpu_facts"
PROBE_AGAIN = "run this toolkit's p2p_probe again"
GPU1 = FACTS["gpus"][1]
OTHER_UUID = "GPU-00000000-0000-0000-0000-000000000000"

Edit = Callable[[dict[str, Any], dict[str, Any]], None]


def _gpu1(key: str, value: Any) -> Edit:
    def edit(facts: dict[str, Any], probe: dict[str, Any]) -> None:
        facts["gpus"][1][key] = value

    return edit


def _figure(value: Any) -> Edit:
    def edit(facts: dict[str, Any], probe: dict[str, Any]) -> None:
        probe["pairs"][0]["p2p_enabled"]["unidirectional_gbytes_per_s"] = value

    return edit


def _probe_gpu0_uuid(facts: dict[str, Any], probe: dict[str, Any]) -> None:
    probe["gpus"][0]["uuid"] = OTHER_UUID


def _probe_src_text(facts: dict[str, Any], probe: dict[str, Any]) -> None:
    probe["pairs"][0]["src"] = "0"


def _numa_list(facts: dict[str, Any], probe: dict[str, Any]) -> None:
    facts["numa"] = []


FIGURE = "probe.pairs[0].p2p_enabled.unidirectional_gbytes_per_s"
CASES = [
    (
        "lost as the text 'false'",
        _gpu1("lost", "false"),
        "facts: GPU 1 (gpus[1]): lost is 'false', not true or false (a string such as 'false'"
        f" would count as lost); {GATHER}",
    ),
    (
        "a comma in a UUID",
        _gpu1("uuid", f"{GPU1['uuid']},0"),
        f"facts: GPU 1 (gpus[1]): uuid is '{GPU1['uuid']},0', not of the form"
        " GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (or MIG-...); it goes into"
        f" CUDA_VISIBLE_DEVICES, where anything else could select another GPU; {GATHER}",
    ),
    (
        "an index as text",
        _gpu1("index", "1"),
        f"facts: gpus[1].index is '1', not a GPU index; {GATHER}",
    ),
    (
        "two GPUs with one index",
        _gpu1("index", 0),
        f"facts: gpus[1] and gpus[0] both have index 0; {GATHER}",
    ),
    (
        "a NUMA node of a billion",
        _gpu1("numa_node", 10**9),
        "facts: GPU 1 (gpus[1]): numa_node is 1000000000, not -1 (unknown) or a NUMA node from"
        f" 0 to 1023; {GATHER}",
    ),
    (
        "a NUMA node as text",
        _gpu1("numa_node", "0"),
        "facts: GPU 1 (gpus[1]): numa_node is '0', not -1 (unknown) or a NUMA node from 0 to"
        f" 1023; {GATHER}",
    ),
    (
        "a model that is a list",
        _gpu1("model", ["x"]),
        f"facts: GPU 1 (gpus[1]): model is ['x'], not text; {GATHER}",
    ),
    (
        "a bus id that is a number",
        _gpu1("bus_id", 5),
        f"facts: GPU 1 (gpus[1]): bus_id is 5, not a PCI address like 0000:41:00.0; {GATHER}",
    ),
    (
        "numa as a list",
        _numa_list,
        f"facts: numa is [], not a mapping; {GATHER}",
    ),
    (
        "a NaN figure",
        _figure(float("nan")),
        f"{FIGURE} is nan, not a measured figure; {PROBE_AGAIN}",
    ),
    ("a negative figure", _figure(-5), f"{FIGURE} is -5, not a measured figure; {PROBE_AGAIN}"),
    ("a figure as text", _figure("25"), f"{FIGURE} is '25', not a measured figure; {PROBE_AGAIN}"),
    (
        "a figure that is true",
        _figure(True),
        f"{FIGURE} is True, not a measured figure; {PROBE_AGAIN}",
    ),
    (
        "a pair's source as text",
        _probe_src_text,
        f"probe: pairs[0].src is '0', not a GPU index from 0 to 1023; {PROBE_AGAIN}",
    ),
    (
        "a probe of another node",
        _probe_gpu0_uuid,
        f"probe: GPU index 0 is {OTHER_UUID} but the facts say {FACTS['gpus'][0]['uuid']}; facts"
        " and probe come from different nodes or boots: gather both again",
    ),
]


@pytest.mark.parametrize(("case", "edit", "message"), CASES, ids=[case[0] for case in CASES])
def test_the_planner_refuses_a_document_it_cannot_trust(
    case: str, edit: Edit, message: str
) -> None:
    facts, probe = copy.deepcopy(FACTS), copy.deepcopy(PROBE)
    edit(facts, probe)
    with pytest.raises(PlanInputError) as refused:
        build_plan(facts, probe, {})
    assert str(refused.value) == message, case


def test_the_untouched_documents_are_planned() -> None:
    """The cases above fail for their one edit: the documents they start from plan."""
    assert build_plan(copy.deepcopy(FACTS), copy.deepcopy(PROBE), {})["instances"]
