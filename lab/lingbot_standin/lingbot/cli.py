"""LingBot's command line and the settings it resolves to.

Precedence: command line > config.yaml > built-in defaults. The peer-access threshold is
in GB/s on the command line and in Gbit/s (``p2p_threshold_gbps``) in config.yaml.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path

from . import VERSION
from .config import (
    DEVICE_RE,
    ContractError,
    LingbotConfig,
    LoadBalancer,
    load_balancer_config,
    load_config,
)

DEFAULT_PORT = 8000
DEFAULT_HOST = "0.0.0.0"
DEFAULT_PEER_ACCESS_THRESHOLD_GBYTES_PER_S = 25.0
DEFAULT_BATCH_SIZE = 4
DEFAULT_KV_CACHE_DTYPE = "bf16"
KV_CACHE_DTYPES = ("bf16", "fp16", "fp32", "fp8")
DEFAULT_PREFILL_CHUNK_SIZE = 1024
DEFAULT_MAX_NEW_TOKENS = 512
BITS_PER_BYTE = 8


def _gpu_list(text: str) -> tuple[int, ...]:
    if re.fullmatch(r"\d+(,\d+)*", text) is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of CUDA ordinals like 0,1"
        )
    ordinals = tuple(int(item) for item in text.split(","))
    duplicates = sorted({ordinal for ordinal in ordinals if ordinals.count(ordinal) > 1})
    if duplicates:
        raise argparse.ArgumentTypeError(f"{text!r} lists GPU {duplicates[0]} more than once")
    return ordinals


def _device(text: str) -> tuple[int, ...]:
    if DEVICE_RE.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device like gpu:0")
    return (int(text.split(":", 1)[1]),)


def _positive_int(text: str) -> int:
    if re.fullmatch(r"\d+", text) is None or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def _threshold_gbytes_per_s(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GB/s") from None
    if not value >= 0.0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of GB/s >= 0")
    return value


def _kv_cache_dtype(text: str) -> str:
    if text not in KV_CACHE_DTYPES:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(KV_CACHE_DTYPES)}")
    return text


def _port(text: str) -> int:
    if re.fullmatch(r"\d+", text) is None or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535; 0: any free)")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lingbot",
        description=f"LingBot {VERSION} inference server (lab stand-in).",
        allow_abbrev=False,
    )
    parser.add_argument("--config", required=True, type=Path, help="config.yaml")
    parser.add_argument("--model-path", required=True, type=Path, help="model directory")
    devices = parser.add_mutually_exclusive_group(required=True)
    devices.add_argument(
        "--gpus",
        type=_gpu_list,
        dest="gpu_ordinals",
        metavar="N[,N...]",
        help="CUDA ordinals, primary first: 0,1",
    )
    devices.add_argument(
        "--device", type=_device, dest="gpu_ordinals", metavar="gpu:N", help="single-GPU form"
    )
    parser.add_argument(
        "--peer-access-threshold",
        type=_threshold_gbytes_per_s,
        dest="peer_access_threshold_gbytes_per_s",
        metavar="GB_PER_S",
        help="GB/s; GPU pairs below it are not used together (default: config.yaml"
        f" p2p_threshold_gbps / 8, else {DEFAULT_PEER_ACCESS_THRESHOLD_GBYTES_PER_S:g})",
    )
    parser.add_argument("--batch-size", type=_positive_int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument(
        "--kv-cache-dtype",
        type=_kv_cache_dtype,
        default=DEFAULT_KV_CACHE_DTYPE,
        help=f"one of {', '.join(KV_CACHE_DTYPES)} ({DEFAULT_KV_CACHE_DTYPE})",
    )
    parser.add_argument(
        "--prefill-chunk-size", type=_positive_int, default=DEFAULT_PREFILL_CHUNK_SIZE
    )
    parser.add_argument("--offload-kv", action="store_true")
    parser.add_argument("--max-new-tokens", type=_positive_int, default=DEFAULT_MAX_NEW_TOKENS)
    parser.add_argument(
        "--balancer-config", type=Path, help="load_balancer section overriding config.yaml's"
    )
    parser.add_argument("--verbose", action="store_true", help="debug-level logging")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"listen address ({DEFAULT_HOST})")
    parser.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"listen port ({DEFAULT_PORT})"
    )
    return parser


@dataclass(frozen=True)
class Settings:
    config_path: Path
    config: LingbotConfig
    model_path: Path
    model_name: str
    gpu_ordinals: tuple[int, ...]
    peer_access_threshold_gbytes_per_s: float
    peer_access_threshold_source: str
    load_balancer: LoadBalancer
    load_balancer_source: str
    batch_size: int
    kv_cache_dtype: str
    prefill_chunk_size: int
    offload_kv: bool
    max_new_tokens: int
    verbose: bool
    host: str
    port: int

    @property
    def peer_access_threshold_gbits_per_s(self) -> float:
        return self.peer_access_threshold_gbytes_per_s * BITS_PER_BYTE

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(f"gpu:{ordinal}" for ordinal in self.gpu_ordinals)


def check_model_path(model_path: Path) -> str:
    """Refuse a model path that is not a model directory; return the model's name."""
    if not model_path.exists():
        raise ContractError(f"--model-path {model_path}: does not exist")
    if not model_path.is_dir():
        raise ContractError(f"--model-path {model_path}: is not a directory")
    model_config_path = model_path / "config.json"
    try:
        model_config = json.loads(model_config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ContractError(
            f"--model-path {model_path}: no config.json; a model directory holds config.json"
        ) from None
    except (OSError, ValueError) as error:
        raise ContractError(f"{model_config_path}: not a readable JSON file: {error}") from None
    if not isinstance(model_config, dict):
        raise ContractError(f"{model_config_path}: must hold a JSON object")
    return model_path.resolve().name


def _threshold(arguments: argparse.Namespace, config: LingbotConfig) -> tuple[float, str]:
    if arguments.peer_access_threshold_gbytes_per_s is not None:
        return arguments.peer_access_threshold_gbytes_per_s, "--peer-access-threshold"
    if config.p2p_threshold_gbits_per_s is not None:
        return (
            config.p2p_threshold_gbits_per_s / BITS_PER_BYTE,
            "config.yaml hardware_profile.p2p_threshold_gbps",
        )
    return DEFAULT_PEER_ACCESS_THRESHOLD_GBYTES_PER_S, "built-in default"


def resolve_settings(arguments: argparse.Namespace) -> Settings:
    """Read config.yaml and the balancer file; apply precedence. Raises ContractError."""
    model_name = check_model_path(arguments.model_path)
    config = load_config(arguments.config)
    threshold_gbytes_per_s, threshold_source = _threshold(arguments, config)
    if arguments.balancer_config is not None:
        load_balancer = load_balancer_config(arguments.balancer_config)
        load_balancer_source = f"--balancer-config {arguments.balancer_config}"
    else:
        load_balancer = config.load_balancer
        load_balancer_source = f"{arguments.config} load_balancer"
    return Settings(
        config_path=arguments.config,
        config=config,
        model_path=arguments.model_path,
        model_name=model_name,
        gpu_ordinals=arguments.gpu_ordinals,
        peer_access_threshold_gbytes_per_s=threshold_gbytes_per_s,
        peer_access_threshold_source=threshold_source,
        load_balancer=load_balancer,
        load_balancer_source=load_balancer_source,
        batch_size=arguments.batch_size,
        kv_cache_dtype=arguments.kv_cache_dtype,
        prefill_chunk_size=arguments.prefill_chunk_size,
        offload_kv=arguments.offload_kv,
        max_new_tokens=arguments.max_new_tokens,
        verbose=arguments.verbose,
        host=arguments.host,
        port=arguments.port,
    )
