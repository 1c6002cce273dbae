"""The lingbot_answers reading (lingbot_fleet.lingbot.service_reading) against real sockets: an
instance that answers, one that fails, one that hangs, one that is gone."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from lingbot_fleet.lingbot import service_reading
from lingbot_fleet.lingbot.warmup import READY_METRIC


class Metrics(http.server.BaseHTTPRequestHandler):
    status = 200
    body = f'# TYPE {READY_METRIC} gauge\n{READY_METRIC}{{gpu="0"}} 1.0\n'

    def do_GET(self) -> None:
        payload = self.body.encode()
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *_: object) -> None:
        pass


class Failing(Metrics):
    status = 503
    body = "warming up\n"


class Foreign(Metrics):
    body = "some_other_server_metric 1\n"


@pytest.fixture
def ports() -> Iterator[dict[str, int]]:
    """kind -> port: LingBot answering, failing (503), another server, one that accepts
    connections (the kernel's backlog) and never answers as a stopped process, and none."""
    servers = {
        kind: http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        for kind, handler in (("answering", Metrics), ("failing", Failing), ("foreign", Foreign))
    }
    for server in servers.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    hanging = socket.socket()
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(8)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    found = {kind: server.server_address[1] for kind, server in servers.items()}
    found |= {"hanging": hanging.getsockname()[1], "closed": closed.getsockname()[1]}
    closed.close()
    try:
        yield found
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()
        hanging.close()


def test_only_an_instance_serving_lingbots_metrics_reads_as_answering(
    monkeypatch: pytest.MonkeyPatch, ports: dict[str, int]
) -> None:
    monkeypatch.setattr(service_reading, "TIMEOUT_S", 0.5)
    recorded = {service_reading.address("127.0.0.1", port): True for port in ports.values()}
    found = service_reading.answers(recorded)
    assert {kind: found[f"127.0.0.1:{port}"] for kind, port in ports.items()} == {
        "answering": True,
        "failing": False,
        "foreign": False,
        "hanging": False,
        "closed": False,
    }
    assert service_reading.answers({"not-an-address": True}) == {"not-an-address": False}
