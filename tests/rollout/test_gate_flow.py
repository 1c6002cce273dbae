"""The gate's judge-and-roll-back flow under serial batches and max_fail_percentage 0.

Four local-connection hosts, each with its own generations and a config file the "change"
rewrites. A host made to fail its gate is restored byte for byte, the rollout stops before
the next batch (the nodes after it keep their file), and the output names node, gate and
evidence. The GPU measurements are given per host (tests/rollout/gate_flow.yml).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from test_gates import plan, probe

from lingbot_fleet.controller.playbook_run import PlaybookRun, run_playbook

REPO = Path(__file__).resolve().parents[2]
HOSTS = ("node-1", "node-2", "node-3", "node-4")
ORIGINAL = "old policy\n"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def node_dir(tmp_path: Path, host: str) -> Path:
    return tmp_path / host


def inventory(tmp_path: Path, per_host: dict[str, dict[str, Any]]) -> Path:
    hosts = {}
    for host in HOSTS:
        base = node_dir(tmp_path, host)
        (base / "etc").mkdir(parents=True)
        (base / "etc" / "policy.conf").write_text(ORIGINAL)
        hosts[host] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "generations_dir": str(base / "lingbot-fleet" / "generations"),
            "p2p_probe_save_dir": str(base / "probe"),
            "test_config_path": str(base / "etc" / "policy.conf"),
            "test_plan": plan(),
            "test_fresh_probe": probe(),
            **per_host.get(host, {}),
        }
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"gpu-nodes": {"hosts": hosts}}))
    return path


def rollout(tmp_path: Path, per_host: dict[str, dict[str, Any]], *extra: str) -> PlaybookRun:
    return run_playbook(
        REPO / "tests" / "rollout" / "gate_flow.yml",
        inventory=inventory(tmp_path, per_host),
        cmdline=extra,
        envvars={
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            # One line per summary line in the output (the yaml format wraps them).
            "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
            "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        },
        timeout_s=600,
    )


def config(tmp_path: Path, host: str) -> str:
    return (node_dir(tmp_path, host) / "etc" / "policy.conf").read_text()


def generations(tmp_path: Path, host: str) -> list[str]:
    root = node_dir(tmp_path, host) / "lingbot-fleet" / "generations"
    return sorted(p.name for p in root.iterdir() if p.name.isdigit()) if root.exists() else []


def test_every_node_passes_and_the_summary_says_so(tmp_path: Path) -> None:
    done = rollout(tmp_path, {})
    assert done.rc == 0, done.stdout
    assert [config(tmp_path, host) for host in HOSTS] == ["new policy\n"] * 4
    assert "batch 1/3 (canary) node-1: passed" in done.stdout
    assert "batch 2/3 node-3: passed" in done.stdout
    assert "rollout complete: 4 node(s) in 3 batch(es) passed" in done.stdout


def test_the_canary_failing_its_gate_is_rolled_back_and_stops_the_rollout(tmp_path: Path) -> None:
    done = rollout(tmp_path, {"node-1": {"test_fresh_probe": probe(p2p_gbytes_per_s=9.6)}})
    out = done.stdout
    assert done.rc == 2, out
    assert config(tmp_path, "node-1") == ORIGINAL
    assert (
        sha256(node_dir(tmp_path, "node-1") / "etc" / "policy.conf")
        == hashlib.sha256(ORIGINAL.encode()).hexdigest()
    )
    # The change was generation 1; the rollback is recorded as generation 2.
    assert generations(tmp_path, "node-1") == ["1", "2"]
    for host in HOSTS[1:]:
        assert config(tmp_path, host) == ORIGINAL
        assert generations(tmp_path, host) == []
    assert (
        "batch 1/3 (canary) node-1: FAILED gate probe_paths: pair 0->1 used by instance main "
        "9.6 GB/s is below the threshold 25 GB/s (planned on 28.4 GB/s)"
    ) in out
    assert "rolled back: generation 1 undone, node back to generation 0" in out
    assert "batch 2/3 node-2: not reached" in out
    assert "rollout stopped after batch 1/3 (canary)" in out
    assert "node-1 failed rollout gate(s) probe_paths" in out
    assert "Change each batch and gate every node" in out
    assert "rollout complete" not in out


def test_a_node_of_a_later_batch_fails_the_regression_gate(tmp_path: Path) -> None:
    saved = node_dir(tmp_path, "node-3") / "probe"
    saved.mkdir(parents=True)
    (saved / "latest.json").write_text(json.dumps(probe(h2d_gbytes_per_s=40.0)))
    done = rollout(tmp_path, {})
    out = done.stdout
    assert done.rc == 2, out
    assert [config(tmp_path, host) for host in HOSTS] == [
        "new policy\n",
        "new policy\n",
        ORIGINAL,
        ORIGINAL,
    ]
    assert "batch 2/3 node-2: passed (probe_regression skipped: no previous probe" in out
    assert (
        "batch 2/3 node-3: FAILED gate probe_regression: GPU 0 h2d 40 -> 24.6 GB/s (-38.5%)" in out
    )
    assert "batch 3/3 node-4: not reached" in out
    assert generations(tmp_path, "node-4") == []


def test_a_change_that_breaks_is_committed_then_rolled_back(tmp_path: Path) -> None:
    done = rollout(tmp_path, {"node-1": {"test_change_failure": "grub did not validate"}})
    out = done.stdout
    assert done.rc == 2, out
    assert config(tmp_path, "node-1") == ORIGINAL
    assert (
        "batch 1/3 (canary) node-1: FAILED gate change: task 'Break the change when asked' "
        "failed: grub did not validate -> rolled back: generation 1 undone"
    ) in out
    assert config(tmp_path, "node-2") == ORIGINAL


def test_an_unhealthy_instance_fails_the_node(tmp_path: Path) -> None:
    # lingbot_service's readiness result of an instance that is not ready.
    health = [
        {
            "item": {"name": "main", "port": 8000},
            "failed": False,
            "instance": "main",
            "msg": "no answer on 8000. Its last journal lines follow\nj1",
            "journal": ["j1"],
        }
    ]
    done = rollout(tmp_path, {"node-1": {"test_health": health}})
    assert done.rc == 2, done.stdout
    assert (
        "FAILED gate lingbot_health: lingbot@main.service is not healthy: no answer on 8000. "
        "Its last journal lines follow j1"
    ) in done.stdout
    assert config(tmp_path, "node-1") == ORIGINAL


def test_a_bad_batch_list_stops_before_any_change(tmp_path: Path) -> None:
    done = rollout(tmp_path, {}, "-e", '{"rollout_batches": [1, 0]}')
    assert done.rc == 2, done.stdout
    assert "rollout_batches item 2 (0): a batch needs at least 1 host" in done.stdout
    assert [config(tmp_path, host) for host in HOSTS] == [ORIGINAL] * 4


def test_a_node_lost_during_its_change_stops_the_rollout_and_is_named(tmp_path: Path) -> None:
    # Batches [node-1], [node-2, node-3], [node-4]: node-3 becomes unreachable after its
    # change saved its first file. Ansible alone would go on to node-4 (node-2 passed, so
    # the batch did not fail as a whole, and max_fail_percentage ignores unreachable hosts).
    done = rollout(tmp_path, {"node-3": {"test_lost_in_change": True}})
    out = done.stdout
    assert done.rc == 4, out
    assert done.host_recap("node-3")["dark"] == 1
    assert [config(tmp_path, host) for host in HOSTS] == [
        "new policy\n",
        "new policy\n",
        ORIGINAL,
        ORIGINAL,
    ]
    assert generations(tmp_path, "node-4") == []
    assert not (node_dir(tmp_path, "node-4") / "lingbot-fleet" / "generations" / "pending").exists()
    assert "batch 2/3 node-2: passed" in out
    assert (
        "batch 2/3 node-3: LOST during its change: it became unreachable, so it was neither "
        "gated nor rolled back and its state is unknown"
    ) in out
    assert "batch 3/3 node-4: not reached" in out
    assert (
        "rollout stopped after batch 2/3: node-3 became unreachable; the nodes not reached "
        "are unchanged"
    ) in out
    assert "rollout complete" not in out
