"""The stand-in's YAML-subset reader reads what PyYAML and Ansible write, and refuses the
rest with a line number."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab" / "lingbot_standin"))

from lingbot.yamlsubset import YamlSubsetError, parse_document

CONFIG_DATA = {
    "hardware_profile": {
        "gpu_topology": [
            {
                "gpu_id": 0,
                "bus_id": "0000:81:00.0",
                "peer_links": [
                    {
                        "target_gpu_id": 1,
                        "path_type": "NV12",
                        "bandwidth_gbps": 2400.0,
                        "latency_ns": 950,
                    }
                ],
            },
            {"gpu_id": 1, "bus_id": "0000:c1:00.0", "peer_links": []},
        ],
        "p2p_threshold_gbps": 200.0,
        "layer_affinity": {"embed_tokens": "gpu:0", "layers.*": "gpu:1"},
    },
    "load_balancer": {"type": "adaptive", "config": {"gpu_weights": {"gpu:0": 1.0, "gpu:1": 0.85}}},
    "kv_cache_strategy": "p2p_direct",
    "kv_cache_sync_interval_ms": 10,
    "kv_cache_compression": "none",
    "debug_mode": False,
}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(yaml.dump(CONFIG_DATA, indent=4, default_flow_style=False), id="to_nice_yaml"),
        pytest.param(yaml.safe_dump(CONFIG_DATA, sort_keys=False), id="safe_dump"),
        pytest.param(yaml.safe_dump(CONFIG_DATA, default_flow_style=True), id="flow"),
        pytest.param(json.dumps(CONFIG_DATA, indent=2), id="json-indented"),
        pytest.param(json.dumps(CONFIG_DATA), id="json-one-line"),
    ],
)
def test_renderer_output_reads_back(text):
    assert parse_document(text).value == CONFIG_DATA


def test_plain_key_with_colon_and_line_numbers():
    document = parse_document(
        "# head\nload_balancer:\n    config:\n        gpu_weights:\n"
        "            gpu:0: 1.0\n            'gpu:1': 0.5  # second\n"
    )
    assert document.value == {
        "load_balancer": {"config": {"gpu_weights": {"gpu:0": 1.0, "gpu:1": 0.5}}}
    }
    assert document.line_of[("load_balancer", "config", "gpu_weights", "gpu:1")] == 6
    assert document.line_of[("load_balancer",)] == 2


def test_sequence_at_key_indent_and_scalars():
    document = parse_document(
        "items:\n- a\n-   b: 'it''s'\n    c: \"x\\ty\"\n- ~\n- -3\n- 1.5e3\nlast: TRUE\n"
    )
    assert document.value == {
        "items": ["a", {"b": "it's", "c": "x\ty"}, None, -3, 1500.0],
        "last": True,
    }


def test_multi_line_flow_mapping_keeps_line_numbers():
    document = parse_document('weights: {\n  "gpu:0": 1.0,\n  "gpu:1": 2\n}\n')
    assert document.value == {"weights": {"gpu:0": 1.0, "gpu:1": 2}}
    assert document.line_of[("weights", "gpu:1")] == 3


@pytest.mark.parametrize(
    ("text", "line_number", "message"),
    [
        ("a: 1\nb: |\n  text\n", 2, "block scalars (| or >) are not supported"),
        ("a: &x 1\nb: *x\n", 1, "anchors are not supported: '&x 1'"),
        ("a: 1\nb: *x\n", 2, "aliases are not supported: '*x'"),
        ("a: !!str 1\n", 1, "tags are not supported: '!!str 1'"),
        ("a: 1\n---\nb: 2\n", 2, "several documents in one file are not supported"),
        ('a: "open\n', 1, 'unterminated " quoted string'),
        ("a: {b: 1\nc: 2\n", 1, "flow collection is never closed"),
        ("a: 1\njust words\n", 2, "expected 'key: value', got 'just words'"),
        ("a:\n  - 1\n  b: 2\n", 3, "unexpected indentation"),
        ("words\nb: 2\n", 2, "cannot place this line: 'b: 2'"),
        ("a: [1, 2\n  , ]\n", 2, "an empty entry in a flow collection"),
        ('a: "\\q"\n', 1, "unknown escape \\q in a quoted string"),
        ("1: a\n", 1, "mapping keys must be strings, got '1'"),
    ],
)
def test_unreadable_text_is_refused_with_line(text, line_number, message):
    with pytest.raises(YamlSubsetError) as raised:
        parse_document(text)
    assert (raised.value.line_number, raised.value.message) == (line_number, message)


SAFE_TEXT = st.text(
    alphabet="abcdxyzABC_-./:*# '\"@",
    min_size=0,
    max_size=12,
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
    | SAFE_TEXT
)
KEYS = st.text(alphabet="abcxyz_.:*-", min_size=1, max_size=10)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(KEYS, VALUES, min_size=1, max_size=5), st.booleans(), st.sampled_from([2, 4])
)
def test_reads_what_pyyaml_writes(data, flow, indent):
    text = yaml.safe_dump(data, default_flow_style=flow, indent=indent, width=10_000)
    assert parse_document(text).value == yaml.safe_load(text)
