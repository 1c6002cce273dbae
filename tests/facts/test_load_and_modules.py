"""libcuda binding, the link read under sustained load, the role modules through AnsiballZ."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from facts_support import (
    LAB_SMI,
    REPO_ROOT,
    LabNode,
    a6000_pair,
    boot_lab_node,
    cuda_library,
    load_profile,
    nvml_library,
)

from lingbot_fleet.facts import gather_facts
from lingbot_fleet.facts.load import LinkReading, link_under_load
from lingbot_fleet.gpu.cuda import CudaDriver, CudaError, host_to_device_load
from lingbot_fleet.gpu.linkcheck import LinkPolicy, check_links

ANSIBLE = REPO_ROOT / ".venv" / "bin" / "ansible"
# A node's Python: the system interpreter, which has neither lingbot_fleet nor pynvml, so
# the module runs only on what AnsiballZ ships (pynvml is found through nvml_python_path).
NODE_PYTHON = Path("/usr/bin/python3")
VENV_SITE_PACKAGES = str(next((REPO_ROOT / ".venv" / "lib").glob("python3*/site-packages")))


@pytest.fixture
def idle_gen1_node(tmp_path: Path, lab_env: Any) -> LabNode:
    node = boot_lab_node(load_profile("a6000-idle-gen1"), tmp_path)
    lab_env(node)
    return node


def test_cuda_binding_reports_devices_and_copies(idle_gen1_node: LabNode) -> None:
    driver = CudaDriver(str(cuda_library()))
    assert driver.device_count() == 2
    assert driver.pci_bus_id(driver.device(1)) == idle_gen1_node.state["gpus"][1]["bdf"]
    result = host_to_device_load(driver, 0, 1 << 20, 0.05)
    assert result.copies >= 1
    assert result.copied_bytes == result.copies << 20
    assert result.elapsed_ms > 0
    busy_file = idle_gen1_node.lab_root / "run" / "lingbot-lab" / "busy" / "0"
    assert busy_file.exists()


def test_cuda_errors_name_the_call(idle_gen1_node: LabNode) -> None:
    driver = CudaDriver(str(cuda_library()))
    with pytest.raises(CudaError, match=r"^cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE"):
        driver.device(7)


def test_missing_libcuda_is_a_clear_error() -> None:
    with pytest.raises(
        CudaError, match=r"dlopen failed: LIBRARY_NOT_FOUND .*is the driver installed"
    ):
        CudaDriver("/nonexistent/libcuda.so.1")


def test_sustained_load_sees_gen4_in_p0_at_both_ends_on_idle_gen1(
    idle_gen1_node: LabNode, lab_pynvml: Any
) -> None:
    load = link_under_load(cuda_library=str(cuda_library()), duration_s=0.6, size_bytes=1 << 20)
    assert load["possible"] is True
    assert (load["sampler"], load["min_load_s"]) == ("nvml", 0.6)
    assert [gpu["bus_id"] for gpu in load["gpus"]] == ["0000:21:00.0", "0000:22:00.0"]
    for gpu in load["gpus"]:
        reading = gpu["reading"]
        assert reading["load_s"] >= 0.6
        assert (reading["gen"], reading["width"]) == (4, 16)
        assert (reading["pstate_before"], reading["performance_state"]) == ("P0", "P0")
        assert reading["pstate_after"] == "P0"
        assert gpu["copies"] > 1
    facts = gather_facts(idle_gen1_node.root)
    assert check_links(facts, LinkPolicy(), load) == []


def test_a_short_load_reads_gen1_and_is_not_judged(
    idle_gen1_node: LabNode, lab_pynvml: Any
) -> None:
    """The link of the idle-gen1 profile retrains only after 250 ms of copies: a reading
    after 20 ms (what the probe's few copies used to give) shows Gen1. The judge does not
    count it (too short a load) instead of failing a healthy link."""
    load = link_under_load(cuda_library=str(cuda_library()), duration_s=0.02, size_bytes=1 << 20)
    assert [gpu["reading"]["gen"] for gpu in load["gpus"]] == [1, 1]
    facts = gather_facts(idle_gen1_node.root)
    findings = check_links(facts, LinkPolicy(), load)
    assert [(f.code, f.severity) for f in findings] == [("PCIE_GEN_INDETERMINATE", "info")] * 2
    assert "less than the 0.5 s a link needs to train up" in findings[0].message
    # What judging that reading as before (any P0 sample) would have said:
    old_rule = check_links(facts, LinkPolicy(min_load_s=0.0), load)
    assert [f.code for f in old_rule] == ["PCIE_LINK_TRAINED_BELOW_CAPABILITY"] * 2


def test_a_pause_in_the_load_counts_the_minimum_load_again() -> None:
    # A starved load thread lets the GPU idle its link down: the reading must follow
    # min_load_s of copies without a break, not min_load_s since the first copy.
    sampled_at: list[float] = []

    def sampler(_bus_id: str) -> dict[str, Any]:
        sampled_at.append(time.monotonic())
        return {"gen": 4, "width": 16, "pstate": "P0"}

    with LinkReading(sampler, "0000:21:00.0", 0.6) as reading:
        started = time.monotonic()
        while time.monotonic() - started < 0.05:
            reading.done()
            time.sleep(0.005)
        # The break: longer than MIN_LOAD_BREAK_S and the usual copy, and still going on
        # when the reading would be due (0.6 s after the first copy).
        time.sleep(0.8)
        resumed = time.monotonic()
        while not reading.done():
            time.sleep(0.005)
    assert sampled_at, reading.result
    assert sampled_at[0] - resumed >= 0.6
    assert reading.result["load_s"] >= 0.6


def test_a_reading_needs_p0_at_both_ends() -> None:
    pstates = iter(["P0", "P0", "P8"])

    def sampler(_bus_id: str) -> dict[str, Any]:
        return {"gen": 4, "width": 16, "pstate": next(pstates)}

    with LinkReading(sampler, "0000:21:00.0", 0.01) as reading:
        while not reading.done():
            time.sleep(0.005)
    assert reading.result["pstate_before"] == "P0"
    assert reading.result["pstate_after"] == "P8"
    assert reading.result["load_s"] >= 0.01
    facts_gpu = {
        "index": 0,
        "bus_id": "0000:21:00.0",
        "model": "NVIDIA RTX A6000",
        "pcie": {"max_gen": 4, "max_gen_gpu": 4, "current_gen": 1},
    }
    from lingbot_fleet.gpu.linkcheck import generation_findings

    sample = {"possible": True, "reading": reading.result}
    findings = generation_findings(facts_gpu, LinkPolicy(min_load_s=0.01), sample)
    assert [f.code for f in findings] == ["PCIE_GEN_INDETERMINATE"]
    assert "not in P0 throughout the reading (before P0, during P0, after P8)" in (
        findings[0].message
    )


def test_link_under_load_without_libcuda_says_why(idle_gen1_node: LabNode, lab_pynvml: Any) -> None:
    load = link_under_load(cuda_library="/nonexistent/libcuda.so.1")
    assert load["possible"] is False
    assert "LIBRARY_NOT_FOUND" in load["reason"]


@pytest.fixture(autouse=True)
def _node_python() -> None:
    if not NODE_PYTHON.exists():
        pytest.skip(f"{NODE_PYTHON} (a Python without lingbot_fleet) is needed")


def run_module(
    node: LabNode, module: str, args: dict[str, Any], nvml: bool, tree: Path
) -> dict[str, Any]:
    """One ad-hoc module call through AnsiballZ, as a node would run it."""
    library_dirs = ":".join(
        str(REPO_ROOT / "roles" / r / "library") for r in ("gpu_facts", "gpu_checks")
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
        "ANSIBLE_LIBRARY": library_dirs,
        "LINGBOT_LAB_ROOT": str(node.lab_root),
        "LINGBOT_LAB_LIB": str(REPO_ROOT / "lab" / "node"),
    }
    if nvml:
        env["LD_LIBRARY_PATH"] = str(nvml_library().parent)
    argv = [
        str(ANSIBLE),
        "localhost",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-m",
        module,
        "-a",
        json.dumps(args),
        "-e",
        f"ansible_python_interpreter={NODE_PYTHON}",
        "--tree",
        str(tree),
    ]
    result = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT, check=False
    )
    assert (tree / "localhost").exists(), result.stdout + result.stderr
    return {**json.loads((tree / "localhost").read_text()), "ansible_rc": result.returncode}


@pytest.mark.parametrize("nvml", [True, False], ids=["nvml", "nvidia-smi"])
def test_gpu_facts_module_in_one_call(tmp_path: Path, lab_env: Any, nvml: bool) -> None:
    node = boot_lab_node(a6000_pair(), tmp_path)
    lab_env(node)
    args = {
        "root": str(node.root),
        "nvidia_smi": str(LAB_SMI),
        "use_nvml": nvml,
        "nvml_python_path": [VENV_SITE_PACKAGES],
    }
    result = run_module(node, "gpu_facts", args, nvml, tmp_path / "tree")
    assert result["ansible_rc"] == 0, result.get("msg")
    facts = result["ansible_facts"]["lingbot_gpu"]
    assert facts["sources"]["gpus"] == ("nvml" if nvml else "nvidia-smi")
    assert [gpu["uuid"] for gpu in facts["gpus"]] == [g["uuid"] for g in node.state["gpus"]]
    assert facts["topology"] == [["X", "PHB"], ["PHB", "X"]]
    assert result["pynvml_path"] == str(Path(VENV_SITE_PACKAGES) / "pynvml.py")
    assert result["pynvml_in_venv"] is None


def test_gpu_facts_module_says_whether_the_venv_holds_pynvml(tmp_path: Path, lab_env: Any) -> None:
    node = boot_lab_node(a6000_pair(), tmp_path)
    lab_env(node)
    venv = tmp_path / "venv"
    site_packages = venv / "lib" / "python3" / "site-packages"
    site_packages.mkdir(parents=True)
    source = Path(VENV_SITE_PACKAGES) / "pynvml.py"
    sha1 = hashlib.sha1(source.read_bytes()).hexdigest()
    args = {"root": str(node.root), "use_nvml": False, "nvidia_smi": str(LAB_SMI)}
    answers = []
    for content in (None, b"# another pynvml\n", source.read_bytes()):
        if content is not None:
            (site_packages / "pynvml.py").write_bytes(content)
        tree = tmp_path / f"tree{len(answers)}"
        with_sha1 = run_module(
            node, "gpu_facts", {**args, "pynvml_venv": str(venv), "pynvml_sha1": sha1}, False, tree
        )
        without = run_module(
            node, "gpu_facts", {**args, "pynvml_venv": str(venv)}, False, tree / "plain"
        )
        answers.append((with_sha1["pynvml_in_venv"], without["pynvml_in_venv"]))
    assert answers == [(False, False), (False, True), (True, True)]
    refused = run_module(node, "gpu_facts", {**args, "pynvml_sha1": sha1}, False, tmp_path / "t")
    assert refused["msg"] == "missing parameter(s) required by 'pynvml_sha1': pynvml_venv"


def test_lookup_finds_the_controllers_pynvml(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg")}
    argv = [str(ANSIBLE), "localhost", "-i", "localhost,", "-c", "local", "-m", "debug"]
    argv += ["-a", "msg={{ lookup('lingbot_pynvml', 'path', 'sha1', wantlist=True) }}"]
    done = subprocess.run(
        [*argv, "--tree", str(tree)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    path, sha1 = json.loads((tree / "localhost").read_text())["msg"]
    assert Path(path) == Path(VENV_SITE_PACKAGES) / "pynvml.py"
    assert sha1 == hashlib.sha1(Path(path).read_bytes()).hexdigest()


def test_gpu_link_check_module_fails_on_error_findings(tmp_path: Path, lab_env: Any) -> None:
    node = boot_lab_node(load_profile("a6000-x8"), tmp_path)
    lab_env(node)
    facts = gather_facts(node.root, use_nvml=False, smi_command=[sys.executable, str(LAB_SMI)])
    failing = run_module(node, "gpu_link_check", {"facts": facts}, False, tmp_path / "t1")
    assert failing["ansible_rc"] == 2
    assert failing["msg"].startswith("1 finding(s) at or above error: PCIE_WIDTH_BELOW_EXPECTED")
    args = {"facts": facts, "fail_on": "never"}
    reporting = run_module(node, "gpu_link_check", args, False, tmp_path / "t2")
    assert reporting["ansible_rc"] == 0
    assert reporting["counts"] == {"info": 0, "warning": 0, "error": 1, "critical": 0}


def probe_reading(bus_id: str, timestamp: str, load_s: float = 0.52) -> dict[str, Any]:
    reading = {"gen": 4, "width": 16, "performance_state": "P0", "load_s": load_s}
    reading |= {"pstate_before": "P0", "pstate_after": "P0"}
    return {"bus_id": bus_id, "index": 0, "uuid": "GPU-x", "link_under_load": reading}


def probe_of(node: LabNode, timestamp: str, load_s: float = 0.52) -> dict[str, Any]:
    gpus = []
    for gpu in node.state["gpus"]:
        entry = probe_reading(gpu["bdf"], timestamp, load_s)
        entry |= {"index": gpu["index"], "uuid": gpu["uuid"]}
        gpus.append(entry)
    return {"schema_version": 1, "timestamp": timestamp, "gpus": gpus, "pairs": []}


def sample_note(module: str, result: dict[str, Any]) -> str:
    return result["msg"] if module == "gpu_link_load" else result["load_note"]


# gpu_link_load on its own, and gpu_link_check, the role's one task, which takes the sample
# itself (gpu_link_load on the node) only when the probe's readings do not stand in.
@pytest.mark.parametrize("module", ["gpu_link_load", "gpu_link_check"])
def test_a_load_sample_is_taken_only_when_the_probe_does_not_stand(
    module: str, tmp_path: Path, lab_env: Any
) -> None:
    node = boot_lab_node(load_profile("a6000-idle-gen1"), tmp_path)
    lab_env(node)
    facts = gather_facts(node.root, use_nvml=False, smi_command=[sys.executable, str(LAB_SMI)])
    busy = node.lab_root / "run" / "lingbot-lab" / "busy"
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sample = {
        "cuda_library": str(cuda_library()),
        "nvidia_smi": str(LAB_SMI),
        "use_nvml": False,
        "duration_s": 0.6,
        "size_mib": 1,
    }
    if module == "gpu_link_load":
        args, check = {"facts": facts, **sample}, True
    else:
        args, check = {"facts": facts, "sample": sample, "fail_on": "never"}, False
    fresh = run_module(node, module, {**args, "probe": probe_of(node, now)}, check, tmp_path / "t1")
    assert fresh["ansible_rc"] == 0, fresh.get("msg")
    assert fresh["load"] is None
    assert sample_note(module, fresh) == (
        f"the readings of the probe of {now} stand: no load sample taken"
    )
    assert not list(busy.glob("*"))
    day_old = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 86400))
    stale_probe = probe_of(node, day_old)
    stale = run_module(node, module, {**args, "probe": stale_probe}, check, tmp_path / "t2")
    assert stale["ansible_rc"] == 0, stale.get("msg")
    assert sample_note(module, stale).startswith(f"load sampled: the probe of {day_old} is 864")
    assert [gpu["reading"]["gen"] for gpu in stale["load"]["gpus"]] == [4, 4]
    short = probe_of(node, now, load_s=0.02)
    taken = run_module(node, module, {**args, "probe": short}, check, tmp_path / "t3")
    assert sample_note(module, taken).startswith(
        "load sampled: the probe's reading of GPU 0 does not count"
    )
    assert taken["load"]["possible"] is True
    if module == "gpu_link_check":
        # The sample is what was judged: an idle Gen1 GPU at Gen4 under load is no finding.
        assert not [f for f in stale["findings"] if f["code"].startswith("PCIE_GEN")]
        alone = {"facts": facts, "fail_on": "never"}
        without = run_module(node, module, alone, check, tmp_path / "t4")
        assert (without["load"], without["load_note"]) == (None, None)


def test_the_judge_uses_a_probe_reading_only_while_fresh(idle_gen1_node: LabNode) -> None:
    facts = gather_facts(
        idle_gen1_node.root, use_nvml=False, smi_command=[sys.executable, str(LAB_SMI)]
    )
    from lingbot_fleet.gpu.linkcheck import judge_links

    now_s = time.time()
    taken = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_s - 7200))
    probe = probe_of(idle_gen1_node, taken)
    for gpu in probe["gpus"]:
        gpu["link_under_load"]["gen"] = 3  # what a degraded link would read
    stale, _ = judge_links(facts, {}, probe=probe, probe_max_age_s=3600, now_s=now_s)
    assert stale["findings"] == []
    fresh, failure = judge_links(facts, {}, probe=probe, probe_max_age_s=10800, now_s=now_s)
    assert [f["code"] for f in fresh["findings"]] == ["PCIE_LINK_TRAINED_BELOW_CAPABILITY"] * 2
    assert failure is not None
