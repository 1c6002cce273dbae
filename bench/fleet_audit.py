"""Fleet audit benchmark: audit wall time against the floor of one trivial module per host.

Needs a booted lab (`lingbot-fleet lab up`, which writes inventory/lab/hosts.yml) and, for
the second figure, one node converged with site.yml. Repeats each lab node under several
inventory names (same ansible_host and port) to reach --hosts, then measures in one run:

1. `ansible gpu-nodes -m ping` on all of them (the floor), and `lingbot-fleet audit` on
   all of them, with the same forks; prints both and the ratio (target: 1.5x or less);
2. `ansible-playbook site.yml` (a no-op on a converged node) against `ansible -m ping` on
   that one node; prints both and the ratio.

Run from the repository root:
    .venv/bin/python bench/fleet_audit.py --hosts 50 --forks 50 --converged-host <lab node>
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LAB_INVENTORY = REPO / "inventory" / "lab" / "hosts.yml"
GROUP = "gpu-nodes"


def repeated_inventory(source: Path, count: int, target_dir: Path) -> Path:
    """An inventory of `count` hosts cycling over the lab's nodes, with the lab group_vars."""
    document = yaml.safe_load(source.read_text())
    group = document["all"]["children"][GROUP]
    nodes: list[tuple[str, dict[str, Any]]] = list(group["hosts"].items())
    if not nodes:
        raise SystemExit(f"{source} lists no host under {GROUP}; run `lingbot-fleet lab up`")
    hosts = {}
    for position in range(count):
        name, variables = nodes[position % len(nodes)]
        hosts[f"{name}-r{position:03d}"] = dict(variables or {})
    group_vars = source.parent / "group_vars"
    if group_vars.is_dir():
        shutil.copytree(group_vars, target_dir / "group_vars")
    inventory = target_dir / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {"all": {"children": {GROUP: {"hosts": hosts, "vars": group.get("vars") or {}}}}}
        )
    )
    return inventory


def timed(argv: list[str]) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if done.returncode not in (0, 1, 2):
        tail = (done.stdout + done.stderr)[-2000:]
        raise SystemExit(f"{' '.join(argv)} failed with exit code {done.returncode}:\n{tail}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", type=Path, default=LAB_INVENTORY)
    parser.add_argument("--hosts", type=int, default=50, help="inventory hosts (default 50)")
    parser.add_argument("--forks", type=int, default=50)
    parser.add_argument("--converged-host", help="a lab node already converged with site.yml")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lingbot-bench-") as temp:
        inventory = repeated_inventory(args.inventory, args.hosts, Path(temp))
        forks = str(args.forks)
        ansible, playbook = str(BIN / "ansible"), str(BIN / "ansible-playbook")
        cli = str(BIN / "lingbot-fleet")
        timed([ansible, GROUP, "-i", str(inventory), "-m", "ping", "-f", forks])  # warm-up
        ping_s = timed([ansible, GROUP, "-i", str(inventory), "-m", "ping", "-f", forks])
        audit_s = timed(
            [cli, "audit", "-i", str(inventory), "--forks", forks, "--report-dir", temp + "/r"]
        )
        print(f"{args.hosts} hosts, forks {forks}")
        print(f"  ping floor : {ping_s:7.2f} s")
        print(f"  audit      : {audit_s:7.2f} s")
        print(f"  ratio      : {audit_s / ping_s:7.2f} (target <= 1.5)")
    if args.converged_host:
        lab_inventory = str(args.inventory)
        host = args.converged_host
        ping_one_s = timed([ansible, host, "-i", lab_inventory, "-m", "ping"])
        site_s = timed([playbook, "site.yml", "-i", lab_inventory, "-l", host])
        print(f"converged node {host}")
        print(f"  ping       : {ping_one_s:7.2f} s")
        print(f"  site.yml   : {site_s:7.2f} s (no-op run)")
        print(f"  ratio      : {site_s / ping_one_s:7.2f}")


if __name__ == "__main__":
    main()
