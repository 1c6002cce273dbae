"""The stand-in LingBot server accepts a good config, listens and serves its endpoints."""

from __future__ import annotations

import json
import socket

from prometheus_client.parser import text_string_to_metric_families


def samples(metrics_text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    parsed = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            parsed[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return parsed


def chat_body(content: str, **extra: object) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": content}], **extra}).encode()


def test_good_config_is_served_with_metrics_chat_and_clean_stop(fake_node, start_server):
    server = start_server(fake_node.base_args())

    status, text = server.post("/v1/chat/completions", chat_body("how fast is PHB"))
    assert status == 200
    answer = json.loads(text)
    assert answer["object"] == "chat.completion"
    assert answer["id"].startswith("chatcmpl-")
    assert answer["model"] == "model"
    assert answer["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "LingBot stand-in reply from gpu:0: how fast is PHB",
            },
            "finish_reason": "stop",
        }
    ]
    assert answer["usage"] == {"prompt_tokens": 4, "completion_tokens": 9, "total_tokens": 13}

    status, text = server.post("/v1/chat/completions", b'{"messages": []}')
    assert status == 400
    assert json.loads(text)["error"] == {
        "message": "messages must be a non-empty list of {role, content}",
        "type": "invalid_request_error",
        "param": "messages",
        "code": None,
    }

    status, metrics_text = server.get("/metrics")
    assert status == 200
    assert "# HELP lingbot_balancer_weight " in metrics_text
    assert "# TYPE lingbot_balancer_weight gauge" in metrics_text
    metrics = samples(metrics_text)
    assert metrics[("lingbot_balancer_weight", (("gpu", "gpu:0"),))] == 1.0
    assert metrics[("lingbot_balancer_weight", (("gpu", "gpu:1"),))] == 0.85
    assert metrics[("lingbot_gpus", ())] == 2
    assert metrics[("lingbot_peer_links_usable", ())] == 2
    assert metrics[("lingbot_peer_access_threshold_gbits_per_s", ())] == 200.0
    assert metrics[("lingbot_requests_total", (("code", "200"),))] == 1
    assert metrics[("lingbot_requests_total", (("code", "400"),))] == 1
    assert metrics[("lingbot_warm", ())] == 1
    info_labels = dict(
        next(key[1] for key in metrics if key[0] == "lingbot_info"),
    )
    assert info_labels["version"] == "0.4.2"
    assert info_labels["gpus"] == "gpu:0,gpu:1"
    assert info_labels["primary"] == "gpu:0"

    assert server.stop() == 0
    log = server.stderr()
    assert " INFO serving on gpu:0 (0000:81:00.0, NUMA node 0)" in log
    assert " INFO serving on gpu:1 (0000:c1:00.0, NUMA node 0)" in log
    assert log.index("serving on gpu:0") < log.index("serving on gpu:1")
    assert (
        "route_decision gpu:1->gpu:0 path_type=PHB bandwidth_gbps=220.8 latency_ns=135"
        " threshold_gbps=200 peer_access=on"
    ) in log
    assert "route_decision request=chatcmpl-" in log
    assert " INFO SIGTERM received; shutting down" in log
    assert log.rstrip().endswith("INFO stopped")
    assert all(line[:4].isdigit() for line in log.splitlines()), "one record per line"


def test_adaptive_balancer_spreads_requests_by_weight(fake_node, start_server):
    server = start_server(fake_node.base_args())
    replies = []
    for _ in range(4):
        status, text = server.post("/v1/chat/completions", chat_body("hi"))
        assert status == 200
        replies.append(json.loads(text)["choices"][0]["message"]["content"])
    assert replies == [
        "LingBot stand-in reply from gpu:0: hi",
        "LingBot stand-in reply from gpu:1: hi",
        "LingBot stand-in reply from gpu:0: hi",
        "LingBot stand-in reply from gpu:1: hi",
    ]


def test_max_tokens_cuts_the_answer(fake_node, start_server):
    server = start_server(fake_node.base_args())
    status, text = server.post("/v1/chat/completions", chat_body("a b c", max_tokens=3))
    assert status == 200
    answer = json.loads(text)
    assert answer["choices"][0]["message"]["content"] == "LingBot stand-in reply"
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 3


def test_command_line_threshold_overrides_config(fake_node, start_server):
    # 30 GB/s = 240 Gbit/s: above both measured links (227.2, 220.8), so none is usable
    server = start_server([*fake_node.base_args(), "--peer-access-threshold", "30"])
    metrics = samples(server.get("/metrics")[1])
    assert metrics[("lingbot_peer_links_usable", ())] == 0
    assert metrics[("lingbot_peer_access_threshold_gbits_per_s", ())] == 240.0
    assert server.stop() == 0
    log = server.stderr()
    assert (
        "peer-access threshold 30 GB/s = 240 Gbit/s (from --peer-access-threshold;"
        " config.yaml p2p_threshold_gbps: 200 Gbit/s)"
    ) in log
    assert "peer_access=off (below threshold, host-staged)" in log


def test_threshold_at_link_bandwidth_keeps_the_link(fake_node, start_server):
    # 27.6 GB/s = 220.8 Gbit/s: exactly gpu:1->gpu:0, which is not below it
    server = start_server([*fake_node.base_args(), "--peer-access-threshold", "27.6"])
    assert samples(server.get("/metrics")[1])[("lingbot_peer_links_usable", ())] == 2


def test_balancer_config_file_overrides_config(fake_node, start_server):
    balancer_path = fake_node.write_config(
        "load_balancer:\n  type: adaptive\n  config:\n"
        '    gpu_weights: {"gpu:0": 0.5, "gpu:1": 1.0}\n',
        "balancer.yaml",
    )
    server = start_server([*fake_node.base_args(), "--balancer-config", str(balancer_path)])
    metrics = samples(server.get("/metrics")[1])
    assert metrics[("lingbot_balancer_weight", (("gpu", "gpu:0"),))] == 0.5
    assert metrics[("lingbot_balancer_weight", (("gpu", "gpu:1"),))] == 1.0


def test_round_robin_weighs_every_gpu_one(fake_node, start_server, good_config):
    fake_node.write_config(good_config.replace("type: adaptive", "type: round_robin"))
    server = start_server(fake_node.base_args())
    metrics = samples(server.get("/metrics")[1])
    assert metrics[("lingbot_balancer_weight", (("gpu", "gpu:0"),))] == 1.0
    assert metrics[("lingbot_balancer_weight", (("gpu", "gpu:1"),))] == 1.0
    assert server.stop() == 0
    assert "load_balancer type round_robin ignores gpu_weights" in server.stderr()


def test_json_config_is_accepted(fake_node, start_server):
    config = {
        "hardware_profile": {
            "gpu_topology": [{"gpu_id": 1, "bus_id": "0000:C1:00.0", "peer_links": []}],
            "layer_affinity": {"layers.*": "gpu:1"},
        },
        "load_balancer": {"type": "round_robin", "config": {"gpu_weights": {}}},
        "debug_mode": False,
    }
    fake_node.write_config(json.dumps(config, indent=2))
    args = fake_node.base_args()
    args[args.index("--gpus") : args.index("--gpus") + 2] = ["--device", "gpu:1"]
    server = start_server(args)
    metrics = samples(server.get("/metrics")[1])
    assert metrics[("lingbot_gpus", ())] == 1
    assert metrics[("lingbot_balancer_weight", (("gpu", "gpu:1"),))] == 1.0
    assert metrics[("lingbot_peer_links_usable", ())] == 0
    assert server.stop() == 0
    log = server.stderr()
    assert "serving on gpu:1 (0000:c1:00.0, NUMA node 0)" in log
    assert "route_decision" not in log


def test_uuid_visible_devices_map_ordinals(fake_node, start_server, good_config):
    # CUDA ordinal 0 is the second driver GPU here, so config gpu_id 0 must carry its bus id
    fake_node.env["CUDA_VISIBLE_DEVICES"] = "GPU-7c1e2a90,GPU-3b5d6f1e"
    fake_node.write_config(
        good_config.replace('"0000:81:00.0"', '"0000:xx"')
        .replace("'0000:c1:00.0'", "'0000:81:00.0'")
        .replace('"0000:xx"', '"0000:c1:00.0"')
    )
    server = start_server(fake_node.base_args())
    assert server.stop() == 0
    assert "gpu:0 is GPU-7c1e2a90-4b3d-4f6e-8a21-5d9c0e7f3a22 at 0000:c1:00.0" in server.stderr()


def test_unbound_process_is_warned_about(fake_node, start_server):
    fake_node.env["LINGBOT_LAB_NUMACTL_REQUEST"] = "--cpunodebind=1 --membind=1"
    server = start_server(fake_node.base_args())
    assert server.stop() == 0
    assert (
        " WARNING process is not bound to NUMA node 0 of its GPUs"
        " (LINGBOT_LAB_NUMACTL_REQUEST=--cpunodebind=1 --membind=1);"
        " run it under numactl --cpunodebind=0 --membind=0"
    ) in server.stderr()


def test_journal_lines_carry_syslog_priority(fake_node, start_server):
    fake_node.env["JOURNAL_STREAM"] = "8:12345"
    fake_node.env["CUDA_DEVICE_ORDER"] = "FASTEST_FIRST"
    server = start_server(fake_node.base_args())
    assert server.stop() == 0
    lines = server.stderr().splitlines()
    assert "<6>INFO serving on gpu:0 (0000:81:00.0, NUMA node 0)" in lines
    assert (
        "<4>WARNING CUDA_DEVICE_ORDER is FASTEST_FIRST; set CUDA_DEVICE_ORDER=PCI_BUS_ID so"
        " CUDA ordinals, NVML indices and nvidia-smi agree"
    ) in lines


def test_readiness_is_metrics_and_a_one_token_chat_completion(fake_node, start_server):
    server = start_server(fake_node.base_args())
    assert server.get("/metrics")[0] == 200
    status, text = server.post("/v1/chat/completions", chat_body("ping", max_tokens=1))
    assert status == 200
    answer = json.loads(text)
    assert answer["choices"][0]["message"]["content"] == "LingBot"
    assert answer["usage"]["completion_tokens"] == 1


def test_there_is_no_health_endpoint(fake_node, start_server):
    server = start_server(fake_node.base_args())
    status, text = server.get("/health")
    assert status == 404
    assert json.loads(text)["error"]["message"] == "no endpoint /health"


def test_host_and_port_are_where_it_listens(fake_node, start_server):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = fake_node.base_args()
    args[args.index("--port") + 1] = str(port)
    server = start_server(args)
    assert server.base_url == f"http://127.0.0.1:{port}"
    assert server.get("/metrics")[0] == 200
