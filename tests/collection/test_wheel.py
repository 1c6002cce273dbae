"""The CLI wheel in a fresh virtualenv: parse, plan, and an audit that runs the playbook
of the collection the wheel carries (on a simulated node tree, local connection)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from collection_support import REPO_ROOT, Built, WheelVenv, clean_environment, run

SAMPLES = REPO_ROOT / "tests" / "parsers" / "samples"
NODE_PYTHON = Path("/usr/bin/python3")


def test_parse_runs_from_the_wheel(wheel_venv: WheelVenv, built_collection: Built) -> None:
    sample = next(SAMPLES.glob("topo-*.txt"))
    done = run(
        [str(wheel_venv.cli), "parse", "topo", str(sample)],
        built_collection.workdir,
        clean_environment(),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gpus"]


def test_plan_runs_from_the_wheel(
    wheel_venv: WheelVenv, built_collection: Built, tmp_path: Path
) -> None:
    import sys

    sys.path.insert(0, str(REPO_ROOT / "tests" / "plan"))
    from plan_support import lab_inputs

    facts, probe = lab_inputs("a6000-phb")
    (tmp_path / "facts.json").write_text(json.dumps({"ansible_facts": {"lingbot_gpu": facts}}))
    (tmp_path / "probe.json").write_text(json.dumps(probe))
    argv = [
        str(wheel_venv.cli),
        "plan",
        "--facts",
        "facts.json",
        "--probe",
        "probe.json",
        "--explain",
    ]
    done = run(argv, tmp_path, clean_environment())
    assert done.returncode == 0, done.stderr
    assert "Instance main: numactl --cpunodebind=0 --membind=0, port 8000" in done.stdout


def test_the_wheel_runs_the_playbooks_of_the_collection_it_carries(
    wheel_venv: WheelVenv, built_collection: Built
) -> None:
    done = run([str(wheel_venv.cli), "playbooks"], built_collection.workdir, clean_environment())
    assert done.returncode == 0, done.stderr
    carried = wheel_venv.venv.glob("lib/python3*/site-packages/lingbot_fleet/_collection")
    playbooks_dir = next(carried) / "ansible_collections" / "lingbot" / "fleet" / "playbooks"
    lines = done.stdout.splitlines()
    assert f"wheel\t{playbooks_dir / 'audit.yml'}" in lines
    assert f"wheel\t{playbooks_dir / 'site.yml'}" in lines
    assert str(REPO_ROOT) not in done.stdout
    help_text = run(
        [str(wheel_venv.cli), "audit", "--help"], built_collection.workdir, clean_environment()
    )
    assert help_text.returncode == 0 and "--report-dir" in help_text.stdout


def test_the_wheels_audit_reports_a_simulated_node(
    wheel_venv: WheelVenv, built_collection: Built, tmp_path: Path
) -> None:
    from facts_support import LAB_LIB, LAB_SMI, boot_lab_node, load_profile

    node = boot_lab_node(load_profile("a6000-x8"), tmp_path)
    group_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": str(NODE_PYTHON),
        "fleet_audit_root": str(node.root),
        "gpu_facts_use_nvml": False,
        "gpu_facts_nvidia_smi": str(LAB_SMI),
    }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {"all": {"children": {"gpu-nodes": {"hosts": {"n1": None}, "vars": group_vars}}}}
        )
    )
    environment = clean_environment(
        LINGBOT_LAB_ROOT=str(node.lab_root), LINGBOT_LAB_LIB=str(LAB_LIB)
    )
    argv = [str(wheel_venv.cli), "audit", "-i", str(inventory), "--report-dir", "report"]
    done = run(argv, tmp_path, environment)
    assert done.returncode == 1, done.stdout + done.stderr  # findings at or above error
    [record] = json.loads((tmp_path / "report" / "fleet.json").read_text())["nodes"]
    assert record["host"] == "n1"
    codes = {finding["code"] for finding in record["findings"]}
    assert "KERNEL_PARAMS_NOT_IN_EFFECT" in codes
