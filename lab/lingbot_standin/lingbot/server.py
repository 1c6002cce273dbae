"""The LingBot server process: start-up checks, HTTP endpoints, CUDA on first use, clean stop.

Run: ``python3 -m lingbot --config config.yaml --model-path DIR --gpus 0,1`` (or
``bin/lingbot-server``). It listens on ``--host`` (default 0.0.0.0) and ``--port``
(default 8000; 0 picks a free port) and prints ``LingBot 0.4.2 listening on
http://HOST:PORT`` on stdout once listening.

Endpoints, as LingBot documents them: ``POST /v1/chat/completions`` (OpenAI-style; the
answer is deterministic and tokens are counted as whitespace-separated words) and
``GET /metrics`` (Prometheus text, 200 from the start). There is no health endpoint:
readiness is ``/metrics`` answering 200 and a one-token chat completion succeeding.

CUDA comes up on the first chat completion (contexts, peer access, path timing;
lingbot/peerprobe.py), so that request carries the driver's first-use costs: nothing
warms the GPUs but a request. Requests arriving meanwhile wait for it.

Exit status: 0 after SIGTERM or SIGINT; 2 when the command line, config.yaml, the model
directory or the environment breaks LingBot's contract (one ``lingbot: error: ...`` line
on stderr); 1 on a runtime failure (no driver, port in use, GPUs on different NUMA nodes:
``RuntimeError: Multi-GPU inference requires all GPUs on same NUMA node``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import VERSION
from .cli import build_parser, resolve_settings
from .config import ContractError
from .hardware import DriverUnavailableError
from .latency import (
    REFERENCE_GENERATED_TOKENS,
    REFERENCE_PROMPT_TOKENS,
    LatencyModel,
    ring_pairs,
)
from .log import configure_logging
from .peerprobe import CudaUnavailableError, GpuSession, PairRequest
from .startup import Deployment, prepare

MAX_REQUEST_BYTES = 1 << 20
CHAT_ROLES = ("system", "user", "assistant", "tool")
CHAT_PATH = "/v1/chat/completions"


class RequestError(ValueError):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class ServerState:
    """What the handlers share: the deployment, CUDA state, counters, balancer."""

    def __init__(self, deployment: Deployment, log: logging.Logger) -> None:
        self.deployment = deployment
        self.log = log
        self.warm = threading.Event()
        self.latency_model: LatencyModel | None = None
        self.gpu_session: GpuSession | None = None
        self._cuda_lock = threading.Lock()
        self._lock = threading.Lock()
        self.requests_by_code: dict[int, int] = {}
        self._weights = deployment.balancer_weights()
        self._credits = dict.fromkeys(self._weights, 0.0)

    def ensure_cuda(self) -> None:
        """Bring CUDA up once, on the first request that needs it; the others wait."""
        if self.warm.is_set():
            return
        with self._cuda_lock:
            if self.warm.is_set():
                return
            started_s = time.monotonic()
            self.gpu_session, self.latency_model = bring_up_cuda(self.deployment, self.log)
            self.log.info(
                "CUDA up on %s in %.0f ms (first request)",
                ",".join(self.deployment.settings.devices),
                (time.monotonic() - started_s) * 1000,
            )
            self.warm.set()

    def count_request(self, code: int) -> None:
        with self._lock:
            self.requests_by_code[code] = self.requests_by_code.get(code, 0) + 1

    def next_gpu(self) -> str:
        """Smooth weighted round robin over the balancer weights."""
        with self._lock:
            total = sum(self._weights.values())
            for device, weight in self._weights.items():
                self._credits[device] += weight
            chosen = max(self._credits, key=lambda device: self._credits[device])
            self._credits[chosen] -= total
            return chosen


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(state: ServerState) -> str:
    deployment = state.deployment
    settings = deployment.settings
    info_labels = {
        "version": VERSION,
        "model": settings.model_name,
        "primary": settings.devices[0],
        "gpus": ",".join(settings.devices),
        "load_balancer": settings.load_balancer.type,
        "kv_cache_strategy": settings.config.kv_cache_strategy,
        "kv_cache_compression": settings.config.kv_cache_compression,
    }
    info = ",".join(f'{key}="{_label(value)}"' for key, value in info_labels.items())
    lines = [
        "# HELP lingbot_info LingBot build and run information.",
        "# TYPE lingbot_info gauge",
        f"lingbot_info{{{info}}} 1",
        "# HELP lingbot_gpus GPUs this server uses.",
        "# TYPE lingbot_gpus gauge",
        f"lingbot_gpus {len(settings.gpu_ordinals)}",
        "# HELP lingbot_balancer_weight Load-balancer weight per GPU (1.0 unless adaptive).",
        "# TYPE lingbot_balancer_weight gauge",
    ]
    for device, weight in deployment.balancer_weights().items():
        lines.append(f'lingbot_balancer_weight{{gpu="{device}"}} {weight!r}')
    lines += [
        "# HELP lingbot_peer_links_usable Directed GPU peer links at or above the"
        " peer-access threshold.",
        "# TYPE lingbot_peer_links_usable gauge",
        f"lingbot_peer_links_usable {deployment.usable_peer_link_count}",
        "# HELP lingbot_peer_access_threshold_gbits_per_s Peer-access threshold in Gbit/s.",
        "# TYPE lingbot_peer_access_threshold_gbits_per_s gauge",
        f"lingbot_peer_access_threshold_gbits_per_s {settings.peer_access_threshold_gbits_per_s!r}",
        "# HELP lingbot_warm 1 once CUDA is up on every GPU (after the first chat completion).",
        "# TYPE lingbot_warm gauge",
        f"lingbot_warm {1 if state.warm.is_set() else 0}",
        *_latency_metric_lines(state.latency_model),
        "# HELP lingbot_requests_total Chat completion requests by HTTP status code.",
        "# TYPE lingbot_requests_total counter",
    ]
    with state._lock:
        counts = dict(state.requests_by_code)
    counts.setdefault(200, 0)
    for code in sorted(counts):
        lines.append(f'lingbot_requests_total{{code="{code}"}} {counts[code]}')
    return "\n".join(lines) + "\n"


def _latency_metric_lines(model: LatencyModel | None) -> list[str]:
    lines = [
        "# HELP lingbot_latency_model_active 1 when request times follow the measured"
        " deployment (the driver answered on the first chat completion), else 0.",
        "# TYPE lingbot_latency_model_active gauge",
        f"lingbot_latency_model_active {0 if model is None else 1}",
    ]
    if model is None:
        return lines
    for name, what, field, unit in (
        ("lingbot_peer_path_gbytes_per_s", "bandwidth", "gbytes_per_s", "GB/s"),
        ("lingbot_peer_path_latency_ns", "latency", "latency_ns", "ns"),
    ):
        help_text = f"Measured {what} of each GPU path in use, {unit}."
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for path in model.paths:
            labels = f'src="{path.source}",dst="{path.target}",path="{path.kind}"'
            lines.append(f"{name}{{{labels}}} {getattr(path, field)!r}")
    reference = (
        f'prompt_tokens="{REFERENCE_PROMPT_TOKENS}",'
        f'completion_tokens="{REFERENCE_GENERATED_TOKENS}"'
    )
    lines += [
        "# HELP lingbot_modelled_request_seconds Modelled time of a chat completion of this"
        " size on this deployment.",
        "# TYPE lingbot_modelled_request_seconds gauge",
        f"lingbot_modelled_request_seconds{{{reference}}} {model.reference_request_s()!r}",
        "# HELP lingbot_modelled_transfer_seconds_per_token GPU-to-GPU transfer time each"
        " generated token adds.",
        "# TYPE lingbot_modelled_transfer_seconds_per_token gauge",
        f"lingbot_modelled_transfer_seconds_per_token {model.exposed_transfer_s_per_token()!r}",
    ]
    return lines


def _words(text: str) -> list[str]:
    return text.split()


def _optional_int(body: dict[str, object], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError(f"{key} must be a positive integer", key)
    return value


def _check_number(body: dict[str, object], key: str, maximum: float) -> None:
    value = body.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= maximum:
        raise RequestError(f"{key} must be a number between 0 and {maximum:g}", key)


def validate_chat_request(body: object) -> tuple[list[dict[str, str]], int | None]:
    """The messages and the requested max tokens; RequestError when malformed."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list of {role, content}", "messages")
    checked: list[dict[str, str]] = []
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        if not isinstance(message, dict):
            raise RequestError(f"{param} must be an object with role and content", param)
        role = message.get("role")
        if role not in CHAT_ROLES:
            raise RequestError(
                f"{param}.role must be one of {', '.join(CHAT_ROLES)}; got {role!r}",
                f"{param}.role",
            )
        content = message.get("content")
        if not isinstance(content, str):
            raise RequestError(f"{param}.content must be a string", f"{param}.content")
        checked.append({"role": role, "content": content})
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("model must be a string", "model")
    if body.get("stream") not in (None, False):
        raise RequestError("stream must be false: this server answers in one response", "stream")
    if body.get("n") not in (None, 1):
        raise RequestError("n must be 1", "n")
    _check_number(body, "temperature", 2.0)
    _check_number(body, "top_p", 1.0)
    max_tokens = _optional_int(body, "max_completion_tokens") or _optional_int(body, "max_tokens")
    return checked, max_tokens


def answer_chat(
    state: ServerState, messages: list[dict[str, str]], max_tokens: int | None
) -> dict[str, object]:
    settings = state.deployment.settings
    state.ensure_cuda()
    limit = min(max_tokens or settings.max_new_tokens, settings.max_new_tokens)
    last_user_text = next(
        (message["content"] for message in reversed(messages) if message["role"] == "user"), ""
    )
    gpu = state.next_gpu()
    reply_words = ["LingBot", "stand-in", "reply", "from", f"{gpu}:", *_words(last_user_text)[:8]]
    finish_reason = "length" if len(reply_words) > limit else "stop"
    reply_words = reply_words[:limit]
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
    request_id = f"chatcmpl-{digest[:24]}"
    if settings.config.debug_mode:
        usable = [f"{r.source}->{r.target}" for r in state.deployment.routes if r.usable]
        state.log.info(
            "route_decision request=%s gpu=%s primary=%s peer_links=%s kv_cache_strategy=%s",
            request_id,
            gpu,
            settings.devices[0],
            ",".join(usable) or "none",
            settings.config.kv_cache_strategy,
        )
    prompt_tokens = sum(len(_words(message["content"])) for message in messages)
    if state.latency_model is not None:
        time.sleep(state.latency_model.request_s(prompt_tokens, len(reply_words)))
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": settings.model_name,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": " ".join(reply_words)},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(reply_words),
            "total_tokens": prompt_tokens + len(reply_words),
        },
    }


def error_payload(status: int, message: str, param: str | None = None) -> dict[str, object]:
    """An OpenAI-shaped error body."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


class LingbotHandler(BaseHTTPRequestHandler):
    server_version = f"LingBot/{VERSION}"
    protocol_version = "HTTP/1.1"
    state: ServerState

    def log_message(self, format: str, *args: object) -> None:
        self.state.log.debug("http %s %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_json(self, status: int, payload: object) -> None:
        self._send(status, json.dumps(payload).encode() + b"\n", "application/json")

    def _send_error(self, status: int, message: str, param: str | None = None) -> None:
        self._send_json(status, error_payload(status, message, param))

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body = render_metrics(self.state).encode()
            self._send(HTTPStatus.OK, body, "text/plain; version=0.0.4; charset=utf-8")
        elif path == CHAT_PATH:
            self._send_error(HTTPStatus.METHOD_NOT_ALLOWED, f"use POST for {CHAT_PATH}")
        else:
            self._send_error(HTTPStatus.NOT_FOUND, f"no endpoint {path}")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path != CHAT_PATH:
            self._send_error(HTTPStatus.NOT_FOUND, f"no endpoint {path} for POST")
            return
        status, payload = self._chat()
        self.state.count_request(status)
        self._send_json(status, payload)

    def _chat(self) -> tuple[int, object]:
        def error(status: int, message: str, param: str | None = None) -> tuple[int, object]:
            return status, error_payload(status, message, param)

        length_header = self.headers.get("Content-Length")
        if length_header is None or not length_header.isdigit():
            self.close_connection = True
            return error(HTTPStatus.LENGTH_REQUIRED, "Content-Length is required")
        length = int(length_header)
        if length > MAX_REQUEST_BYTES:
            self.close_connection = True
            return error(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_REQUEST_BYTES} bytes"
            )
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError as json_error:
            return error(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {json_error}")
        try:
            messages, max_tokens = validate_chat_request(body)
        except RequestError as request_error:
            return error(HTTPStatus.BAD_REQUEST, request_error.message, request_error.param)
        return HTTPStatus.OK, answer_chat(self.state, messages, max_tokens)


def bring_up_cuda(
    deployment: Deployment, log: logging.Logger
) -> tuple[GpuSession | None, LatencyModel | None]:
    """A context on each GPU, peer access for each usable route, then the ring's paths
    timed (the latency model); (None, None) when the driver cannot be loaded or fails:
    requests are then answered without delay."""
    settings = deployment.settings
    ordinals = dict(zip(settings.devices, settings.gpu_ordinals, strict=True))
    try:
        session = GpuSession(settings.gpu_ordinals, log)
        for route in deployment.routes:
            if route.usable:
                pair = (ordinals[route.source], ordinals[route.target])
                session.enable_peer_access(route.source, route.target, pair)
        requests = [
            PairRequest(source, target, ordinals[source], ordinals[target])
            for source, target in ring_pairs(settings.devices)
        ]
        paths = session.measure_paths(requests)
    except CudaUnavailableError as error:
        log.warning("no latency model: %s; chat completions are answered without delay", error)
        return None, None
    model = LatencyModel(len(settings.devices), tuple(paths))
    log.info(
        "latency model: %.1f ms for %d prompt and %d generated tokens (transfer %.2f ms/token)",
        model.reference_request_s() * 1000,
        REFERENCE_PROMPT_TOKENS,
        REFERENCE_GENERATED_TOKENS,
        model.exposed_transfer_s_per_token() * 1000,
    )
    return session, model


def serve(deployment: Deployment, log: logging.Logger) -> int:
    settings = deployment.settings
    state = ServerState(deployment, log)
    handler = type("BoundLingbotHandler", (LingbotHandler,), {"state": state})
    try:
        httpd = ThreadingHTTPServer((settings.host, settings.port), handler)
    except OSError as error:
        log.error("cannot listen on %s:%d: %s", settings.host, settings.port, error.strerror)
        return 1
    httpd.daemon_threads = True
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signal_number: int, _frame: object) -> None:
        received.append(signal.Signals(signal_number).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    serving = threading.Thread(target=httpd.serve_forever, name="http", daemon=True)
    serving.start()
    host, port = httpd.server_address[:2]
    for placement in deployment.placements:
        log.info(
            "serving on %s (%s, NUMA node %d)",
            placement.device,
            placement.physical.bus_id,
            placement.numa_node,
        )
    log.info(
        "listening: %s on %s, primary %s, balancer %s",
        settings.model_name,
        ",".join(settings.devices),
        settings.devices[0],
        settings.load_balancer.type,
    )
    print(f"LingBot {VERSION} listening on http://{host}:{port}", flush=True)
    stop.wait()
    log.info("%s received; shutting down", received[0] if received else "stop")
    httpd.shutdown()
    httpd.server_close()
    serving.join()
    log.info("stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    log = configure_logging(arguments.verbose)
    log.info("LingBot %s starting: %s", VERSION, " ".join(sys.argv[1:] if argv is None else argv))
    try:
        settings = resolve_settings(arguments)
        if settings.config.debug_mode:
            log.info("debug_mode on: route_decision logged per request")
        deployment = prepare(settings, log)
    except ContractError as error:
        print(f"lingbot: error: {error}", file=sys.stderr, flush=True)
        return 2
    except DriverUnavailableError as error:
        log.error("%s", error)
        return 1
    except RuntimeError as error:
        print(f"RuntimeError: {error}", file=sys.stderr, flush=True)
        return 1
    return serve(deployment, log)
