"""Fleet speed: every entry point against the SSH floor, measured side by side in one run.

Needs a booted lab whose nodes are converged with site.yml (`make bench` does both). Each
lab node is repeated under several inventory names (same address and port) to reach 50 or
200 inventory hosts. For each comparison the floor (`ansible -m ping` on the same hosts with
the same forks) and the command run in turn, A B A B ..., and the ratio is the median of
the pair-by-pair ratios, so a drift of the machine's speed cancels out.

Targets (printed beside each ratio): no-op site.yml at most 6x the floor on one converged
node and on 50 hosts; the audit at most 1.3x at 50 and at 200 hosts. rollback.yml with
nothing to restore and rollout.yml over the converged fleet are printed without a target.
Last, the no-op run's per-task profile (from ansible-runner's events): where the time goes.

Run from the repository root:  .venv/bin/python bench/fleet_speed.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lingbot_fleet.controller.playbook_run import run_playbook, task_profile
from lingbot_fleet.node.state_dirs import GENERATIONS_DIR

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LAB_INVENTORY = REPO / "inventory" / "lab" / "hosts.yml"
GROUP = "gpu-nodes"
PARTS = ("site", "audit", "rollback", "rollout", "profile")


def lab_nodes(source: Path) -> list[tuple[str, dict[str, Any]]]:
    document = yaml.safe_load(source.read_text())
    group = document["all"]["children"][GROUP]
    nodes = list((group.get("hosts") or {}).items())
    if not nodes:
        raise SystemExit(f"{source} lists no host under {GROUP}; run `lingbot-fleet lab up`")
    return nodes


def inventory_of(
    source: Path, count: int, target_dir: Path, host_vars: dict[str, dict[str, Any]] | None = None
) -> Path:
    """`count` inventory hosts cycling over the lab's nodes, with the lab's group_vars."""
    document = yaml.safe_load(source.read_text())
    group = document["all"]["children"][GROUP]
    nodes = lab_nodes(source)
    hosts = {}
    for position in range(count):
        name, variables = nodes[position % len(nodes)]
        alias = name if count <= len(nodes) else f"{name}-r{position:03d}"
        hosts[alias] = {**(variables or {}), **(host_vars or {}).get(name, {})}
    target_dir.mkdir(parents=True, exist_ok=True)
    if (source.parent / "group_vars").is_dir():
        shutil.copytree(source.parent / "group_vars", target_dir / "group_vars")
    inventory = target_dir / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {"all": {"children": {GROUP: {"hosts": hosts, "vars": group.get("vars") or {}}}}}
        )
    )
    return inventory


# `lingbot-fleet audit` exits 1 when nodes have findings: the audit ran.
RAN_RCS = (0, 1)


def timed(argv: Sequence[str]) -> float:
    started = time.monotonic()
    done = subprocess.run(list(argv), cwd=REPO, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if done.returncode not in RAN_RCS:
        tail = (done.stdout + done.stderr)[-3000:]
        raise SystemExit(f"{' '.join(argv)} failed with exit status {done.returncode}:\n{tail}")
    return elapsed


def side_by_side(
    label: str, floor: Sequence[str], command: Sequence[str], repeats: int, target: float | None
) -> dict[str, Any]:
    """Floor and command in turn; the median of the pair-by-pair ratios."""
    timed(floor)  # warm-up: SSH control masters, page cache
    pairs = [(timed(floor), timed(command)) for _ in range(repeats)]
    ratios = [run / base for base, run in pairs]
    row = {
        "label": label,
        "floor_s": statistics.median(base for base, _ in pairs),
        "run_s": statistics.median(run for _, run in pairs),
        "ratio": statistics.median(ratios),
        "ratio_range": (min(ratios), max(ratios)),
        "target": target,
    }
    verdict = ""
    if target is not None:
        verdict = f"target <= {target:.1f}: {'met' if row['ratio'] <= target else 'NOT met'}"
    print(
        f"{label:<44} floor {row['floor_s']:6.2f} s  run {row['run_s']:6.2f} s  "
        f"ratio {row['ratio']:5.2f} ({row['ratio_range'][0]:.2f}-{row['ratio_range'][1]:.2f})"
        f"  {verdict}",
        flush=True,
    )
    return row


def newest_generations(inventory: Path, workdir: Path) -> dict[str, dict[str, Any]]:
    """Each lab node's newest generation number, so rollback_to it restores nothing."""
    playbook = workdir / "newest.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Find the generations",
                    "hosts": GROUP,
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "List the generations",
                            "ansible.builtin.find": {
                                "paths": GENERATIONS_DIR,
                                "file_type": "directory",
                                "patterns": ["[0-9]*"],
                            },
                        }
                    ],
                }
            ]
        )
    )
    run = run_playbook(playbook, inventory=inventory)
    newest: dict[str, dict[str, Any]] = {}
    for task in run.tasks:
        numbers = [int(Path(found["path"]).name) for found in task.result.get("files", [])]
        newest[task.host] = {"rollback_to": max(numbers, default=0)}
    return newest


@dataclass(frozen=True)
class Bench:
    lab: Path
    base: Path
    forks: str
    repeats: int
    ansible: str = str(BIN / "ansible")
    playbook: str = str(BIN / "ansible-playbook")
    cli: str = str(BIN / "lingbot-fleet")

    def ping(self, inventory: Path, limit: str = GROUP) -> list[str]:
        return [self.ansible, limit, "-i", str(inventory), "-m", "ping", "-f", self.forks]

    def play(self, inventory: Path, playbook: str, *extra: str) -> list[str]:
        return [self.playbook, "-i", str(inventory), playbook, "-f", self.forks, *extra]


def site_comparisons(bench: Bench, fifty: Path, first_node: str) -> None:
    side_by_side(
        f"no-op site.yml, 1 node ({first_node})",
        bench.ping(bench.lab, first_node),
        bench.play(bench.lab, "site.yml", "-l", first_node),
        bench.repeats,
        6.0,
    )
    side_by_side(
        "no-op site.yml, 50 hosts",
        bench.ping(fifty),
        bench.play(fifty, "site.yml"),
        bench.repeats,
        6.0,
    )


def audit_comparisons(bench: Bench, fifty: Path, sizes: list[int]) -> None:
    for size in sizes:
        inventory = fifty if size == 50 else inventory_of(bench.lab, size, bench.base / f"i{size}")
        audit = [bench.cli, "audit", "-i", str(inventory), "--forks", bench.forks]
        side_by_side(
            f"audit, {size} hosts",
            bench.ping(inventory),
            [*audit, "--report-dir", str(bench.base / f"r{size}")],
            bench.repeats,
            1.3,
        )


def profile(lab: Path, first_node: str) -> None:
    run = run_playbook(REPO / "site.yml", inventory=lab, limit=first_node)
    recap = run.host_recap(first_node)
    print(
        f"\nper-task profile of the no-op site.yml on {first_node} "
        f"(rc {run.rc}, changed {recap['changed']}, tasks {len(run.results(first_node))}):"
    )
    for name, seconds, runs in task_profile(run)[:25]:
        print(f"  {seconds:6.2f} s  {name}" + (f"  ({runs} runs)" if runs > 1 else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", type=Path, default=LAB_INVENTORY)
    parser.add_argument("--repeats", type=int, default=3, help="pairs per comparison")
    parser.add_argument("--forks", type=int, default=50)
    parser.add_argument("--sizes", default="50,200", help="inventory sizes for the audit")
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"which comparisons, in this order (default all: {','.join(PARTS)})",
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if not parts <= set(PARTS):
        parser.error(f"--parts: unknown {', '.join(sorted(parts - set(PARTS)))}")
    lab = args.inventory
    first_node = lab_nodes(lab)[0][0]
    print(f"lab nodes: {len(lab_nodes(lab))}, forks {args.forks}, {args.repeats} pairs each")
    with tempfile.TemporaryDirectory(prefix="lingbot-bench-") as temp:
        bench = Bench(lab=lab, base=Path(temp), forks=str(args.forks), repeats=args.repeats)
        fifty = inventory_of(lab, 50, bench.base / "i50")
        if "site" in parts:
            site_comparisons(bench, fifty, first_node)
        if "audit" in parts:
            audit_comparisons(bench, fifty, [int(size) for size in args.sizes.split(",")])
        if "rollback" in parts:
            nothing = inventory_of(
                lab, len(lab_nodes(lab)), bench.base / "rb", newest_generations(lab, bench.base)
            )
            side_by_side(
                "rollback.yml, nothing to restore, lab nodes",
                bench.ping(nothing),
                bench.play(nothing, "playbooks/rollback.yml", "-e", "rollback_confirm=true"),
                args.repeats,
                None,
            )
        if "rollout" in parts:
            side_by_side(
                "rollout.yml, converged lab nodes",
                bench.ping(lab),
                # The lab's faulty profiles (x8, chipset) would stop it at their link gate:
                # the bench times a rollout that goes through every batch.
                bench.play(lab, "playbooks/rollout.yml", "-e", "rollout_gate_link_fail_on=never"),
                max(1, args.repeats - 1),
                None,
            )
        if "profile" in parts:
            profile(lab, first_node)


if __name__ == "__main__":
    main()
