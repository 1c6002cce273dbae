"""The synthetic chat load (lingbot_fleet.lingbot.chat_load) and module lingbot_chat_load, against
a small chat server in this process on loopback."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from malformed_support import role_module, run_module

from lingbot_fleet.lingbot import layout as lingbot_layout
from lingbot_fleet.lingbot.chat_load import (
    CHAT_PATH,
    ChatLoadError,
    LoadSettings,
    empty_load,
    instances_from_plan,
    measure_instance,
    measure_instances,
    nearest_rank,
    reference_prompt,
    time_summary,
)

RESULT_KEYS = {
    "requests_sent",
    "ok",
    "server_errors",
    "no_answer",
    "client_errors",
    "error_rate_percent",
    "latency_ms",
    "first_token_ms",
    "first_errors",
    "not_sent",
    "duration_s",
}
FAST = LoadSettings(requests=6, first_token_requests=3, concurrency=2, request_timeout_s=5.0)


@dataclass
class ChatServer:
    """What the test server does: a delay per max_tokens (seconds), the request numbers
    (1-based, in arrival order) answered 503, the key it wants (empty: none); what it saw."""

    delay_s_by_max_tokens: dict[int, float] = field(default_factory=dict)
    failing_requests: set[int] = field(default_factory=set)
    api_key: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    port: int = 0
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def handler_for(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return None

        def answer(self, status: int, document: dict[str, Any]) -> None:
            payload = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with server.lock:
                server.bodies.append(body)
                server.authorizations.append(self.headers.get("Authorization"))
                number = len(server.bodies)
            if self.path != CHAT_PATH:
                self.answer(404, {"error": {"message": "not found"}})
            elif server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                self.answer(401, {"error": {"message": "invalid api key"}})
            elif number in server.failing_requests:
                self.answer(503, {"error": {"message": "overloaded, try again"}})
            else:
                with server.lock:
                    server.in_flight += 1
                    server.most_in_flight = max(server.most_in_flight, server.in_flight)
                time.sleep(server.delay_s_by_max_tokens.get(body["max_tokens"], 0.0))
                with server.lock:
                    server.in_flight -= 1
                choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}}
                self.answer(200, {"choices": [choice]})

    return Handler


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(server))
    httpd.daemon_threads = True
    server.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_nearest_rank_percentiles_are_measured_values() -> None:
    values = [float(value) for value in range(1, 21)]
    assert nearest_rank(values, 50) == 10.0
    assert nearest_rank(values, 95) == 19.0
    assert nearest_rank(values, 100) == 20.0
    assert nearest_rank([7.0], 95) == 7.0
    assert nearest_rank([], 50) is None
    assert time_summary([3.04, 1.0, 2.0]) == {"p50": 2.0, "p95": 3.0, "max": 3.0, "count": 3}
    assert time_summary([]) == {"p50": None, "p95": None, "max": None, "count": 0}


def test_the_reference_prompt_is_deterministic_with_the_words_asked_for() -> None:
    assert len(reference_prompt(128).split()) == 128
    assert reference_prompt(128) == reference_prompt(128)
    assert reference_prompt(3) == "summarize the state"


def test_settings_problems_name_the_variable_or_option() -> None:
    assert LoadSettings().problems() == []
    settings = LoadSettings(requests=0, concurrency=65, max_tokens=2.5, max_duration_s=0)  # type: ignore[arg-type]
    assert settings.problems() == [
        "rollout_gate_load_requests (option requests) must be a whole number from 1 to "
        "10000, not 0",
        "rollout_gate_load_concurrency (option concurrency) must be a whole number from 1 to "
        "64, not 65",
        "option max_tokens must be a whole number from 1 to 4096, not 2.5",
        "rollout_gate_load_max_duration_s (option max_duration_s) must be a number from 0.1 "
        "to 3600, not 0",
    ]
    with pytest.raises(ValueError, match="rollout_gate_load_requests"):
        measure_instance("127.0.0.1", 1, LoadSettings(requests=0))


def test_a_healthy_instance_counts_and_times_both_kinds(chat_server: ChatServer) -> None:
    chat_server.delay_s_by_max_tokens = {16: 0.12, 1: 0.01}
    settings = LoadSettings(requests=10, first_token_requests=5, concurrency=3)
    result = measure_instance("127.0.0.1", chat_server.port, settings)
    assert set(result) == RESULT_KEYS
    assert {key: result[key] for key in ("requests_sent", "ok", "not_sent")} == {
        "requests_sent": 15,
        "ok": 15,
        "not_sent": 0,
    }
    assert (result["server_errors"], result["no_answer"], result["client_errors"]) == (0, 0, 0)
    assert result["error_rate_percent"] == 0.0
    assert result["first_errors"] == []
    latency, first_token = result["latency_ms"], result["first_token_ms"]
    assert (latency["count"], first_token["count"]) == (10, 5)
    assert 120 <= latency["p50"] <= latency["p95"] <= latency["max"]
    assert 10 <= first_token["p50"] <= first_token["p95"] < latency["p50"]
    # Three at a time, seen by the server (not timed: a loaded machine stretches times).
    assert chat_server.most_in_flight == 3
    assert result["duration_s"] >= 0.4  # 10 x 0.12 s over three threads at the least
    max_tokens = [body["max_tokens"] for body in chat_server.bodies]
    assert sorted(max_tokens) == [1] * 5 + [16] * 10
    assert 1 in max_tokens[:6] and 1 in max_tokens[-6:]  # interleaved, not bunched
    for body in chat_server.bodies:
        assert body["stream"] is False
        assert len(body["messages"][0]["content"].split()) == 128
    assert chat_server.authorizations == [None] * 15


def test_server_errors_are_counted_with_the_first_ones(chat_server: ChatServer) -> None:
    chat_server.failing_requests = {2, 5}
    result = measure_instance("127.0.0.1", chat_server.port, FAST)
    assert (result["requests_sent"], result["ok"], result["server_errors"]) == (9, 7, 2)
    assert result["error_rate_percent"] == round(2 / 9 * 100, 3)
    assert result["latency_ms"]["count"] + result["first_token_ms"]["count"] == 7
    assert len(result["first_errors"]) == 2
    for line in result["first_errors"]:
        assert "status 503: " in line and "overloaded, try again" in line


def test_the_api_key_is_sent_as_a_bearer_token(chat_server: ChatServer) -> None:
    chat_server.api_key = "s3cret"
    result = measure_instance("127.0.0.1", chat_server.port, FAST, api_key="s3cret")
    assert (result["ok"], result["client_errors"]) == (9, 0)
    assert chat_server.authorizations == ["Bearer s3cret"] * 9
    refused = measure_instance("127.0.0.1", chat_server.port, FAST)
    assert (refused["ok"], refused["client_errors"], refused["error_rate_percent"]) == (0, 9, 100.0)
    assert len(refused["first_errors"]) == 3
    assert "status 401: " in refused["first_errors"][0]
    assert refused["latency_ms"] == {"p50": None, "p95": None, "max": None, "count": 0}


def test_a_closed_port_is_no_answer() -> None:
    port = closed_port()
    result = measure_instance("127.0.0.1", port, FAST)
    assert (result["requests_sent"], result["no_answer"], result["ok"]) == (9, 9, 0)
    assert result["error_rate_percent"] == 100.0
    assert result["first_token_ms"]["p95"] is None
    assert result["first_errors"][0].startswith(f"reference request: no answer on 127.0.0.1:{port}")


def test_requests_past_the_duration_are_not_sent(chat_server: ChatServer) -> None:
    chat_server.delay_s_by_max_tokens = {16: 0.3}
    settings = LoadSettings(requests=10, first_token_requests=0, concurrency=1, max_duration_s=0.1)
    result = measure_instance("127.0.0.1", chat_server.port, settings)
    assert (result["requests_sent"], result["ok"], result["not_sent"]) == (1, 1, 9)
    assert result["error_rate_percent"] == 0.0
    assert len(chat_server.bodies) == 1


def test_instances_are_measured_in_turn_and_pooled(chat_server: ChatServer) -> None:
    chat_server.failing_requests = {1}
    load = measure_instances(
        [{"name": "numa0", "port": chat_server.port}, {"name": "numa1", "port": closed_port()}],
        "127.0.0.1",
        FAST,
    )
    assert sorted(load["instances"]) == ["numa0", "numa1"]
    numa0, numa1, node = load["instances"]["numa0"], load["instances"]["numa1"], load["node"]
    assert set(node) == RESULT_KEYS
    assert (numa0["ok"], numa0["server_errors"], numa1["no_answer"]) == (8, 1, 9)
    assert (node["requests_sent"], node["ok"], node["server_errors"], node["no_answer"]) == (
        18,
        8,
        1,
        9,
    )
    assert node["error_rate_percent"] == round(10 / 18 * 100, 3)
    counts = numa0["latency_ms"]["count"] + numa0["first_token_ms"]["count"]
    assert node["latency_ms"]["count"] + node["first_token_ms"]["count"] == counts == 8
    assert node["first_errors"][0].startswith("numa0: ")
    assert node["first_errors"][1].startswith("numa1: ")
    assert len(node["first_errors"]) == 3
    json.dumps(load)  # plain data


def test_no_instance_gives_the_empty_load() -> None:
    assert measure_instances([], "127.0.0.1", FAST) == empty_load()
    assert empty_load()["node"]["requests_sent"] == 0
    assert empty_load()["node"]["error_rate_percent"] is None


def test_instances_come_from_the_plan() -> None:
    plan = {
        "instances": [
            {"name": "numa0", "port": 8000, "gpus": [0, 1]},
            {"name": "numa1", "port": 8001},
        ]
    }
    assert instances_from_plan(json.dumps(plan)) == [
        {"name": "numa0", "port": 8000},
        {"name": "numa1", "port": 8001},
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "/etc/lingbot/plan.json is not JSON"),
        ("[]", "/etc/lingbot/plan.json is not a plan: it holds a list, not an object"),
        ("{}", "/etc/lingbot/plan.json is not a plan: it has no instances list"),
        ('{"instances": {}}', "/etc/lingbot/plan.json: instances must be a list, not dict"),
        ('{"instances": [{"port": 8000}]}', "/etc/lingbot/plan.json: instance 0 has no name"),
        (
            '{"instances": [{"name": "main", "port": 70000}]}',
            "/etc/lingbot/plan.json: instance main has port 70000; a port is a whole number "
            "from 1 to 65535",
        ),
        (
            '{"instances": [{"name": "a", "port": 1}, {"name": "a", "port": 2}]}',
            "/etc/lingbot/plan.json: instance a is listed twice",
        ),
    ],
)
def test_a_broken_plan_names_the_file_and_the_fault(text: str, problem: str) -> None:
    with pytest.raises(ChatLoadError) as raised:
        instances_from_plan(text)
    assert str(raised.value).startswith(problem)


# --- module lingbot_chat_load -------------------------------------------------------------

MODULE = role_module("rollout_gate", "lingbot_chat_load")
MODULE_SETTINGS = {"requests": 4, "first_token_requests": 2, "request_timeout_s": 5.0}


def write_plan(root: Path, text: str) -> None:
    path = root / lingbot_layout.PLAN_PATH.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text(text)


def test_the_module_loads_the_plans_instances(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, chat_server: ChatServer
) -> None:
    write_plan(tmp_path, json.dumps({"instances": [{"name": "main", "port": chat_server.port}]}))
    result = run_module(monkeypatch, MODULE, {"root": str(tmp_path), **MODULE_SETTINGS})
    assert not result["failed"], result
    assert (result["changed"], result["plan_found"], result["skipped_in_check_mode"]) == (
        False,
        True,
        False,
    )
    assert sorted(result["load"]) == ["instances", "node"]
    main = result["load"]["instances"]["main"]
    assert (main["requests_sent"], main["ok"]) == (6, 6)
    assert result["load"]["node"]["requests_sent"] == 6
    assert result["msg"].startswith("measured main: 6 requests, error rate 0.0%")


def test_the_module_measures_the_instances_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.api_key = "k"
    args = {"instances": [{"name": "x", "port": chat_server.port}], "api_key": "k"}
    result = run_module(monkeypatch, MODULE, {"root": str(tmp_path), **MODULE_SETTINGS, **args})
    assert result["plan_found"] is None
    assert result["load"]["instances"]["x"]["ok"] == 6
    assert set(chat_server.authorizations) == {"Bearer k"}


def test_a_node_without_a_plan_measures_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result = run_module(monkeypatch, MODULE, {"root": str(tmp_path)})
    assert not result["failed"], result
    assert (result["plan_found"], result["load"]) == (False, empty_load())
    assert result["msg"] == "no LingBot instance to measure"


def test_check_mode_sends_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, chat_server: ChatServer
) -> None:
    write_plan(tmp_path, json.dumps({"instances": [{"name": "main", "port": chat_server.port}]}))
    result = run_module(monkeypatch, MODULE, {"root": str(tmp_path)}, check_mode=True)
    assert (result["skipped_in_check_mode"], result["plan_found"]) == (True, True)
    assert result["load"] == empty_load()
    assert chat_server.bodies == []


def test_the_module_fails_on_bad_settings_and_a_broken_plan(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result = run_module(monkeypatch, MODULE, {"root": str(tmp_path), "concurrency": 0})
    assert result["failed"]
    assert result["msg"] == (
        "invalid chat load settings: rollout_gate_load_concurrency (option concurrency) must "
        "be a whole number from 1 to 64, not 0"
    )
    write_plan(tmp_path, "{not json")
    result = run_module(monkeypatch, MODULE, {"root": str(tmp_path)})
    assert result["failed"]
    assert result["msg"].startswith("/etc/lingbot/plan.json is not JSON")
