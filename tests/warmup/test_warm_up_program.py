"""The warm-up program (lingbot_fleet.lingbot.warmup) that each LingBot unit runs around its start:
``gpus`` through the lab's libcuda, ``ready`` against a server on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from facts_support import cuda_library
from native_support import flatten, scenario_state, write_lab_root

from lingbot_fleet.lingbot import warmup

PROGRAM = Path(warmup.__file__)


def run_program(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The program as the unit runs it: the file alone, under a plain Python."""
    return subprocess.run(
        [sys.executable, "-I", str(PROGRAM), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def lab_gpus(tmp_path: Path):
    def node(scenario: str, visible: str = "0,1") -> dict[str, str]:
        root = write_lab_root(tmp_path / scenario, flatten(scenario_state(scenario)))
        return {
            "LINGBOT_LAB_ROOT": str(root),
            "CUDA_VISIBLE_DEVICES": visible,
            "PATH": "/usr/bin:/bin",
        }

    return node


def warm_gpus(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``gpus`` through the lab's libcuda."""
    return run_program("gpus", *args, "--cuda-library", str(cuda_library()), env=env)


def test_the_program_imports_nothing_but_the_standard_library() -> None:
    # Installed on the nodes as one file: no import of the package may reach it.
    imports = [
        line for line in PROGRAM.read_text().splitlines() if line.startswith(("import ", "from "))
    ]
    assert imports
    assert not [line for line in imports if "lingbot_fleet" in line or line.startswith("from .")]


@pytest.mark.native
def test_gpus_makes_contexts_and_checks_each_planned_pair(lab_gpus) -> None:
    env = lab_gpus("phb")
    done = warm_gpus(env, "--peer-pairs", "0:1,1:0")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert any(
        line.startswith("lingbot-fleet warm-up: GPU ordinal 0: context and memset in")
        for line in lines
    )
    assert any("GPU ordinal 1: context and memset in" in line for line in lines)
    assert any(
        "peer pair 0->1: peer access on, 1048576-byte copy checked" in line for line in lines
    )
    assert any("peer pair 1->0: peer access on" in line for line in lines)


@pytest.mark.native
def test_gpus_stops_the_start_when_a_peer_copy_loses_writes(lab_gpus) -> None:
    env = lab_gpus("iommu-drop")
    done = warm_gpus(env, "--peer-pairs", "0:1")
    assert done.returncode == 1
    assert "peer pair 0->1: a 1048576-byte peer copy arrived with" in done.stderr
    assert "loses peer writes" in done.stderr


@pytest.mark.native
def test_gpus_reports_a_pair_without_peer_access_and_goes_on(lab_gpus) -> None:
    env = lab_gpus("noacpi")
    done = warm_gpus(env, "--peer-pairs", "0:1")
    assert done.returncode == 0, done.stderr
    assert "peer pair 0->1: the driver reports no peer access" in done.stderr


@pytest.mark.native
def test_gpus_names_a_gpu_that_cannot_take_a_context(lab_gpus) -> None:
    env = lab_gpus("lost")
    done = warm_gpus(env)
    assert done.returncode == 1
    assert "GPU ordinal 1: cuDevicePrimaryCtxRetain failed with CUDA_ERROR_DEVICE_UNAVAILABLE" in (
        done.stderr
    )


@pytest.mark.native
def test_a_pair_outside_the_visible_gpus_is_refused(lab_gpus) -> None:
    env = lab_gpus("phb", visible="0")
    done = warm_gpus(env, "--peer-pairs", "0:1")
    assert done.returncode == 1
    assert "names an ordinal the driver does not list: it lists 1 GPU(s)" in done.stderr


def test_bad_pairs_are_refused_with_the_entry_named() -> None:
    done = run_program("gpus", "--peer-pairs", "0:1,2-3")
    assert done.returncode == 2
    assert "peer pair '2-3' is not SOURCE:TARGET of two CUDA ordinals" in done.stderr


def test_without_a_driver_the_start_stops_with_the_library_named(tmp_path: Path) -> None:
    done = run_program("gpus", "--cuda-library", str(tmp_path / "libcuda.so.1"))
    assert done.returncode == 1
    assert "cannot load the CUDA driver" in done.stderr


# --- ready ----------------------------------------------------------------------------------


class SlowFirstServer(BaseHTTPRequestHandler):
    """/metrics at once; chat completions: the first slow, then fast (or always 503)."""

    first_chat_s = 0.5
    chat_status = 200
    chats: list[dict]
    headers_seen: list[str]

    def log_message(self, format: str, *args: object) -> None:
        del format, args

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(200, b'lingbot_balancer_weight{gpu="gpu:0"} 1.0\n')

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.chats.append(body)
        self.headers_seen.append(self.headers.get("Authorization", ""))
        if self.chat_status != 200:
            self._answer(self.chat_status, b'{"error": {"message": "busy"}}')
            return
        if len(self.chats) == 1:
            time.sleep(self.first_chat_s)
        self._answer(200, json.dumps({"choices": [{"index": 0}]}).encode())


@pytest.fixture
def server() -> Iterator[tuple[ThreadingHTTPServer, type[SlowFirstServer]]]:
    handler = type("Handler", (SlowFirstServer,), {"chats": [], "headers_seen": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, handler
    httpd.shutdown()
    httpd.server_close()


def test_ready_warms_until_two_answers_agree(server) -> None:
    httpd, handler = server
    port = str(httpd.server_address[1])
    done = run_program("ready", "--port", port, "--timeout-s", "20", env={"LINGBOT_API_KEY": "k1"})
    assert done.returncode == 0, done.stderr
    assert len(handler.chats) == 3, "slow first, then two that agree"
    assert all(chat["max_tokens"] == 1 for chat in handler.chats)
    assert handler.headers_seen == ["Bearer k1"] * 3
    assert f"127.0.0.1:{port} ready: one-token chat completions in" in done.stderr


def test_ready_fails_when_the_server_never_answers(server) -> None:
    httpd, handler = server
    handler.chat_status = 503
    done = run_program("ready", "--port", str(httpd.server_address[1]), "--timeout-s", "1.5")
    assert done.returncode == 1
    assert "answered no one-token chat completion in 1.5 s" in done.stderr
    assert "POST /v1/chat/completions answered 503" in done.stderr


def test_ready_fails_at_once_on_a_refused_request(server) -> None:
    httpd, handler = server
    handler.chat_status = 401
    started_s = time.monotonic()
    done = run_program("ready", "--port", str(httpd.server_address[1]), "--timeout-s", "30")
    assert done.returncode == 1
    assert time.monotonic() - started_s < 10
    assert "answered 401" in done.stderr


def test_ready_waits_for_metrics_then_gives_up_naming_the_port() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = run_program("ready", "--port", str(port), "--timeout-s", "1")
    assert done.returncode == 1
    assert f"127.0.0.1:{port} did not answer GET /metrics with 200 in 1 s" in done.stderr


def test_the_api_key_goes_only_to_an_address_of_this_node() -> None:
    assert warmup.key_may_go_to("127.0.0.1")
    assert warmup.key_may_go_to("localhost")
    # TEST-NET-1 (RFC 5737): no node has it, so the request must not leave with the key.
    assert not warmup.key_may_go_to("192.0.2.1")
    refused = r"not sending LINGBOT_API_KEY to 192\.0\.2\.1:8000"
    with pytest.raises(warmup.WarmUpError, match=refused):
        warmup.request("192.0.2.1", 8000, "POST", warmup.CHAT_PATH, timeout_s=1.0, api_key="k")
