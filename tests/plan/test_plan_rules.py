"""Planner rules one at a time: no probe, policy, findings, eligibility, baseline, CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from plan_support import lab_inputs

from lingbot_fleet.controller.plan_cli import add_plan_parser
from lingbot_fleet.node.findings import Finding
from lingbot_fleet.plan import PlanInputError, build_plan, explain_plan, policy_from_mapping


def instance_gpus(plan: dict) -> list[list[int]]:
    return [instance["gpus"] for instance in plan["instances"]]


def test_without_probe_pcie_pair_is_provisional_single_gpu() -> None:
    facts, _ = lab_inputs("a6000-phb")
    plan = build_plan(facts)
    assert plan["provisional"] is True
    assert plan["mode"] == "single_gpu"
    assert instance_gpus(plan) == [[0], [1]]
    assert "no probe results and the path is PHB (PCIe)" in plan["mode_reason"]
    assert plan["notes"][0].startswith("Provisional plan: no probe results")
    assert plan["summary"].startswith("Provisional: ")


def test_without_probe_nvlink_groups_still_form_with_host_fallback() -> None:
    facts, _ = lab_inputs("h100-sxm-nvswitch")
    plan = build_plan(facts)
    assert instance_gpus(plan) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert {i["kv_cache_strategy"] for i in plan["instances"]} == {"host_fallback"}
    link = plan["instances"][0]["config"]["hardware_profile"]["gpu_topology"][0]["peer_links"][0]
    assert link == {
        "target_gpu_id": 1,
        "path_type": "NV18",
        "bandwidth_gbps": 200.0,
        "latency_ns": 0,
    }
    assert plan["instances"][0]["gpu_weights"] == {f"gpu:{n}": 1.0 for n in range(4)}


def test_default_policy_values() -> None:
    assert policy_from_mapping({}).to_dict() == {
        "p2p_min_gbytes_per_s": 25.0,
        "instance_layout": "auto",
        "max_gpus_per_instance": 8,
        "require_same_numa": True,
        "allow_gpus": None,
        "exclude_gpus": [],
        "base_port": 8000,
        "ineligible_finding_severity": "critical",
        "host_bandwidth_tie_percent": 5.0,
        "model_num_layers": None,
        "baseline": None,
        "max_instances": None,
        "p2p_hysteresis_percent": 5.0,
        "figure_tolerance_percent": 10.0,
    }


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"p2p_min_gbytes": 25}, "policy: unknown key 'p2p_min_gbytes'; known keys: "),
        ({"p2p_min_gbytes_per_s": 0}, "policy p2p_min_gbytes_per_s: must be > 0, got 0"),
        ({"instance_layout": "numa"}, "must be one of auto, per_numa, single; got 'numa'"),
        ({"require_same_numa": "yes"}, "policy require_same_numa: must be true or false"),
        ({"max_gpus_per_instance": 0}, "must be between 1 and 64, got 0"),
        ({"exclude_gpus": "0"}, "policy exclude_gpus: must be a list of GPU UUIDs or indices"),
        ({"baseline": {"model": "X", "p2p_gbytes_per_s": {"0_1": 2}}}, "key '0_1' must name"),
    ],
)
def test_bad_policy_is_refused_with_the_key(values: dict, message: str) -> None:
    with pytest.raises(PlanInputError, match=None) as caught:
        policy_from_mapping(values)
    assert message in str(caught.value)


def test_role_prefixed_policy_keys_are_accepted() -> None:
    policy = policy_from_mapping({"lingbot_service_base_port": 9000})
    assert policy.base_port == 9000


def test_exclude_allow_and_unknown_selectors() -> None:
    facts, probe = lab_inputs("pcie-4gpu-two-switches")
    uuid_of_2 = facts["gpus"][2]["uuid"]
    plan = build_plan(facts, probe, {"exclude_gpus": [0, uuid_of_2, "GPU-nope"]})
    assert instance_gpus(plan) == [[1], [3]]
    assert "policy exclude_gpus lists it" in plan["unused_gpus"][0]["reason"]
    assert any("'GPU-nope', which is no GPU of this node" in note for note in plan["notes"])
    allowed = build_plan(facts, probe, {"allow_gpus": ["2", "3"]})
    assert instance_gpus(allowed) == [[2, 3]]
    assert allowed["instances"][0]["name"] == "main"


def test_lost_and_mig_gpus_are_not_eligible() -> None:
    facts, probe = lab_inputs("pcie-4gpu-two-switches")
    facts["gpus"][0]["lost"] = True
    facts["gpus"][3]["mig_mode"] = "enabled"
    plan = build_plan(facts, probe)
    assert instance_gpus(plan) == [[1], [2]]
    reasons = {entry["index"]: entry["reasons"][0] for entry in plan["gpus"]}
    assert "the driver lost it" in reasons[0]
    assert "it is in MIG mode" in reasons[3]


def test_findings_at_the_ineligible_severity_exclude_a_gpu() -> None:
    facts, probe = lab_inputs("a6000-phb")
    bus_id = facts["gpus"][0]["bus_id"]
    finding = Finding("PCIE_WIDTH_BELOW_EXPECTED", "error", bus_id, "x8", {}, "reseat")
    lenient = build_plan(facts, probe, findings=[finding])
    assert instance_gpus(lenient) == [[1, 0]]
    assert lenient["gpus"][0]["link_health_rank"] == 3
    strict = build_plan(facts, probe, {"ineligible_finding_severity": "error"}, [finding.to_dict()])
    assert instance_gpus(strict) == [[1]]
    assert "finding PCIE_WIDTH_BELOW_EXPECTED (error)" in strict["unused_gpus"][0]["reason"]


def test_probe_gpu_error_and_missing_pairs() -> None:
    facts, probe = lab_inputs("a6000-phb")
    probe["gpus"][1]["error"] = "CUDA_ERROR_ILLEGAL_ADDRESS"
    plan = build_plan(facts, probe)
    assert instance_gpus(plan) == [[0]]
    assert (
        "the probe could not measure it: CUDA_ERROR_ILLEGAL_ADDRESS"
        in (plan["unused_gpus"][0]["reason"])
    )
    facts, probe = lab_inputs("a6000-phb")
    probe["pairs"] = [pair for pair in probe["pairs"] if pair["src"] == 0]
    plan = build_plan(facts, probe)
    assert "1->0 was not measured by the probe" in plan["mode_reason"]


def test_inputs_from_another_node_or_schema_are_refused() -> None:
    facts, probe = lab_inputs("a6000-phb")
    probe["gpus"][0]["uuid"] = "GPU-other"
    with pytest.raises(PlanInputError, match="GPU index 0 is GPU-other but the facts say"):
        build_plan(facts, probe)
    with pytest.raises(PlanInputError, match="facts: schema_version is 2, the planner reads 1"):
        build_plan({**facts, "schema_version": 2})


def test_model_num_layers_spreads_layers_in_plan_order() -> None:
    facts, probe = lab_inputs("h100-sxm-nvswitch")
    plan = build_plan(facts, probe, {"model_num_layers": 10})
    affinity = plan["instances"][0]["layer_affinity"]
    assert affinity["embed_tokens"] == "gpu:0" and affinity["lm_head"] == "gpu:0"
    placed = [affinity[f"layers.{n}"] for n in range(10)]
    assert placed == ["gpu:0"] * 3 + ["gpu:1"] * 3 + ["gpu:2"] * 2 + ["gpu:3"] * 2


def test_baseline_flags_drifted_paths() -> None:
    facts, probe = lab_inputs("a6000-iommu-acs")
    baseline = {
        "model": "NVIDIA RTX A6000",
        "p2p_gbytes_per_s": {"0-1": 17.5},
        "tolerance_percent": 15,
    }
    result = build_plan(facts, probe, {"baseline": baseline})["baseline"]
    assert result["compared"] is True
    assert result["drifted_pairs"] == ["0-1"]
    assert result["paths"][0]["measured_gbytes_per_s"] == 6.1
    assert result["paths"][0]["drift_percent"] == -65.1
    assert result["paths"][0]["status"] == "below_baseline"
    healthy_facts, healthy_probe = lab_inputs("a6000-phb")
    other = build_plan(
        healthy_facts, healthy_probe, {"baseline": {**baseline, "p2p_gbytes_per_s": {"0-1": 28.0}}}
    )
    assert other["baseline"]["drifted_pairs"] == []
    assert other["baseline"]["paths"][0]["status"] == "within_tolerance"
    wrong_model = build_plan(
        healthy_facts, healthy_probe, {"baseline": {**baseline, "model": "NVIDIA H100"}}
    )
    assert wrong_model["baseline"]["compared"] is False
    assert "the baseline is for NVIDIA H100" in wrong_model["baseline"]["reason"]


def test_explain_text_names_instances_and_reasons() -> None:
    facts, probe = lab_inputs("h100-sxm-nvswitch")
    text = explain_plan(build_plan(facts, probe))
    assert "Instance numa1: numactl --cpunodebind=1 --membind=1, port 8001" in text
    assert "--gpus 0,1,2,3 --peer-access-threshold 25" in text


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lingbot-fleet")
    add_plan_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_writes_json_and_explain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    facts, probe = lab_inputs("a6000-phb")
    facts_file, probe_file, policy_file = (tmp_path / n for n in ("f.json", "p.json", "y.yml"))
    facts_file.write_text(json.dumps({"ansible_facts": {"lingbot_gpu": facts}}))
    probe_file.write_text(json.dumps(probe))
    policy_file.write_text("lingbot_service_base_port: 8100\n")
    out = tmp_path / "plan.json"
    argv = ["plan", "--facts", str(facts_file), "--probe", str(probe_file)]
    assert run_cli([*argv, "--policy", str(policy_file), "--output", str(out)]) == 0
    assert json.loads(out.read_text())["instances"][0]["port"] == 8100
    assert run_cli([*argv, "--explain"]) == 0
    assert (
        "Instance main: numactl --cpunodebind=0 --membind=0, port 8000" in capsys.readouterr().out
    )


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "none.json"
    assert run_cli(["plan", "--facts", str(missing)]) == 2
    assert f"--facts {missing}: cannot read" in capsys.readouterr().err
    policy_file = tmp_path / "y.yml"
    policy_file.write_text("instance_layout: sideways\n")
    facts_file = tmp_path / "f.json"
    facts_file.write_text(json.dumps(lab_inputs("a6000-phb")[0]))
    assert run_cli(["plan", "--facts", str(facts_file), "--policy", str(policy_file)]) == 1
    assert (
        "policy instance_layout: must be one of auto, per_numa, single" in capsys.readouterr().err
    )
