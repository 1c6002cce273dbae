"""nvidia-persistenced: the unit's ExecStart, the drop-in, the GPUs, the one-call module."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from facts_support import LAB_SMI, REPO_ROOT, a6000_pair, boot_lab_node, nvml_library

from lingbot_fleet.gpu import persistence
from lingbot_fleet.gpu.persistence import GpuRead, PersistenceError, UnitState
from lingbot_fleet.node import systemd as systemd_show

LAB_UNIT = REPO_ROOT / "lab" / "node" / "systemd" / "nvidia-persistenced.service"
FRAGMENT = "/lib/systemd/system/nvidia-persistenced.service"
DROPIN_DIR = "/etc/systemd/system/nvidia-persistenced.service.d"
DROPIN = f"{DROPIN_DIR}/lingbot-fleet.conf"
DAEMON = "/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose"
ANSIBLE = REPO_ROOT / ".venv" / "bin" / "ansible"
NODE_PYTHON = Path("/usr/bin/python3")
VENV_SITE_PACKAGES = str(next((REPO_ROOT / ".venv" / "lib").glob("python3*/site-packages")))


def lab_unit(args: str) -> str:
    return LAB_UNIT.read_text().replace("@PERSISTENCED_ARGS@", args)


def unit(dropins: tuple[str, ...] = (), **changes: Any) -> UnitState:
    fields: dict[str, Any] = {
        "name": "nvidia-persistenced.service",
        "fragment_path": FRAGMENT,
        "dropin_paths": dropins,
        "unit_file_state": "enabled",
        "active_state": "active",
        "main_pid": 0,
        "need_daemon_reload": False,
    }
    return UnitState(**{**fields, **changes})


def reader(files: dict[str, str]) -> Any:
    return files.get


# --- ExecStart -----------------------------------------------------------------------


def test_exec_start_with_the_flag_and_its_fix() -> None:
    command, origin = persistence.exec_start_of([(FRAGMENT, lab_unit("--no-persistence-mode"))])
    assert command == f"{DAEMON} --no-persistence-mode"
    assert origin == FRAGMENT
    assert persistence.has_flag(command)
    assert persistence.without_flag(command) == DAEMON


def test_last_exec_start_wins_and_other_sections_are_ignored() -> None:
    text = (
        "[Unit]\nExecStart=/bin/false\n"
        "[Service]\nExecStart=/bin/a\nExecStart=\nExecStart=/bin/b -x\n"
    )
    assert persistence.exec_start_of([("/u", text)]) == ("/bin/b -x", "/u")
    later = ("/d/z.conf", "[Service]\nExecStart=\nExecStart=/bin/c\n")
    assert persistence.exec_start_of([("/u", text), later]) == ("/bin/c", "/d/z.conf")


def test_dropins_apply_by_file_name_across_directories() -> None:
    paths = ["/etc/systemd/system/x.d/b.conf", "/run/systemd/system/x.d/a.conf"]
    assert persistence.dropin_order(paths) == list(reversed(paths))


def test_show_output_becomes_the_unit_state() -> None:
    show = systemd_show.parse_properties(
        "LoadState=loaded\nFragmentPath=/lib/systemd/system/nvidia-persistenced.service\n"
        f"DropInPaths={DROPIN} /run/x.conf\nUnitFileState=disabled\nActiveState=inactive\n"
        "MainPID=0\nNeedDaemonReload=yes\n"
    )
    state = persistence.unit_state("nvidia-persistenced.service", show)
    assert state.dropin_paths == (DROPIN, "/run/x.conf")
    assert (state.enabled, state.active, state.need_daemon_reload) == (False, False, True)


def test_missing_and_masked_units_name_the_fix() -> None:
    with pytest.raises(PersistenceError, match=r"^unit n.service is not installed .*package"):
        persistence.unit_state("n.service", {"LoadState": "not-found", "FragmentPath": ""})
    masked = {"LoadState": "masked", "FragmentPath": "/dev/null", "UnitFileState": "masked"}
    with pytest.raises(PersistenceError, match=r"systemctl unmask n.service"):
        persistence.unit_state("n.service", masked)


# --- the drop-in ---------------------------------------------------------------------


def test_a_unit_with_the_flag_gets_a_dropin_without_it() -> None:
    plan = persistence.plan_unit(
        unit(), DROPIN, reader({FRAGMENT: lab_unit("--no-persistence-mode")})
    )
    assert plan.no_persistence_mode is True
    assert plan.dropin is not None
    assert plan.dropin.endswith(f"[Service]\nExecStart=\nExecStart={DAEMON}\n")
    assert plan.exec_start_before == f"{DAEMON} --no-persistence-mode"
    assert plan.exec_start_after == DAEMON


def test_the_dropin_goes_once_the_unit_no_longer_needs_it() -> None:
    ours = persistence.dropin_text(FRAGMENT, DAEMON)
    files = {FRAGMENT: lab_unit(""), DROPIN: ours}
    plan = persistence.plan_unit(unit((DROPIN,)), DROPIN, reader(files))
    assert plan.dropin is None
    assert plan.exec_start_before == plan.exec_start_after == DAEMON.strip()


def test_a_converged_unit_keeps_its_exec_start() -> None:
    files = {FRAGMENT: lab_unit("--no-persistence-mode")}
    files[DROPIN] = persistence.dropin_text(FRAGMENT, DAEMON)
    plan = persistence.plan_unit(unit((DROPIN,)), DROPIN, reader(files))
    assert plan.dropin == files[DROPIN]
    assert plan.exec_start_before == plan.exec_start_after == DAEMON


def test_an_earlier_dropin_with_the_flag_is_fixed_by_ours() -> None:
    early = f"{DROPIN_DIR}/10-args.conf"
    files = {
        FRAGMENT: lab_unit(""),
        early: "[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced -V "
        "--no-persistence-mode\n",
    }
    plan = persistence.plan_unit(unit((early,)), DROPIN, reader(files))
    assert plan.exec_start_after == "/usr/bin/nvidia-persistenced -V"


def test_a_later_dropin_with_the_flag_fails_naming_it() -> None:
    late = f"{DROPIN_DIR}/override.conf"
    files = {
        FRAGMENT: lab_unit(""),
        late: "[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced "
        "--no-persistence-mode\n",
    }
    with pytest.raises(PersistenceError, match=rf"^{late} sets ExecStart .* applies it after"):
        persistence.plan_unit(unit((late,)), DROPIN, reader(files))


def test_a_unit_without_exec_start_is_refused() -> None:
    with pytest.raises(PersistenceError, match="has no ExecStart in \\[Service\\]"):
        persistence.plan_unit(unit(), DROPIN, reader({FRAGMENT: "[Service]\nType=forking\n"}))


def test_the_running_daemon_is_read_from_proc(tmp_path: Path) -> None:
    (tmp_path / "proc" / "42").mkdir(parents=True)
    (tmp_path / "proc" / "42" / "cmdline").write_bytes(b"/usr/bin/x\0--no-persistence-mode\0")
    assert persistence.running_with_flag(42, str(tmp_path)) is True
    assert persistence.running_with_flag(43, str(tmp_path)) is False
    assert persistence.running_with_flag(0, str(tmp_path)) is False


# --- the GPUs ------------------------------------------------------------------------


def test_lost_gpus_keep_their_place_with_the_sysfs_bus_id() -> None:
    gpus = [
        {"index": 0, "bus_id": "0000:41:00.0", "lost": False, "persistence_mode": True},
        {"index": 1, "lost": True, "error": "GPU is lost"},
    ]
    merged = persistence.with_lost_gpus(gpus, ["0000:41:00.0", "0000:42:00.0", "0000:43:00.0"])
    assert [(g["bus_id"], g["lost"]) for g in merged] == [
        ("0000:41:00.0", False),
        ("0000:42:00.0", True),
        ("0000:43:00.0", True),
    ]
    assert merged[1]["error"] == "GPU is lost"
    assert persistence.gpus_off(merged) == []


def test_reads_repeat_until_every_gpu_is_on() -> None:
    states = iter([None, False, True])
    sleeps: list[float] = []

    def read() -> GpuRead:
        mode = next(states)
        return GpuRead([{"index": 0, "bus_id": "b", "lost": False, "persistence_mode": mode}], "x")

    last, reads = persistence.read_until_on(read, 5, 0.5, sleeps.append)
    assert (reads, sleeps, last.gpus[0]["persistence_mode"]) == (3, [0.5, 0.5], True)


def test_reads_stop_after_the_retries() -> None:
    def read() -> GpuRead:
        return GpuRead([{"index": 0, "bus_id": "b", "lost": False, "persistence_mode": False}], "x")

    _last, reads = persistence.read_until_on(read, 2, 0, lambda _s: None)
    assert reads == 3


def test_nvml_and_nvidia_smi_read_the_lab_gpus(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    node = boot_lab_node(a6000_pair(faults=[{"kind": "gpu_lost", "gpu": 1}]), tmp_path)
    lab_env(node)
    persistence_dir = node.lab_root / "run" / "lingbot-lab" / "persistence"
    persistence_dir.mkdir(parents=True, exist_ok=True)
    (persistence_dir / "0").write_text("1\n")
    nvml = persistence.read_gpus(True, [], ["nvidia-smi"], str(node.root))
    smi = persistence.read_gpus(False, [], [str(LAB_SMI)], str(node.root))
    for read in (nvml, smi):
        assert [(g["bus_id"], g["lost"], g["persistence_mode"]) for g in read.gpus] == [
            ("0000:41:00.0", False, True),
            ("0000:42:00.0", True, None),
        ]
    assert (nvml.source, smi.source) == ("nvml", "nvidia-smi")
    assert smi.notes == ("NVML not used: turned off by the caller; read through nvidia-smi",)


def test_no_driver_at_all_is_a_clear_error(tmp_path: Path, no_pynvml: None) -> None:
    with pytest.raises(PersistenceError, match=r"^persistence mode cannot be read: .*nvidia-smi"):
        persistence.read_gpus(True, [], [str(tmp_path / "nvidia-smi")], str(tmp_path))


# --- the module, through AnsiballZ ------------------------------------------------------

FAKE_SYSTEMCTL = """\
#!{python}
# systemctl for tests: `show` answers from a state file, other verbs are logged; start and
# restart play the daemon (persistence mode on unless the state says it fails to).
import json, os, sys
state_path = os.environ["FAKE_SYSTEMCTL_STATE"]
state = json.load(open(state_path))
root = state["root"]
args = sys.argv[1:]
if args[0] == "show":
    dropin = os.path.join(root, "{dropin}".lstrip("/"))
    print("LoadState=loaded")
    print("FragmentPath={fragment}")
    print("DropInPaths=" + ("{dropin}" if os.path.exists(dropin) else ""))
    print("UnitFileState=" + state["unit_file_state"])
    print("ActiveState=" + state["active_state"])
    print("MainPID=" + ("4242" if state["active_state"] == "active" else "0"))
    print("NeedDaemonReload=no")
    sys.exit(0)
state["calls"].append(args)
if args[0] in ("start", "restart"):
    state["active_state"] = "active"
    if state.get("enables_persistence", True):
        for index in range(state["gpu_count"]):
            path = os.path.join(state["persistence_dir"], str(index))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").write("1\\n")
if args[0] == "enable":
    state["unit_file_state"] = "enabled"
json.dump(state, open(state_path, "w"))
"""


class FakeNode:
    """A lab node's tree with a unit file, a fake systemctl and the lab's NVML."""

    def __init__(self, tmp_path: Path, lab_env: Any, unit_args: str = "--no-persistence-mode"):
        self.lab = boot_lab_node(a6000_pair(), tmp_path)
        lab_env(self.lab)
        self.root = self.lab.root
        fragment = self.root / FRAGMENT.lstrip("/")
        fragment.parent.mkdir(parents=True)
        fragment.write_text(lab_unit(unit_args))
        self.state_path = tmp_path / "systemctl.json"
        self.write_state(
            {
                "root": str(self.root),
                "unit_file_state": "disabled",
                "active_state": "inactive",
                "calls": [],
                "gpu_count": 2,
                "persistence_dir": str(self.lab.lab_root / "run" / "lingbot-lab" / "persistence"),
            }
        )
        self.systemctl = tmp_path / "systemctl"
        self.systemctl.write_text(
            FAKE_SYSTEMCTL.format(python=NODE_PYTHON, dropin=DROPIN, fragment=FRAGMENT)
        )
        self.systemctl.chmod(self.systemctl.stat().st_mode | stat.S_IXUSR)
        self.tmp_path = tmp_path
        self.runs = 0

    @property
    def state(self) -> dict[str, Any]:
        return json.loads(self.state_path.read_text())

    def write_state(self, state: dict[str, Any]) -> None:
        self.state_path.write_text(json.dumps(state))

    def dropin(self) -> Path:
        return self.root / DROPIN.lstrip("/")

    def run(self, check: bool = False, **args: Any) -> dict[str, Any]:
        self.runs += 1
        tree = self.tmp_path / f"tree{self.runs}"
        module_args = {
            "root": str(self.root),
            "systemctl": str(self.systemctl),
            "nvml_python_path": [VENV_SITE_PACKAGES],
            "verify_delay_s": 0,
            "generation_run_id": "20250101T000000Z-1",
            # The drop-in alone, unless a test asks for the modules-load.d file too.
            "uvm_at_boot": False,
            **args,
        }
        argv = [
            str(ANSIBLE),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-m",
            "nvidia_persistence",
            "-a",
            json.dumps(module_args),
            "-e",
            f"ansible_python_interpreter={NODE_PYTHON}",
            "--tree",
            str(tree),
            *(["--check"] if check else []),
        ]
        env = {
            **os.environ,
            "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
            "ANSIBLE_LIBRARY": str(REPO_ROOT / "roles" / "nvidia_persistence" / "library"),
            "LINGBOT_LAB_ROOT": str(self.lab.lab_root),
            "LINGBOT_LAB_LIB": str(REPO_ROOT / "lab" / "node"),
            "LD_LIBRARY_PATH": str(nvml_library().parent),
            "FAKE_SYSTEMCTL_STATE": str(self.state_path),
        }
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT, check=False
        )
        assert (tree / "localhost").exists(), done.stdout + done.stderr
        return {**json.loads((tree / "localhost").read_text()), "ansible_rc": done.returncode}


@pytest.fixture
def fake_node(tmp_path: Path, lab_env: Any) -> FakeNode:
    if not NODE_PYTHON.exists():
        pytest.skip(f"{NODE_PYTHON} (a Python without lingbot_fleet) is needed")
    return FakeNode(tmp_path, lab_env)


def test_module_writes_the_dropin_starts_the_daemon_and_verifies(fake_node: FakeNode) -> None:
    first = fake_node.run()
    assert first["ansible_rc"] == 0, first.get("msg")
    assert first["actions"] == [
        f"create {DROPIN}",
        "run systemctl daemon-reload",
        "enable nvidia-persistenced.service",
        "start nvidia-persistenced.service",
    ]
    assert fake_node.dropin().read_text().endswith(f"ExecStart=\nExecStart={DAEMON}\n")
    assert (first["verified"], first["source"], first["restarted"]) == (True, "nvml", True)
    assert [gpu["persistence_mode"] for gpu in first["gpus"]] == [True, True]
    facts = first["ansible_facts"]
    assert facts["lingbot_generation_pending"] == "20250101T000000Z-1"
    assert [gpu["persistence_mode"] for gpu in facts["lingbot_gpu"]["gpus"]] == [True, True]
    manifest = fake_node.root / "var/lib/lingbot-fleet/generations/pending"
    recorded = json.loads((manifest / "20250101T000000Z-1" / "manifest.json").read_text())
    assert [(f["path"], f["before"]["exists"]) for f in recorded["files"]] == [(DROPIN, False)]

    second = fake_node.run()
    assert second["ansible_rc"] == 0, second.get("msg")
    assert (second["changed"], second["actions"], second["restarted"]) == (False, [], False)
    assert second["verified"] is True
    assert "ansible_facts" not in second
    assert fake_node.state["calls"] == [
        ["daemon-reload"],
        ["enable", "nvidia-persistenced.service"],
        ["start", "nvidia-persistenced.service"],
    ]


def test_check_mode_says_what_it_would_do_and_does_nothing(fake_node: FakeNode) -> None:
    state = fake_node.state
    fake_node.write_state({**state, "active_state": "active", "unit_file_state": "enabled"})
    result = fake_node.run(check=True)
    assert result["ansible_rc"] == 0, result.get("msg")
    assert result["changed"] is True
    assert result["actions"] == [
        f"would create {DROPIN}",
        "would run systemctl daemon-reload",
        "would restart nvidia-persistenced.service with its new ExecStart",
    ]
    assert result["changed_paths"] == [DROPIN]
    assert result["notes"] == ["check mode: nothing restarted, persistence mode not verified"]
    assert not fake_node.dropin().exists()
    assert not (fake_node.root / "var").exists()
    assert fake_node.state["calls"] == []


def test_the_dropin_is_removed_when_the_unit_is_fixed(fake_node: FakeNode) -> None:
    assert fake_node.run()["ansible_rc"] == 0
    fragment = fake_node.root / FRAGMENT.lstrip("/")
    fragment.write_text(lab_unit(""))
    result = fake_node.run()
    assert result["ansible_rc"] == 0, result.get("msg")
    assert result["actions"] == [
        f"remove {DROPIN}",
        f"remove the directory {DROPIN_DIR}",
        "run systemctl daemon-reload",
    ]
    assert not fake_node.dropin().parent.exists()


def test_persistence_off_fails_naming_the_gpus_and_the_fix(fake_node: FakeNode) -> None:
    fake_node.write_state({**fake_node.state, "enables_persistence": False})
    result = fake_node.run(verify_retries=1)
    assert result["ansible_rc"] != 0
    assert result["msg"] == (
        "persistence mode is off on GPU(s) 0000:41:00.0, 0000:42:00.0 after 2 read(s), "
        f"although nvidia-persistenced.service runs with ExecStart {DAEMON}; check its "
        "ExecStart (systemctl cat nvidia-persistenced.service) and the daemon's log "
        "(journalctl -u nvidia-persistenced.service), or turn it on by hand with "
        "nvidia-smi -pm 1"
    )
    assert result["changed_paths"] == [DROPIN]


def test_persistence_turned_off_later_gets_one_restart(fake_node: FakeNode) -> None:
    assert fake_node.run()["ansible_rc"] == 0
    persistence_dir = Path(fake_node.state["persistence_dir"])
    (persistence_dir / "1").write_text("0\n")
    result = fake_node.run()
    assert result["ansible_rc"] == 0, result.get("msg")
    assert result["actions"] == [
        "restart nvidia-persistenced.service: persistence mode was off on GPU(s) 0000:42:00.0"
    ]
    assert (result["verified"], result["reads"]) == (True, 2)


@pytest.mark.parametrize(
    "module_path",
    [
        "roles/nvidia_persistence/library/nvidia_persistence.py",
        "roles/gpu_facts/library/gpu_facts.py",
    ],
)
def test_module_documentation_parses_and_names_every_option(module_path: str) -> None:
    import re

    import yaml

    source = (REPO_ROOT / module_path).read_text()
    blocks = {
        name: yaml.safe_load(source.split(f'{name} = r"""')[1].split('"""')[0])
        for name in ("DOCUMENTATION", "EXAMPLES", "RETURN")
    }
    spec = source.split("argument_spec={")[1].split("supports_check_mode")[0]
    in_spec = dict(re.findall(r'"(\w+)": \{\s*"type": "(\w+)"', spec))
    if "**persistence.ARGUMENT_SPEC" in spec:  # the options nvidia_persistence shares
        in_spec |= {name: option["type"] for name, option in persistence.ARGUMENT_SPEC.items()}
    documented = {
        name: option["type"] for name, option in blocks["DOCUMENTATION"]["options"].items()
    }
    assert documented == in_spec
    assert set(blocks["DOCUMENTATION"]["attributes"]) >= {"check_mode", "diff_mode"}


def test_nvidia_uvm_is_loaded_at_every_boot(fake_node: FakeNode) -> None:
    uvm = fake_node.root / "etc/modules-load.d/lingbot-fleet-nvidia-uvm.conf"
    checked = fake_node.run(check=True, uvm_at_boot=True)
    assert checked["ansible_rc"] == 0, checked.get("msg")
    assert (
        f"would create {uvm.relative_to(fake_node.root).as_posix().join(['/', ''])}"
        in (checked["actions"])
    )
    assert not uvm.exists()
    first = fake_node.run(uvm_at_boot=True)
    assert first["ansible_rc"] == 0, first.get("msg")
    assert uvm.read_text().splitlines()[-1] == "nvidia-uvm"
    assert "nvidia-uvm: the NVIDIA kernel driver is not loaded here" in first["notes"]
    again = fake_node.run(uvm_at_boot=True)
    assert (again["changed"], again["actions"]) == (False, [])


# --- gpu_facts' assessment and the controller's answer from it -----------------------


def assessment_of(fake_node: FakeNode, **options: Any) -> dict[str, Any]:
    """What gpu_facts reports for the fake node: the module's own steps in check mode."""
    from lingbot_fleet.node.nodefiles import NodeChanges

    env = {**os.environ, "FAKE_SYSTEMCTL_STATE": str(fake_node.state_path)}
    shown = subprocess.run(
        [str(NODE_PYTHON), str(fake_node.systemctl), "show", "nvidia-persistenced.service"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    return persistence.assess(
        NodeChanges(check_mode=True, root=str(fake_node.root)),
        systemd_show.parse_properties(shown),
        unit="nvidia-persistenced.service",
        dropin_dir=options.get("dropin_dir", DROPIN_DIR),
        uvm_at_boot=options.get("uvm_at_boot", False),
        systemctl=str(fake_node.systemctl),
        modprobe=None,
        root=str(fake_node.root),
        now_s=1000.0,
    )


def test_the_assessment_is_what_the_module_would_do(fake_node: FakeNode) -> None:
    state = fake_node.state
    fake_node.write_state({**state, "active_state": "active", "unit_file_state": "enabled"})
    before = assessment_of(fake_node)
    check = fake_node.run(check=True)
    assert before["pending"] == check["actions"]
    assert before["pending"] and before["error"] is None
    assert not fake_node.dropin().exists(), "the assessment wrote nothing"

    assert fake_node.run()["ansible_rc"] == 0
    after = assessment_of(fake_node)
    assert (after["pending"], after["error"]) == ([], None)
    assert after["exec_start"] == DAEMON
    assert after["dropin"] == {"path": DROPIN, "state": "present"}
    assert fake_node.run(check=True)["actions"] == []

    # The modules-load.d file is part of it when the role keeps nvidia-uvm at boot.
    with_uvm = assessment_of(fake_node, uvm_at_boot=True)
    assert with_uvm["pending"] == [f"would create {persistence.UVM_MODULES_LOAD}"]


def test_a_broken_unit_is_an_assessment_error_not_an_answer(fake_node: FakeNode) -> None:
    (fake_node.root / FRAGMENT.lstrip("/")).write_text("[Service]\nType=forking\n")
    assessment = assessment_of(fake_node)
    assert "has no ExecStart" in assessment["error"]
    assert persistence.controller_answer(OPTIONS, assessment, FACTS_ALL_ON, 1000.0) is None


OPTIONS = {
    "unit": "nvidia-persistenced.service",
    "dropin_dir": DROPIN_DIR,
    "verify": True,
    "uvm_at_boot": True,
    "root": "/",
}
ASSESSED = {
    "unit": "nvidia-persistenced.service",
    "dropin_dir": DROPIN_DIR,
    "uvm_at_boot": True,
    "root": "/",
    "read_at_s": 1000.0,
    "error": None,
    "notes": [],
    "pending": [],
    "fragment_path": FRAGMENT,
    "exec_start": DAEMON,
    "no_persistence_mode": False,
    "dropin": {"path": DROPIN, "state": "absent"},
}
FACTS_ALL_ON = {
    "sources": {"gpu_state": "nvml"},
    "gpus": [
        {"index": 0, "bus_id": "0000:17:00.0", "lost": False, "persistence_mode": True},
        {"index": 1, "bus_id": "0000:65:00.0", "lost": False, "persistence_mode": True},
    ],
}


def test_the_controller_answers_only_for_a_node_that_needs_nothing() -> None:
    answer = persistence.controller_answer(OPTIONS, ASSESSED, FACTS_ALL_ON, 1010.0)
    assert answer is not None
    assert (answer["changed"], answer["actions"], answer["restarted"]) == (False, [], False)
    assert (answer["verified"], answer["source"], answer["exec_start"]) == (True, "nvml", DAEMON)
    assert [gpu["bus_id"] for gpu in answer["gpus"]] == ["0000:17:00.0", "0000:65:00.0"]

    gpu_off = {**FACTS_ALL_ON, "gpus": [{**FACTS_ALL_ON["gpus"][0], "persistence_mode": False}]}
    gpu_lost = {**FACTS_ALL_ON, "gpus": [{**FACTS_ALL_ON["gpus"][0], "lost": True}]}
    refused = {
        "something to do": (OPTIONS, {**ASSESSED, "pending": ["would start x"]}, FACTS_ALL_ON),
        "an error": (OPTIONS, {**ASSESSED, "error": "unit x is masked"}, FACTS_ALL_ON),
        "other options": ({**OPTIONS, "dropin_dir": "/etc/other.d"}, ASSESSED, FACTS_ALL_ON),
        "uvm asked, not assessed": (OPTIONS, {**ASSESSED, "uvm_at_boot": False}, FACTS_ALL_ON),
        "a GPU off": (OPTIONS, ASSESSED, gpu_off),
        "a GPU lost": (OPTIONS, ASSESSED, gpu_lost),
        "no GPU": (OPTIONS, ASSESSED, {**FACTS_ALL_ON, "gpus": []}),
        "no assessment": (OPTIONS, None, FACTS_ALL_ON),
        "no facts": (OPTIONS, ASSESSED, None),
        "pending not a list": (OPTIONS, {**ASSESSED, "pending": None}, FACTS_ALL_ON),
    }
    for why, (options, assessment, facts) in refused.items():
        assert persistence.controller_answer(options, assessment, facts, 1010.0) is None, why
    stale_s = 1000.0 + persistence.ASSESSMENT_MAX_AGE_S + 1
    assert persistence.controller_answer(OPTIONS, ASSESSED, FACTS_ALL_ON, stale_s) is None
    assert persistence.controller_answer(OPTIONS, ASSESSED, FACTS_ALL_ON, 0.0) is None

    # Without verification the GPUs do not matter, and none are reported.
    unverified = persistence.controller_answer(
        {**OPTIONS, "verify": False}, ASSESSED, gpu_off, 1010.0
    )
    assert unverified is not None
    assert (unverified["verified"], unverified["gpus"]) == (False, [])
