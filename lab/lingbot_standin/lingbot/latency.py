"""How long a chat completion takes on this deployment.

The modelled time of a request is a compute part and a transfer part:

    compute_s  = (prompt_tokens * PREFILL_S_PER_PROMPT_TOKEN
                  + generated_tokens * DECODE_S_PER_GENERATED_TOKEN) / gpu_count
    link_s     = ALLREDUCES_PER_GENERATED_TOKEN * 2 * (gpu_count - 1)
                 * (latency_s + ALLREDUCE_BYTES / (gpu_count * bytes_per_s))
    transfer_s = generated_tokens * max(0, max(link_s over the ring) - TRANSFER_OVERLAP_S_PER_TOKEN)

The GPUs form a ring in ``--gpus`` order (gpu:a -> gpu:b -> ... -> gpu:a); each generated
token all-reduces its activations ALLREDUCES_PER_GENERATED_TOKEN times over it, a ring
all-reduce taking 2 (n - 1) steps of 1/n of the message per link, paced by the slowest
link. The part of a token's traffic that fits in TRANSFER_OVERLAP_S_PER_TOKEN runs behind
its compute; only the rest adds to the request. A link's figures are what the driver
measured for it: the peer path when peer access is on, else the host-staged copy.

Reference request (128 prompt tokens, the 13-token answer): one GPU 382 ms; two GPUs on a
28.4 GB/s, 1.32 us peer path (PHB) 217 ms; on an 11.2 GB/s, 2.4 us cross-socket path
496 ms; host-staged (about 12 GB/s, 9 us) above one GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PREFILL_S_PER_PROMPT_TOKEN = 0.002578
DECODE_S_PER_GENERATED_TOKEN = 0.004
ALLREDUCES_PER_GENERATED_TOKEN = 160
ALLREDUCE_BYTES = 2_440_000
TRANSFER_OVERLAP_S_PER_TOKEN = 0.01217

REFERENCE_PROMPT_TOKENS = 128
REFERENCE_GENERATED_TOKENS = 13

PATH_PEER = "p2p"
PATH_HOST_STAGED = "host_staged"


@dataclass(frozen=True)
class MeasuredPath:
    """A directed GPU-to-GPU path as the driver timed it."""

    source: str
    target: str
    kind: str  # PATH_PEER or PATH_HOST_STAGED
    gbytes_per_s: float
    latency_ns: float

    @property
    def bytes_per_s(self) -> float:
        return self.gbytes_per_s * 1e9

    @property
    def latency_s(self) -> float:
        return self.latency_ns * 1e-9


def ring_pairs(devices: Sequence[str]) -> list[tuple[str, str]]:
    """The directed links of the ring over the devices (none for one GPU)."""
    if len(devices) < 2:
        return []
    return [(devices[i], devices[(i + 1) % len(devices)]) for i in range(len(devices))]


@dataclass(frozen=True)
class LatencyModel:
    gpu_count: int
    paths: tuple[MeasuredPath, ...] = ()

    def __post_init__(self) -> None:
        if self.gpu_count < 1:
            raise ValueError("a deployment has at least one GPU")
        if self.gpu_count > 1 and not self.paths:
            raise ValueError("a multi-GPU deployment needs the measured paths of its ring")
        for path in self.paths:
            if path.gbytes_per_s <= 0 or path.latency_ns < 0:
                raise ValueError(f"path {path.source}->{path.target} has no usable figures")

    def compute_s(self, prompt_tokens: int, generated_tokens: int) -> float:
        work_s = (
            prompt_tokens * PREFILL_S_PER_PROMPT_TOKEN
            + generated_tokens * DECODE_S_PER_GENERATED_TOKEN
        )
        return work_s / self.gpu_count

    def link_s_per_token(self, path: MeasuredPath) -> float:
        """One generated token's all-reduce traffic over one ring link."""
        steps = 2 * (self.gpu_count - 1)
        step_s = path.latency_s + ALLREDUCE_BYTES / (self.gpu_count * path.bytes_per_s)
        return ALLREDUCES_PER_GENERATED_TOKEN * steps * step_s

    def exposed_transfer_s_per_token(self) -> float:
        if self.gpu_count < 2:
            return 0.0
        slowest_s = max(self.link_s_per_token(path) for path in self.paths)
        return max(0.0, slowest_s - TRANSFER_OVERLAP_S_PER_TOKEN)

    def transfer_s(self, generated_tokens: int) -> float:
        return generated_tokens * self.exposed_transfer_s_per_token()

    def request_s(self, prompt_tokens: int, generated_tokens: int) -> float:
        return self.compute_s(prompt_tokens, generated_tokens) + self.transfer_s(generated_tokens)

    def reference_request_s(self) -> float:
        return self.request_s(REFERENCE_PROMPT_TOKENS, REFERENCE_GENERATED_TOKENS)
