"""Right decisions on real machines, on the lab: a node with one GPU per NUMA node runs an
instance on each GPU, bound to its node; the layers of the lab model (config.json,
num_hidden_layers 4) are spread over both GPUs of a two-GPU node; a second run with a new
probe changes nothing."""

from __future__ import annotations

from lab_support import recap, run_playbook

RUNNING = r"""
import json, subprocess
units = subprocess.run(["systemctl", "list-units", "lingbot@*", "--no-legend", "--plain",
                        "--state=running"], capture_output=True, text=True).stdout.split()
out = {}
for unit in [u for u in units if u.startswith("lingbot@")]:
    pid = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit],
                         capture_output=True, text=True).stdout.strip()
    env = dict(line.split("=", 1) for line in
               open(f"/proc/{pid}/environ").read().split("\0") if "=" in line)
    argv = open(f"/proc/{pid}/cmdline").read().split("\0")
    out[unit] = {"argv": argv, "numactl": env.get("LINGBOT_LAB_NUMACTL_REQUEST")}
out["plan"] = json.load(open("/etc/lingbot/plan.json"))
print(json.dumps(out))
"""


def _argument(argv: list[str], option: str) -> str:
    return argv[argv.index(option) + 1]


def test_every_gpu_serves_and_layers_spread_and_a_new_probe_changes_nothing(booted_lab):
    split, phb = booted_lab.node("a6000-dual-socket"), booted_lab.node("a6000-phb")
    limit = f"{split.name},{phb.name}"
    first = run_playbook("site.yml", limit)
    assert first.rc == 0, first.stdout[-4000:]

    running = booted_lab.python(split, RUNNING)
    plan = running["plan"]
    assert plan["findings"] == []
    assert plan["unused_gpus"] == []
    instances = {i["name"]: i for i in plan["instances"]}
    assert sorted(instances) == sorted(
        u.split("@")[1][: -len(".service")] for u in running if u != "plan"
    )
    # Each GPU has its own instance, bound to the GPU's NUMA node.
    bindings = sorted(
        (i["gpus"], running[f"lingbot@{name}.service"]["numactl"]) for name, i in instances.items()
    )
    assert bindings == [
        ([0], "--cpunodebind=0 --membind=0"),
        ([1], "--cpunodebind=1 --membind=1"),
    ]
    for name in instances:
        assert _argument(running[f"lingbot@{name}.service"]["argv"], "--gpus") == "0"

    two = booted_lab.python(phb, RUNNING)
    [instance] = two["plan"]["instances"]
    assert instance["name"] == "main"
    assert instance["layer_affinity"] == {
        "embed_tokens": "gpu:0",
        "lm_head": "gpu:0",
        "layers.0": "gpu:0",
        "layers.1": "gpu:0",
        "layers.2": "gpu:1",
        "layers.3": "gpu:1",
    }
    config = booted_lab.run(phb, "cat /etc/lingbot/main/config.yaml").stdout
    assert 'layers.3: "gpu:1"' in config

    # site.yml probes again; the figures may move a little, nothing is rewritten.
    again = run_playbook("site.yml", limit)
    assert again.rc == 0, again.stdout[-4000:]
    for spec in (split, phb):
        assert recap(again, spec.name)["changed"] == 0, spec.name
