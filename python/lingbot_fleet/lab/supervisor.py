"""Keeps one lab node running: restarts systemd-nspawn when the node reboots.

`systemctl reboot` inside an nspawn container ends the nspawn process with exit status
133; a real server comes back, so the supervisor starts the container again. SIGTERM
asks the container to power off and ends the supervisor.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

EXIT_REBOOT = 133


def nspawn_argv(node: dict, merged_dir: Path) -> list[str]:
    return [
        "systemd-nspawn",
        "--quiet",
        "--register=no",
        "--keep-unit",
        "--boot",
        "--console=passive",
        f"--machine={node['machine']}",
        f"--directory={merged_dir}",
    ]


def run(node_dir: Path) -> int:
    node = json.loads((node_dir / "node.json").read_text())
    merged_dir = node_dir / "merged"
    console = open(node_dir / "console.log", "ab", buffering=0)  # noqa: SIM115 - lives as long as the process
    stopping = False
    child: subprocess.Popen | None = None

    def stop(_signum, _frame):
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    boots = 0
    while not stopping:
        boots += 1
        (node_dir / "boots").write_text(f"{boots}\n")
        console.write(f"--- lab supervisor: boot {boots} at {time.time():.0f}\n".encode())
        child = subprocess.Popen(
            nspawn_argv(node, merged_dir), stdin=subprocess.DEVNULL, stdout=console, stderr=console
        )
        status = child.wait()
        console.write(f"--- lab supervisor: container exited with status {status}\n".encode())
        if status != EXIT_REBOOT:
            break
    return 0


def main() -> int:
    return run(Path(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
