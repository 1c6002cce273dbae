"""What a real H200 node gave, read back through the toolkit: the captures parse, the facts
and the probe plan one instance, and the link checks find nothing on a healthy Gen5 x16 GPU."""

from __future__ import annotations

import json
from pathlib import Path

from lingbot_fleet.facts.schema import schema_problems
from lingbot_fleet.gpu import linkcheck
from lingbot_fleet.parsers import parse
from lingbot_fleet.plan import build_plan

HERE = Path(__file__).parent
SAMPLES = HERE.parent / "parsers" / "samples"
UUID = "GPU-b8b8ce68-4ba7-1f16-312f-18b1ab73a204"


def reading(name: str) -> dict:
    return json.loads((HERE / name).read_text())


def test_the_real_smi_q_capture_parses_to_the_facts_nvml_gave() -> None:
    smi = parse("smi-q", (SAMPLES / "smi-q-580-h200-vm.txt").read_text())
    facts = reading("h200-vm-facts.json")
    [gpu] = smi["gpus"]
    [fact] = facts["gpus"]
    assert smi["driver_version"] == facts["driver_version"] == "580.159.04"
    assert (gpu["uuid"], gpu["bdf"], gpu["product_name"]) == (
        fact["uuid"],
        fact["bus_id"],
        fact["model"],
    )
    assert (gpu["pcie_gen_current"], gpu["pcie_width_current"]) == (5, 16)
    assert gpu["memory_total_mib"] == 143771


def test_the_real_one_gpu_topology_and_p2p_matrices_parse() -> None:
    topo = parse("topo", (SAMPLES / "topo-1gpu-h200-vm-gpu-numa-id-na.txt").read_text())
    assert topo["links"] == {"GPU0": {"GPU0": "X"}}
    assert topo["gpus"][0]["cpu_affinity"] == list(range(16))
    p2p = parse("p2p", (SAMPLES / "p2p-1gpu-h200-vm-read.txt").read_text())
    assert p2p["status"] == {"GPU0": {"GPU0": "X"}}


def test_the_real_facts_meet_the_schema_and_the_checks_find_nothing() -> None:
    facts = reading("h200-vm-facts.json")
    probe = reading("h200-vm-probe.json")
    assert schema_problems(facts) == []
    load = linkcheck.load_from_probe(probe)
    assert linkcheck.check_links(facts, linkcheck.LinkPolicy(), load=load) == []
    [gpu] = probe["gpus"]
    assert gpu["h2d_gbytes_per_s"] > linkcheck.host_copy_floor_gbytes_per_s(5, 16)


def test_the_real_node_plans_one_instance_with_its_gpu_by_uuid() -> None:
    plan = build_plan(reading("h200-vm-facts.json"), reading("h200-vm-probe.json"))
    [instance] = plan["instances"]
    assert instance["gpus"] == [0]
    assert instance["numa_node"] == 0
    assert instance["environment"]["CUDA_VISIBLE_DEVICES"] == UUID
    assert instance["numactl"] == {"cpunodebind": 0, "membind": 0}
