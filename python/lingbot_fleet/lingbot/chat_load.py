"""A bounded synthetic chat load against LingBot instances over loopback.

Stdlib-only, Python 3.8+: runs on nodes (shipped as
``ansible.module_utils.lingbot_fleet.lingbot.chat_load``, module lingbot_chat_load of the role
rollout_gate). The rollout gate measures each instance before and after a node's change
and compares the two (gate ``service_load`` of ``lingbot_fleet.rollout.gates``).

Per instance, ``LoadSettings.requests`` chat requests carry the reference prompt (a fixed
prompt of ``prompt_words`` whitespace words) and ask for ``max_tokens`` tokens; their times
are ``latency_ms``. ``first_token_requests`` more ask for one token: LingBot answers
non-streamed, so their time is the time to the first token (``first_token_ms``). The two
kinds are interleaved and sent by ``concurrency`` threads, one new HTTP connection per
request; each time is wall time (``time.monotonic``) from connecting to the last byte of
the answer. After ``max_duration_s`` no new request is sent: what was left is ``not_sent``,
not an error.

An answer is ``ok`` (2xx), a ``client_errors`` (4xx: the service refused the request),
a ``server_errors`` (5xx, and any other status a chat POST should never get) or
``no_answer`` (refused, reset or timed-out connection). All but ``ok`` count as errors in
``error_rate_percent``. Percentiles are nearest-rank on the sorted samples (the smallest
sample with at least p% of the samples at or below it, so always a measured value); they
are None when there is no sample. Times are in milliseconds, rounded to 0.1 ms.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.client import HTTPConnection, HTTPException
from typing import Any

from .layout import PLAN_PATH
from .warmup import CHAT_PATH, key_may_go_to

REFERENCE = "reference"
FIRST_TOKEN = "first_token"
FIRST_ERRORS_KEPT = 3
ERROR_EXCERPT_CHARS = 120
# Words of the reference prompt, cycled: deterministic, so before and after send the same.
_PROMPT_VOCABULARY = (
    "summarize",
    "the",
    "state",
    "of",
    "a",
    "multi-gpu",
    "inference",
    "server",
    "after",
    "its",
    "rollout",
    "naming",
    "each",
    "link",
    "bandwidth",
    "and",
    "latency",
    "figure",
    "in",
    "plain",
    "words",
)
# The role variable of each setting (rollout_gate, defaults/main.yml); the others are
# options of lingbot_chat_load only.
SETTING_VARIABLES = {
    "requests": "rollout_gate_load_requests",
    "first_token_requests": "rollout_gate_load_first_token_requests",
    "concurrency": "rollout_gate_load_concurrency",
    "max_duration_s": "rollout_gate_load_max_duration_s",
}
# (lowest, highest) allowed value of each setting.
SETTING_RANGES: dict[str, tuple[float, float]] = {
    "requests": (1, 10000),
    "first_token_requests": (0, 10000),
    "concurrency": (1, 64),
    "prompt_words": (1, 32768),
    "max_tokens": (1, 4096),
    "request_timeout_s": (0.1, 600),
    "max_duration_s": (0.1, 3600),
}
_WHOLE_SETTINGS = ("requests", "first_token_requests", "concurrency", "prompt_words", "max_tokens")


class ChatLoadError(ValueError):
    """The plan or the instance list cannot be loaded against."""


@dataclass(frozen=True)
class LoadSettings:
    """How much load one instance gets (module docs: lingbot_chat_load)."""

    requests: int = 20
    first_token_requests: int = 10
    concurrency: int = 2
    prompt_words: int = 128
    max_tokens: int = 16
    request_timeout_s: float = 30.0
    max_duration_s: float = 120.0

    def problems(self) -> list[str]:
        """What is wrong with the settings, each naming its variable (or option) and the
        allowed range; empty when they are usable."""
        problems = []
        for name, (lowest, highest) in SETTING_RANGES.items():
            value = getattr(self, name)
            whole = name in _WHOLE_SETTINGS
            wanted = f"{'a whole number' if whole else 'a number'} from {lowest:g} to {highest:g}"
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if (
                not number
                or not math.isfinite(value)
                or (whole and value != int(value))
                or not lowest <= value <= highest
            ):
                problems.append(f"{setting_label(name)} must be {wanted}, not {value!r}")
        return problems


def setting_label(name: str) -> str:
    """``rollout_gate_load_requests (option requests)``, or ``option prompt_words``."""
    variable = SETTING_VARIABLES.get(name)
    return f"{variable} (option {name})" if variable else f"option {name}"


def reference_prompt(words: int) -> str:
    """The deterministic prompt of exactly ``words`` whitespace-separated words."""
    size = len(_PROMPT_VOCABULARY)
    return " ".join(_PROMPT_VOCABULARY[index % size] for index in range(words))


def chat_body(prompt: str, max_tokens: int) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": False,
    }


def nearest_rank(sorted_values: Sequence[float], percent: float) -> float | None:
    """The nearest-rank percentile of ascending ``sorted_values`` (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(percent / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def time_summary(samples_ms: Sequence[float]) -> dict[str, Any]:
    """{p50, p95, max, count} of samples in ms (None figures when there is none)."""
    ordered = sorted(samples_ms)
    return {
        "p50": _rounded(nearest_rank(ordered, 50)),
        "p95": _rounded(nearest_rank(ordered, 95)),
        "max": _rounded(ordered[-1] if ordered else None),
        "count": len(ordered),
    }


@dataclass
class LoadSamples:
    """The raw outcome of a load: counts, every successful time, the first failures."""

    requests_sent: int = 0
    ok: int = 0
    server_errors: int = 0
    no_answer: int = 0
    client_errors: int = 0
    not_sent: int = 0
    duration_s: float = 0.0
    latency_ms: list[float] = field(default_factory=list)
    first_token_ms: list[float] = field(default_factory=list)
    first_errors: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return self.server_errors + self.no_answer + self.client_errors

    def record(self, kind: str, status: int | None, elapsed_ms: float, text: str) -> None:
        self.requests_sent += 1
        if status is not None and 200 <= status < 300:
            self.ok += 1
            (self.first_token_ms if kind == FIRST_TOKEN else self.latency_ms).append(elapsed_ms)
            return
        if status is None:
            self.no_answer += 1
        elif 400 <= status < 500:
            self.client_errors += 1
        else:
            self.server_errors += 1
        if len(self.first_errors) < FIRST_ERRORS_KEPT:
            self.first_errors.append(_failure_line(kind, status, text))

    def add(self, other: LoadSamples, label: str = "") -> None:
        """Pool ``other`` into these samples; its first failures are prefixed with label."""
        for name in ("requests_sent", "ok", "server_errors", "no_answer", "client_errors"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.not_sent += other.not_sent
        self.duration_s += other.duration_s
        self.latency_ms.extend(other.latency_ms)
        self.first_token_ms.extend(other.first_token_ms)
        for line in other.first_errors:
            if len(self.first_errors) < FIRST_ERRORS_KEPT:
                self.first_errors.append(f"{label}: {line}" if label else line)

    def summary(self) -> dict[str, Any]:
        """The JSON-able result (no raw samples)."""
        rate = None
        if self.requests_sent:
            rate = round(self.errors / self.requests_sent * 100.0, 3)
        return {
            "requests_sent": self.requests_sent,
            "ok": self.ok,
            "server_errors": self.server_errors,
            "no_answer": self.no_answer,
            "client_errors": self.client_errors,
            "error_rate_percent": rate,
            "latency_ms": time_summary(self.latency_ms),
            "first_token_ms": time_summary(self.first_token_ms),
            "first_errors": list(self.first_errors),
            "not_sent": self.not_sent,
            "duration_s": round(self.duration_s, 3),
        }


def _failure_line(kind: str, status: int | None, text: str) -> str:
    what = "first-token request" if kind == FIRST_TOKEN else "reference request"
    excerpt = " ".join(text.split())[:ERROR_EXCERPT_CHARS]
    if status is None:
        return f"{what}: {excerpt}"
    return f"{what}: status {status}: {excerpt}".rstrip(": ")


def chat_request(
    host: str, port: int, body: bytes, api_key: str, timeout_s: float
) -> tuple[int | None, float, str]:
    """(status, elapsed ms, answer text) of one chat POST; status None: no answer, and the
    text says why. Timed from connecting to the last byte of the answer."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        if not key_may_go_to(host):
            return None, 0.0, f"not sending the API key to {host}:{port}: not this node's own"
        headers["Authorization"] = f"Bearer {api_key}"
    started = time.monotonic()
    connection = HTTPConnection(host, port, timeout=timeout_s)
    try:
        connection.request("POST", CHAT_PATH, body=body, headers=headers)
        response = connection.getresponse()
        text = response.read().decode("utf-8", "replace")
        status: int | None = response.status
    except (OSError, HTTPException) as error:
        status, text = None, f"no answer on {host}:{port} ({type(error).__name__}: {error})"
    finally:
        connection.close()
    return status, (time.monotonic() - started) * 1000.0, text


def _interleaved(reference: int, first_token: int) -> list[str]:
    """The request kinds in sending order, the first-token ones spread evenly."""
    total = reference + first_token
    kinds = []
    placed = 0
    for index in range(total):
        if (
            first_token
            and placed < first_token
            and (index + 1) * first_token >= (placed + 1) * total
        ):
            kinds.append(FIRST_TOKEN)
            placed += 1
        else:
            kinds.append(REFERENCE)
    return kinds


def load_instance(host: str, port: int, settings: LoadSettings, api_key: str = "") -> LoadSamples:
    """Send one instance its bounded load; the raw samples (see ``measure_instance``)."""
    problems = settings.problems()
    if problems:
        raise ValueError("; ".join(problems))
    prompt = reference_prompt(settings.prompt_words)
    bodies = {
        REFERENCE: json.dumps(chat_body(prompt, settings.max_tokens)).encode(),
        FIRST_TOKEN: json.dumps(chat_body(prompt, 1)).encode(),
    }
    kinds = _interleaved(settings.requests, settings.first_token_requests)
    samples = LoadSamples()
    lock = threading.Lock()
    started = time.monotonic()
    deadline = started + settings.max_duration_s
    issued = 0

    def worker() -> None:
        nonlocal issued
        while True:
            with lock:
                if issued >= len(kinds) or time.monotonic() >= deadline:
                    return
                kind = kinds[issued]
                issued += 1
            status, elapsed_ms, text = chat_request(
                host, port, bodies[kind], api_key, settings.request_timeout_s
            )
            with lock:
                samples.record(kind, status, elapsed_ms, text)

    threads = [
        threading.Thread(target=worker, name=f"chat-load-{port}-{number}", daemon=True)
        for number in range(min(int(settings.concurrency), len(kinds)))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    samples.not_sent = len(kinds) - issued
    samples.duration_s = time.monotonic() - started
    return samples


def measure_instance(
    host: str, port: int, settings: LoadSettings, api_key: str = ""
) -> dict[str, Any]:
    """One instance's load result: requests_sent, ok, server_errors, no_answer,
    client_errors, error_rate_percent, latency_ms and first_token_ms ({p50, p95, max,
    count}), first_errors (at most 3), not_sent, duration_s."""
    return load_instance(host, port, settings, api_key).summary()


def empty_load() -> dict[str, Any]:
    """The result of measuring no instance (no plan, or a plan without instances)."""
    return {"instances": {}, "node": LoadSamples().summary()}


def measure_instances(
    instances: Sequence[Mapping[str, Any]],
    host: str = "127.0.0.1",
    settings: LoadSettings | None = None,
    api_key: str = "",
) -> dict[str, Any]:
    """Measure each instance ({name, port}) in turn: ``{"instances": {name: result},
    "node": pooled}``, pooled computed over every sample of every instance."""
    settings = settings or LoadSettings()
    checked = check_instances(instances, "instances")
    pooled = LoadSamples()
    results = {}
    for instance in checked:
        samples = load_instance(host, instance["port"], settings, api_key)
        results[instance["name"]] = samples.summary()
        pooled.add(samples, label=instance["name"])
    return {"instances": results, "node": pooled.summary()}


def check_instances(instances: Any, where: str) -> list[dict[str, Any]]:
    """``[{name, port}]`` from a list of instance mappings; ChatLoadError names ``where``
    and what is wrong."""
    if not isinstance(instances, (list, tuple)):
        raise ChatLoadError(f"{where}: instances must be a list, not {type(instances).__name__}")
    checked: list[dict[str, Any]] = []
    for position, instance in enumerate(instances):
        if not isinstance(instance, Mapping):
            raise ChatLoadError(f"{where}: instance {position} is not a mapping with name and port")
        name = instance.get("name")
        if not isinstance(name, str) or not name:
            raise ChatLoadError(f"{where}: instance {position} has no name")
        port = instance.get("port")
        if isinstance(port, str) and port.strip().isdigit():
            port = int(port)
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ChatLoadError(
                f"{where}: instance {name} has port {port!r}; a port is a whole number from 1 "
                "to 65535"
            )
        if any(seen["name"] == name for seen in checked):
            raise ChatLoadError(f"{where}: instance {name} is listed twice")
        checked.append({"name": name, "port": port})
    return checked


def instances_from_plan(plan_text: str, path: str = PLAN_PATH) -> list[dict[str, Any]]:
    """The plan's instances as ``[{name, port}]``; ChatLoadError names ``path`` and what is
    wrong with it."""
    try:
        plan = json.loads(plan_text)
    except ValueError as error:
        raise ChatLoadError(f"{path} is not JSON ({error})") from None
    if not isinstance(plan, dict):
        raise ChatLoadError(
            f"{path} is not a plan: it holds a {type(plan).__name__}, not an object"
        )
    if "instances" not in plan:
        raise ChatLoadError(f"{path} is not a plan: it has no instances list")
    return check_instances(plan["instances"], path)
