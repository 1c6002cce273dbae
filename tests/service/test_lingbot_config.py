"""lingbot_fleet.lingbot.config: schema, overrides, and the YAML LingBot reads back."""

from __future__ import annotations

import copy
from typing import Any

import plan_support
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from lingbot.config import config_from_document
from lingbot.yamlsubset import parse_document
from lingbot_fleet.lingbot.config import (
    ConfigError,
    build_config,
    config_problems,
    merge,
    override_problems,
    to_yaml,
)
from lingbot_fleet.plan import build_plan

PHB_YAML = """\
# managed
hardware_profile:
  gpu_topology:
    - gpu_id: 0
      bus_id: "0000:41:00.0"
      peer_links:
        - target_gpu_id: 1
          path_type: PHB
          bandwidth_gbps: 227.2
          latency_ns: 1320
    - gpu_id: 1
      bus_id: "0000:42:00.0"
      peer_links:
        - target_gpu_id: 0
          path_type: PHB
          bandwidth_gbps: 227.2
          latency_ns: 1320
  p2p_threshold_gbps: 200.0
  layer_affinity:
    embed_tokens: "gpu:0"
    lm_head: "gpu:0"
    "layers.*": "gpu:1"
load_balancer:
  type: adaptive
  config:
    gpu_weights:
      "gpu:0": 1.0
      "gpu:1": 1.0
kv_cache_strategy: p2p_direct
kv_cache_sync_interval_ms: 10
kv_cache_compression: fp16
debug_mode: false
"""


def planned_instances(profile: str, with_probe: bool = True) -> list[dict[str, Any]]:
    facts, probe = plan_support.lab_inputs(profile)
    return build_plan(facts, probe if with_probe else None, {})["instances"]


def phb_config() -> dict[str, Any]:
    return planned_instances("a6000-phb")[0]["config"]


def test_phb_config_is_written_as_expected() -> None:
    assert to_yaml(build_config(phb_config(), {}, 25.0), "managed") == PHB_YAML


@pytest.mark.parametrize("with_probe", [True, False])
@pytest.mark.parametrize("profile", plan_support.PROFILE_NAMES)
def test_every_planned_config_is_valid_and_reads_back(profile: str, with_probe: bool) -> None:
    for instance in planned_instances(profile, with_probe):
        config = build_config(
            instance["config"], {}, instance["peer_access_threshold_gbytes_per_s"]
        )
        text = to_yaml(config, f"instance {instance['name']}")
        assert yaml.safe_load(text) == config
        document = parse_document(text)
        assert document.value == config
        parsed = config_from_document("config.yaml", document)
        assert len(parsed.gpu_topology) == len(instance["gpus"])
        assert (
            parsed.p2p_threshold_gbits_per_s == instance["peer_access_threshold_gbytes_per_s"] * 8
        )


def test_unknown_top_level_key_is_refused() -> None:
    assert override_problems({"kv_cache_stratgy": "p2p_direct"}) == [
        "kv_cache_stratgy: unknown key 'kv_cache_stratgy'; known keys here: hardware_profile, "
        "load_balancer, kv_cache_strategy, kv_cache_sync_interval_ms, kv_cache_compression, "
        "debug_mode"
    ]


def test_unknown_nested_key_names_its_path() -> None:
    assert override_problems({"load_balancer": {"config": {"weights": {}}}}) == [
        "load_balancer.config.weights: unknown key 'weights'; known keys here: gpu_weights"
    ]


def test_wrong_types_are_refused() -> None:
    assert override_problems(
        {"debug_mode": "yes", "kv_cache_sync_interval_ms": 2.5, "kv_cache_compression": "zstd"}
    ) == [
        "debug_mode: must be true or false, got str 'yes'",
        "kv_cache_sync_interval_ms: must be an integer, got float 2.5",
        "kv_cache_compression: must be one of fp16, none; got 'zstd'",
    ]


def test_path_type_soc_is_refused_with_the_word_to_use() -> None:
    config = phb_config()
    config["hardware_profile"]["gpu_topology"][0]["peer_links"][0]["path_type"] = "SOC"
    assert config_problems(config) == [
        "hardware_profile.gpu_topology[0].peer_links[0].path_type: must be a topology word: "
        "NV#, PIX, PXB, PHB, NODE or SYS (nvidia-smi topo -m; write SYS for SOC); got 'SOC'"
    ]


def test_peer_link_to_an_unknown_gpu_is_refused() -> None:
    config = phb_config()
    config["hardware_profile"]["gpu_topology"][1]["peer_links"][0]["target_gpu_id"] = 5
    assert config_problems(config) == [
        "hardware_profile.gpu_topology[1].peer_links[0].target_gpu_id: gpu 5 has no entry in "
        "gpu_topology"
    ]


def test_threshold_in_gbytes_instead_of_gbits_is_refused() -> None:
    with pytest.raises(ConfigError) as error:
        build_config(phb_config(), {"hardware_profile": {"p2p_threshold_gbps": 25}}, 25.0)
    assert error.value.problems == [
        "hardware_profile.p2p_threshold_gbps: 25 Gbit/s disagrees with --peer-access-threshold "
        "25 GB/s (= 200 Gbit/s), which LingBot would use instead; change "
        "lingbot_service_p2p_min_gbytes_per_s (GB/s) rather than overriding p2p_threshold_gbps"
    ]


def test_override_problems_come_before_merging() -> None:
    with pytest.raises(ConfigError) as error:
        build_config(phb_config(), {"hardware_profile": {"gpu_topolgy": []}})
    assert error.value.problems == [
        "override hardware_profile.gpu_topolgy: unknown key 'gpu_topolgy'; known keys here: "
        "gpu_topology, p2p_threshold_gbps, layer_affinity"
    ]


def test_merge_is_deep_for_mappings_and_replaces_lists() -> None:
    base = phb_config()
    original = copy.deepcopy(base)
    merged = build_config(
        base,
        {
            "debug_mode": True,
            "load_balancer": {"config": {"gpu_weights": {"gpu:1": 0.5}}},
            "hardware_profile": {"layer_affinity": {"lm_head": "gpu:1"}},
        },
        25.0,
    )
    assert base == original
    assert merged["debug_mode"] is True
    assert merged["load_balancer"] == {
        "type": "adaptive",
        "config": {"gpu_weights": {"gpu:0": 1.0, "gpu:1": 0.5}},
    }
    assert merged["hardware_profile"]["layer_affinity"] == {
        "embed_tokens": "gpu:0",
        "lm_head": "gpu:1",
        "layers.*": "gpu:1",
    }
    assert merge({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}


def test_a_merged_document_that_breaks_the_schema_is_refused() -> None:
    with pytest.raises(ConfigError) as error:
        build_config(phb_config(), {"hardware_profile": {"gpu_topology": []}})
    assert error.value.problems == [
        "override hardware_profile.gpu_topology: must list at least 1 entry"
    ]
    link = {"target_gpu_id": 0, "path_type": "PHB", "bandwidth_gbps": 200.0, "latency_ns": 1}
    topology = [{"gpu_id": 0, "bus_id": "0000:41:00.0", "peer_links": [link]}]
    with pytest.raises(ConfigError) as error:
        build_config(phb_config(), {"hardware_profile": {"gpu_topology": topology}})
    assert error.value.problems == [
        "hardware_profile.gpu_topology[0].peer_links[0].target_gpu_id: a GPU cannot have a peer "
        "link to itself"
    ]


def test_float_and_special_strings_are_written_unambiguously() -> None:
    text = to_yaml({"a": 1e-05, "b": 3.0, "c": "yes", "d": "12", "e": "", "f": "a: b", "g": []})
    assert text == 'a: 1.0e-05\nb: 3.0\nc: "yes"\nd: "12"\ne: ""\nf: "a: b"\ng: []\n'


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("\u2028", "\\u2028"),
        ("a\u2029b", "a\\u2029b"),
        ("x\u0085", "x\\u0085"),
        ("\ufeffkey", "\\ufeffkey"),
        ("c1\u0090", "c1\\u0090"),
    ],
)
def test_line_breaks_and_unprintables_yaml_would_misread_are_escaped(
    text: str, escaped: str
) -> None:
    written = to_yaml({text: text})
    assert written == f'"{escaped}": "{escaped}"\n'
    assert yaml.safe_load(written) == {text: text}
    assert parse_document(written).value == {text: text}


_KEYS = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
    | st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=20)
)
_DOCUMENTS = st.recursive(
    _SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_KEYS, children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _DOCUMENTS, min_size=1, max_size=5))
def test_any_document_reads_back_the_same(document: dict[str, Any]) -> None:
    text = to_yaml(document)
    assert yaml.safe_load(text) == document
    assert parse_document(text).value == document
