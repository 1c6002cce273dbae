"""Fixtures for the stand-in LingBot server: a fake node (model directory, sysfs tree,
nvidia-smi on PATH) in a temp dir, and helpers that run the server in a subprocess.

The server runs under the test's Python; set LINGBOT_STANDIN_PYTHON (e.g. /usr/bin/python3,
the interpreter lab nodes use) to run it under another one."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

STANDIN_ROOT = Path(__file__).resolve().parents[2] / "lab" / "lingbot_standin"
START_TIMEOUT_S = 15.0

GPUS = (
    # index, uuid, bus id as nvidia-smi prints it
    (0, "GPU-3b5d6f1e-8a2c-4e7b-9d10-2f4a6c8e0b11", "00000000:81:00.0"),
    (1, "GPU-7c1e2a90-4b3d-4f6e-8a21-5d9c0e7f3a22", "00000000:C1:00.0"),
)

GOOD_CONFIG = """\
# rendered for a6000-phb
hardware_profile:
  gpu_topology:              # one entry per GPU LingBot uses (CUDA ordinal)
    - gpu_id: 0
      bus_id: "0000:81:00.0"
      peer_links:
        - target_gpu_id: 1
          path_type: PHB     # NV#, PIX, PXB, PHB, NODE, SYS
          bandwidth_gbps: 227.2   # measured, Gbit/s
          latency_ns: 132
    - gpu_id: 1
      bus_id: '0000:c1:00.0'
      peer_links:
        - {target_gpu_id: 0, path_type: PHB, bandwidth_gbps: 220.8, latency_ns: 135}
  p2p_threshold_gbps: 200.0  # Gbit/s
  layer_affinity:
    "embed_tokens": "gpu:0"
    "lm_head": "gpu:0"
    "layers.*": "gpu:1"
load_balancer:
  type: adaptive
  config:
    gpu_weights: {"gpu:0": 1.0, "gpu:1": 0.85}
kv_cache_strategy: p2p_direct
kv_cache_sync_interval_ms: 10
kv_cache_compression: fp16
debug_mode: true
"""


@dataclass
class FakeNode:
    root: Path
    config_path: Path
    model_path: Path
    env: dict[str, str] = field(default_factory=dict)

    def write_config(self, text: str, name: str = "config.yaml") -> Path:
        path = self.root / name
        path.write_text(text, encoding="utf-8")
        return path

    def write_nvidia_smi(self, rows: list[str], exit_code: int = 0) -> None:
        """An nvidia-smi that answers the stand-in's one query with ``rows``."""
        nvidia_smi = self.root / "bin" / "nvidia-smi"
        nvidia_smi.write_text(
            "#!/bin/sh\n"
            'if [ "$1 $2" != "--query-gpu=index,uuid,pci.bus_id --format=csv,noheader" ]; then\n'
            '  echo "unexpected arguments: $*" >&2; exit 4\n'
            "fi\n" + "".join(f"echo '{row}'\n" for row in rows) + f"exit {exit_code}\n",
            encoding="ascii",
        )
        nvidia_smi.chmod(0o755)

    def set_numa_node(self, bus_id: str, numa_node: int) -> None:
        device_dir = self.root / "sys" / "bus" / "pci" / "devices" / bus_id
        device_dir.mkdir(parents=True, exist_ok=True)
        (device_dir / "numa_node").write_text(f"{numa_node}\n", encoding="ascii")

    def base_args(self, gpus: str = "0,1") -> list[str]:
        return [
            "--config",
            str(self.config_path),
            "--model-path",
            str(self.model_path),
            "--gpus",
            gpus,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ]

    def command(self, args: list[str]) -> list[str]:
        python = os.environ.get("LINGBOT_STANDIN_PYTHON", sys.executable)
        return [python, "-m", "lingbot", *args]

    def run_to_exit(self, args: list[str], timeout_s: float = 20.0) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(args),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )


@pytest.fixture
def good_config() -> str:
    """config.yaml as LINGBOT.md shows it, for the fake node's two GPUs."""
    return GOOD_CONFIG


@pytest.fixture
def fake_node(tmp_path: Path) -> FakeNode:
    model_path = tmp_path / "model"
    model_path.mkdir()
    (model_path / "config.json").write_text('{"model_type": "llama"}\n', encoding="utf-8")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CUDA_", "LINGBOT_", "JOURNAL_STREAM"))
    }
    env.update(
        {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "PYTHONPATH": str(STANDIN_ROOT),
            "LINGBOT_SYSFS_ROOT": str(tmp_path),
            "LINGBOT_NVML_LIBRARY": str(tmp_path / "no-such-libnvidia-ml.so.1"),
            "LINGBOT_CUDA_LIBRARY": str(tmp_path / "no-such-libcuda.so.1"),
            "LINGBOT_LAB_NUMACTL_REQUEST": "--cpunodebind=0 --membind=0",
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "PYTHONUNBUFFERED": "1",
        }
    )
    node = FakeNode(tmp_path, tmp_path / "config.yaml", model_path, env)
    node.write_nvidia_smi([f"{index}, {uuid}, {bus_id}" for index, uuid, bus_id in GPUS])
    node.write_config(GOOD_CONFIG)
    node.set_numa_node("0000:81:00.0", 0)
    node.set_numa_node("0000:c1:00.0", 0)
    return node


@dataclass
class RunningServer:
    process: subprocess.Popen
    base_url: str
    stderr_path: Path

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def post(self, path: str, body: bytes) -> tuple[int, str]:
        request = urllib.request.Request(
            self.base_url + path,
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=10)


@pytest.fixture
def start_server(fake_node: FakeNode) -> Iterator:
    started: list[RunningServer] = []

    def start(args: list[str]) -> RunningServer:
        stderr_path = fake_node.root / f"stderr-{len(started)}.log"
        with stderr_path.open("w", encoding="utf-8") as stderr_file:
            process = subprocess.Popen(
                fake_node.command(args),
                env=fake_node.env,
                stdout=subprocess.PIPE,
                stderr=stderr_file,
                text=True,
            )
        server = RunningServer(process, "", stderr_path)
        started.append(server)
        assert process.stdout is not None
        readable, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
        line = process.stdout.readline() if readable else ""
        if not line.startswith("LingBot 0.4.2 listening on http://"):
            process.kill()
            process.wait()
            pytest.fail(f"server did not start: stdout {line!r}, stderr:\n{server.stderr()}")
        server.base_url = line.split(" on ", 1)[1].strip()
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()
        if server.process.stdout is not None:
            server.process.stdout.close()
