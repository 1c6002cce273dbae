"""LingBot's warm-up, run by each instance's unit around the server's start.

The first CUDA context on a GPU and the first peer mapping between two GPUs are slow
(docs/lingbot.md). Two steps take that cost off the first request a client sends:

``gpus`` (``ExecStartPre``, under the instance's numactl binding and with its
``CUDA_VISIBLE_DEVICES``): through the driver's ``libcuda.so.1`` only, a context on every
GPU of the instance, a memset on each, then peer access for every pair the plan uses and a
copy over each such pair that is read back and compared. It brings each GPU up (the
driver keeps it up for LingBot when the GPU is in persistence mode) and stops the start,
with one line naming the GPU or the pair, when a GPU cannot take a context or a peer copy
does not arrive intact: LingBot would otherwise serve from a broken path.

``ready`` (``ExecStartPost``): contexts and peer mappings belong to the process that made
them, so LingBot's own are made by its own first requests. This step waits until
``/metrics`` answers 200, then sends one-token chat completions (readiness, as
docs/lingbot.md defines it) until one answers within ``--settled-ms`` of the one before.
systemd keeps the unit in ``activating`` until then, so the unit is active, and the
toolkit calls the instance ready, only once LingBot has paid its first-use costs.

Exit status: 0 done; 1 the GPUs or the server failed (the reason on stderr, in the unit's
journal); 2 bad arguments. Standard library only: the file is installed on the nodes as
it is (role lingbot_service) and runs under LingBot's Python.
"""

from __future__ import annotations

import argparse
import ctypes
import ipaddress
import json
import os
import socket
import sys
import time
from http.client import HTTPConnection, HTTPException

CUDA_SUCCESS = 0
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
WARM_BUFFER_BYTES = 1 << 20
METRICS_PATH = "/metrics"
# What LingBot's /metrics holds once it serves (the readiness check looks for it).
READY_METRIC = "lingbot_balancer_weight"
CHAT_PATH = "/v1/chat/completions"
API_KEY_VARIABLE = "LINGBOT_API_KEY"
READINESS_BODY = {
    "messages": [{"role": "user", "content": "lingbot-fleet warm-up"}],
    "max_tokens": 1,
}
POLL_INTERVAL_S = 0.25


class WarmUpError(RuntimeError):
    """A GPU, a pair or the server failed the warm-up; str() is the journal line."""


def log(message: str) -> None:
    sys.stderr.write(f"lingbot-fleet warm-up: {message}\n")
    sys.stderr.flush()


# --- gpus: the driver --------------------------------------------------------------------


class Driver:
    """The few driver-API calls the warm-up makes, through ctypes."""

    def __init__(self, library: str) -> None:
        try:
            self.lib = ctypes.CDLL(library)
        except OSError as error:
            raise WarmUpError(f"cannot load the CUDA driver {library}: {error}") from None
        self.library = library
        u64, vp = ctypes.c_uint64, ctypes.c_void_p
        signatures = {
            "cuMemcpyPeer": [u64, vp, u64, vp, ctypes.c_size_t],
            "cuMemcpyHtoD_v2": [u64, vp, ctypes.c_size_t],
            "cuMemcpyDtoH_v2": [vp, u64, ctypes.c_size_t],
            "cuMemsetD8_v2": [u64, ctypes.c_ubyte, ctypes.c_size_t],
            "cuMemFree_v2": [u64],
            "cuCtxSetCurrent": [vp],
            "cuCtxEnablePeerAccess": [vp, ctypes.c_uint],
            "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
        }
        try:
            for name, argtypes in signatures.items():
                getattr(self.lib, name).argtypes = argtypes
        except AttributeError as error:
            raise WarmUpError(f"{library} lacks a driver call: {error}") from None
        self.contexts: dict[int, ctypes.c_void_p] = {}

    def check(self, code: int, call: str, what: str) -> None:
        if code == CUDA_SUCCESS:
            return
        name = ctypes.c_char_p()
        if self.lib.cuGetErrorName(code, ctypes.byref(name)) == CUDA_SUCCESS and name.value:
            error = name.value.decode()
        else:
            error = f"CUDA error {code}"
        raise WarmUpError(f"{what}: {call} failed with {error}")

    def device_count(self) -> int:
        self.check(self.lib.cuInit(0), "cuInit", "the CUDA driver")
        count = ctypes.c_int()
        self.check(self.lib.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount", "the driver")
        return count.value

    def context(self, ordinal: int) -> ctypes.c_void_p:
        if ordinal not in self.contexts:
            what = f"GPU ordinal {ordinal}"
            device = ctypes.c_int()
            self.check(self.lib.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet", what)
            context = ctypes.c_void_p()
            self.check(
                self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
                "cuDevicePrimaryCtxRetain",
                what,
            )
            self.contexts[ordinal] = context
        return self.contexts[ordinal]

    def use(self, ordinal: int) -> None:
        self.check(
            self.lib.cuCtxSetCurrent(self.context(ordinal)), "cuCtxSetCurrent", f"GPU {ordinal}"
        )

    def allocate(self, ordinal: int, size_bytes: int) -> int:
        self.use(ordinal)
        pointer = ctypes.c_uint64()
        self.check(
            self.lib.cuMemAlloc_v2(ctypes.byref(pointer), size_bytes),
            "cuMemAlloc_v2",
            f"GPU ordinal {ordinal}",
        )
        return pointer.value

    def free(self, ordinal: int, pointer: int) -> None:
        self.use(ordinal)
        self.lib.cuMemFree_v2(pointer)


def parse_pairs(text: str) -> list[tuple[int, int]]:
    """``0:1,1:0`` -> [(0, 1), (1, 0)]; ValueError names the bad entry."""
    pairs = []
    for entry in filter(None, (part.strip() for part in text.split(","))):
        source, sep, target = entry.partition(":")
        if not sep or not source.isdigit() or not target.isdigit() or source == target:
            raise ValueError(f"peer pair {entry!r} is not SOURCE:TARGET of two CUDA ordinals")
        pairs.append((int(source), int(target)))
    return pairs


def warm_gpu(driver: Driver, ordinal: int) -> float:
    """A context and a memset on one GPU; the milliseconds it took."""
    started_s = time.monotonic()
    driver.context(ordinal)
    buffer = driver.allocate(ordinal, WARM_BUFFER_BYTES)
    try:
        what = f"GPU ordinal {ordinal}"
        driver.check(driver.lib.cuMemsetD8_v2(buffer, 0, WARM_BUFFER_BYTES), "cuMemsetD8", what)
        driver.check(driver.lib.cuCtxSynchronize(), "cuCtxSynchronize", what)
    finally:
        driver.free(ordinal, buffer)
    return (time.monotonic() - started_s) * 1000


def warm_pair(driver: Driver, source: int, target: int) -> tuple[bool, float]:
    """Peer access source -> target and one checked copy over it: (peer access on, ms).
    A pair the driver cannot map is reported, not fatal (LingBot stages it through host
    memory); a copy that does not arrive intact is fatal."""
    what = f"peer pair {source}->{target}"
    started_s = time.monotonic()
    can_access = ctypes.c_int()
    driver.check(
        driver.lib.cuDeviceCanAccessPeer(ctypes.byref(can_access), source, target),
        "cuDeviceCanAccessPeer",
        what,
    )
    if not can_access.value:
        return False, (time.monotonic() - started_s) * 1000
    driver.use(source)
    result = driver.lib.cuCtxEnablePeerAccess(driver.context(target), 0)
    if result != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
        driver.check(result, "cuCtxEnablePeerAccess", what)
    pattern = bytes((source * 31 + target * 7 + offset) % 251 for offset in range(256))
    sent = (pattern * (WARM_BUFFER_BYTES // len(pattern)))[:WARM_BUFFER_BYTES]
    source_buffer = driver.allocate(source, WARM_BUFFER_BYTES)
    target_buffer = driver.allocate(target, WARM_BUFFER_BYTES)
    try:
        driver.use(source)
        host = ctypes.create_string_buffer(sent, WARM_BUFFER_BYTES)
        driver.check(
            driver.lib.cuMemcpyHtoD_v2(source_buffer, host, WARM_BUFFER_BYTES), "cuMemcpyHtoD", what
        )
        driver.use(target)
        driver.check(
            driver.lib.cuMemsetD8_v2(target_buffer, 0, WARM_BUFFER_BYTES), "cuMemsetD8", what
        )
        driver.check(driver.lib.cuCtxSynchronize(), "cuCtxSynchronize", what)
        driver.check(
            driver.lib.cuMemcpyPeer(
                target_buffer,
                driver.context(target),
                source_buffer,
                driver.context(source),
                WARM_BUFFER_BYTES,
            ),
            "cuMemcpyPeer",
            what,
        )
        received = ctypes.create_string_buffer(WARM_BUFFER_BYTES)
        driver.check(
            driver.lib.cuMemcpyDtoH_v2(received, target_buffer, WARM_BUFFER_BYTES),
            "cuMemcpyDtoH",
            what,
        )
    finally:
        driver.free(source, source_buffer)
        driver.free(target, target_buffer)
    if received.raw != sent:
        got = received.raw
        wrong = sum(1 for offset, byte in enumerate(sent) if got[offset] != byte)
        raise WarmUpError(
            f"{what}: a {WARM_BUFFER_BYTES}-byte peer copy arrived with {wrong} wrong bytes;"
            " the path loses peer writes (an IOMMU translating peer traffic does this): fix"
            " the path or plan without peer access before LingBot serves from it"
        )
    return True, (time.monotonic() - started_s) * 1000


def warm_gpus(library: str, pairs: list[tuple[int, int]]) -> list[str]:
    """Every visible GPU, then every pair; the lines to log. WarmUpError on a failure."""
    driver = Driver(library)
    count = driver.device_count()
    if count == 0:
        raise WarmUpError("the driver lists no GPU (check CUDA_VISIBLE_DEVICES)")
    for source, target in pairs:
        if max(source, target) >= count:
            raise WarmUpError(
                f"peer pair {source}->{target} names an ordinal the driver does not list:"
                f" it lists {count} GPU(s) (CUDA_VISIBLE_DEVICES"
                f"={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')})"
            )
    lines = []
    for ordinal in range(count):
        lines.append(
            f"GPU ordinal {ordinal}: context and memset in {warm_gpu(driver, ordinal):.0f} ms"
        )
    for source, target in pairs:
        mapped, elapsed_ms = warm_pair(driver, source, target)
        if mapped:
            lines.append(
                f"peer pair {source}->{target}: peer access on, {WARM_BUFFER_BYTES}-byte copy"
                f" checked, in {elapsed_ms:.0f} ms"
            )
        else:
            lines.append(
                f"peer pair {source}->{target}: the driver reports no peer access"
                " (cuDeviceCanAccessPeer 0); LingBot will stage this pair through host memory"
            )
    return lines


# --- ready: the server ---------------------------------------------------------------------


def key_may_go_to(host: str) -> bool:
    """Whether the API key may be sent to ``host`` over plain HTTP: only when every address
    it names is this node's own (loopback, or an address this node can bind), so the
    request never leaves the node."""
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    for family, kind, _proto, _name, where in found:
        address = str(where[0])
        if ipaddress.ip_address(address.split("%", 1)[0]).is_loopback:
            continue
        try:
            with socket.socket(family, kind) as probe:
                probe.bind((address, 0))
        except OSError:
            return False
    return bool(found)


def request(
    host: str,
    port: int,
    method: str,
    path: str,
    *,
    timeout_s: float,
    body: dict | None = None,
    api_key: str = "",
) -> tuple[int | None, str]:
    """(status, text) of one request to LingBot; (None, reason) when there is no answer.
    Also the lingbot_service module's readiness check. WarmUpError, sending nothing, when
    ``api_key`` would go to an address that is not this node's own (``key_may_go_to``)."""
    if api_key and not key_may_go_to(host):
        raise WarmUpError(
            f"not sending {API_KEY_VARIABLE} to {host}:{port} over plain HTTP: it is not an "
            "address of this node. Check LingBot on loopback (lingbot_service_health_host: "
            "127.0.0.1) or on the address it listens on"
        )
    headers = {"Accept": "*/*"}
    payload = None
    if body is not None:
        payload = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
    connection = HTTPConnection(host, port, timeout=timeout_s)
    try:
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, response.read(1 << 20).decode("utf-8", "replace")
    except (OSError, HTTPException) as error:
        return None, f"no answer ({error})"
    finally:
        connection.close()


def _answered(status: int | None, text: str) -> bool:
    if status != 200:
        return False
    try:
        return bool(json.loads(text).get("choices"))
    except (ValueError, AttributeError):
        return False


def wait_ready(
    host: str, port: int, timeout_s: float, max_requests: int, settled_ms: float
) -> list[str]:
    """Wait for /metrics, then warm LingBot with one-token requests until two in a row
    answer within ``settled_ms`` of each other (at most ``max_requests``)."""
    deadline_s = time.monotonic() + timeout_s
    last = "nothing tried yet"
    while True:
        remaining_s = deadline_s - time.monotonic()
        if remaining_s <= 0:
            raise WarmUpError(
                f"{host}:{port} did not answer GET {METRICS_PATH} with 200 in {timeout_s:g} s"
                f" ({last})"
            )
        status, text = request(host, port, "GET", METRICS_PATH, timeout_s=min(remaining_s, 10.0))
        if status == 200:
            break
        last = f"last answer: {status if status is not None else text}"
        time.sleep(POLL_INTERVAL_S)
    times_ms: list[float] = []
    while len(times_ms) < max_requests:
        remaining_s = deadline_s - time.monotonic()
        if remaining_s <= 0:
            raise WarmUpError(
                f"{host}:{port} answered no one-token chat completion in {timeout_s:g} s ({last})"
            )
        started_s = time.monotonic()
        status, text = request(
            host,
            port,
            "POST",
            CHAT_PATH,
            timeout_s=remaining_s,
            body=READINESS_BODY,
            api_key=os.environ.get(API_KEY_VARIABLE, ""),
        )
        elapsed_ms = (time.monotonic() - started_s) * 1000
        if not _answered(status, text):
            last = f"POST {CHAT_PATH} answered {status if status is not None else ''} {text[:200]}"
            if status is not None and 400 <= status < 500:
                raise WarmUpError(f"{host}:{port}: {last.strip()}")
            time.sleep(POLL_INTERVAL_S)
            continue
        times_ms.append(elapsed_ms)
        if len(times_ms) >= 2 and abs(times_ms[-1] - times_ms[-2]) <= settled_ms:
            break
    summary = ", ".join(f"{value:.0f}" for value in times_ms)
    return [f"{host}:{port} ready: one-token chat completions in {summary} ms"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lingbot-fleet-warm-up", description=__doc__.split("\n", 1)[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    gpus = commands.add_parser("gpus", help="contexts and peer mappings through libcuda")
    gpus.add_argument(
        "--peer-pairs", default="", help="SOURCE:TARGET CUDA ordinals, comma-separated"
    )
    gpus.add_argument("--cuda-library", default="libcuda.so.1")
    ready = commands.add_parser("ready", help="wait for the server, then warm it with requests")
    ready.add_argument("--host", default="127.0.0.1")
    ready.add_argument("--port", type=int, required=True)
    ready.add_argument("--timeout-s", type=float, default=60.0)
    ready.add_argument("--max-requests", type=int, default=5)
    ready.add_argument("--settled-ms", type=float, default=50.0)
    return parser


def main(argv: list[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    try:
        if arguments.command == "gpus":
            try:
                pairs = parse_pairs(arguments.peer_pairs)
            except ValueError as error:
                log(str(error))
                return 2
            lines = warm_gpus(arguments.cuda_library, pairs)
        else:
            if arguments.max_requests < 2:
                log(
                    "--max-requests must be at least 2: the second shows the first was the slow one"
                )
                return 2
            lines = wait_ready(
                arguments.host,
                arguments.port,
                arguments.timeout_s,
                arguments.max_requests,
                arguments.settled_ms,
            )
    except WarmUpError as error:
        log(str(error))
        return 1
    for line in lines:
        log(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
