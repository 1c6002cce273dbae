"""The lingbot_generation module, through real `ansible localhost -c local`, on a temp root."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from lingbot_fleet.node import generations, runlock

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "roles" / "generations" / "library"
GDIR = "/var/lib/lingbot-fleet/generations"
DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/lingbot-fleet.conf"
GRUB = "/etc/default/grub"


def load_module() -> ModuleType:
    # tests/conftest.py maps ansible.module_utils.lingbot_fleet onto lingbot_fleet.
    spec = importlib.util.spec_from_file_location(
        "lingbot_generation", LIBRARY / "lingbot_generation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["lingbot_generation"] = module
    spec.loader.exec_module(module)
    return module


lg = load_module()


def make_root(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    (root / "etc/default").mkdir(parents=True)
    (root / "etc/systemd/system").mkdir(parents=True)  # as on every systemd node
    (root / "proc").mkdir()
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/boot/vmlinuz ro quiet\n")
    (root / "etc/default/grub").write_text('GRUB_CMDLINE_LINUX="quiet"\n')
    return root


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(path.relative_to(root)): (path.read_bytes(), path.stat().st_mode & 0o7777)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


STUBS = """#!/bin/sh
# Stand-in for {name}: logs its arguments; fails while the fail file exists (then removes it).
echo "{name} $*" >> "{log}"
if [ -e "{fail}" ]; then rm -f "{fail}"; echo "{name}: simulated failure" >&2; exit 1; fi
exit 0
"""


def stub_commands(root: Path) -> Path:
    """update-grub and systemctl on PATH that log to <tmp>/commands.log."""
    bin_dir = root.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("update-grub", "systemctl"):
        path = bin_dir / name
        path.write_text(
            STUBS.format(
                name=name, log=root.parent / "commands.log", fail=root.parent / f"{name}.fail"
            )
        )
        path.chmod(0o755)
    return bin_dir


def commands(root: Path) -> list[str]:
    log = root.parent / "commands.log"
    return log.read_text().splitlines() if log.exists() else []


def ansible(root: Path, args: dict[str, Any], *, check: bool = False) -> dict[str, Any]:
    env = dict(os.environ)
    env["PATH"] = f"{stub_commands(root)}{os.pathsep}{env.get('PATH', '')}"
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_MODULE_UTILS": str(REPO / "python"),
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_STDOUT_CALLBACK": "minimal",
            "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCAL_TEMP": str(root.parent / "ansible-tmp"),
            "ANSIBLE_HOME": str(root.parent / "ansible-home"),
        }
    )
    argv = [
        str(Path(sys.executable).parent / "ansible"),
        "localhost",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-M",
        str(LIBRARY),
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-m",
        "lingbot_generation",
        "-a",
        json.dumps({"root": str(root), **args}),
    ]
    if check:
        argv.append("--check")
    done = subprocess.run(
        argv, check=False, env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    marker = done.stdout.find("localhost | ")
    status, separator, body = done.stdout[max(marker, 0) :].partition(" => ")
    assert marker >= 0 and separator, done.stderr + done.stdout
    result = json.loads(body)
    result["failed"] = "FAILED" in status
    return result


def provision(root: Path, run_id: str, text: str) -> dict[str, Any]:
    ansible(root, {"action": "record", "run_id": run_id, "paths": [GRUB, DROPIN]})
    (root / "etc/default/grub").write_text(text)
    dropin = root / DROPIN.lstrip("/")
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text("[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced\n")
    return ansible(root, {"action": "commit", "run_id": run_id, "ran": {"playbook": "site.yml"}})


def test_record_commit_list_show_through_ansible(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    committed = provision(root, "run-1", 'GRUB_CMDLINE_LINUX="quiet iommu=pt"\n')
    assert committed["changed"] is True
    assert committed["generation"] == 1
    assert committed["commit"]["changed_files"] == [GRUB, DROPIN]
    listed = ansible(root, {"action": "list"})
    assert listed["changed"] is False
    assert [(g["generation"], g["ok"], g["files"]) for g in listed["generations"]] == [
        (1, True, [GRUB, DROPIN])
    ]
    assert listed["generations"][0]["kinds"] == ["grub", "unit"]
    shown = ansible(root, {"action": "show", "generation": 1})
    assert shown["manifest"]["ran"] == {"playbook": "site.yml"}
    assert shown["manifest"]["kernel_cmdline"] == "BOOT_IMAGE=/boot/vmlinuz ro quiet"


def test_second_run_without_changes_commits_nothing(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    provision(root, "run-1", 'GRUB_CMDLINE_LINUX="quiet iommu=pt"\n')
    again = provision(root, "run-2", 'GRUB_CMDLINE_LINUX="quiet iommu=pt"\n')
    assert again["changed"] is False
    assert again["generation"] is None
    assert again["commit"]["discarded_runs"] == ["run-2"]


def test_check_mode_writes_nothing(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    before = snapshot(root)
    recorded = ansible(root, {"action": "record", "run_id": "r", "paths": [GRUB]}, check=True)
    assert recorded["recorded"] == [GRUB]
    assert snapshot(root) == before
    provision(root, "run-1", 'GRUB_CMDLINE_LINUX="quiet iommu=pt"\n')
    before = snapshot(root)
    rollback = ansible(root, {"action": "rollback", "run_id": "rb"}, check=True)
    assert rollback["changed"] is True
    assert rollback["files"] == [GRUB, DROPIN]
    assert [f["action"] for f in rollback["rollback"]["files"]] == ["write", "remove"]
    assert rollback["rollback"]["grub_changed"] is True
    assert rollback["rollback"]["units_changed"] is True
    assert rollback["effects"] == {
        "remove_outputs": [],
        "remove_dirs": [os.path.dirname(DROPIN)],
        "bootloader": "grub_d",
        "daemon_reload": True,
        "restart": ["nvidia-persistenced.service"],
    }
    assert rollback["actions"] == [
        f"would write {GRUB}",
        f"would remove {DROPIN}",
        f"would remove the directory {os.path.dirname(DROPIN)} (created by an undone "
        "generation, empty once its files are removed)",
        "would run update-grub for the restored grub files",
        "would run systemctl daemon-reload",
        "would enable nvidia-persistenced.service",
        "would restart nvidia-persistenced.service",
    ]
    assert commands(root) == []
    assert snapshot(root) == before


MONITOR_CONFIG = "/etc/lingbot-fleet/monitor.json"
MONITOR_TIMER = "/etc/systemd/system/lingbot-fleet-monitor.timer"
METRICS = "/var/lib/prometheus/node-exporter/lingbot_fleet_monitor.prom"
FALLBACK_FLAG = "/var/lib/lingbot-fleet/monitor/fallback-recommended"
MONITOR_STATE = "/var/lib/lingbot-fleet/monitor/state.json"


def test_a_rollback_that_takes_the_monitor_away_takes_its_outputs_too(tmp_path: Path) -> None:
    """Left behind, node_exporter would go on exporting the last run's metrics and the
    fallback flag would stand, for a monitor that is gone."""
    root = make_root(tmp_path)
    ansible(root, {"action": "record", "run_id": "run-1", "paths": [MONITOR_CONFIG, MONITOR_TIMER]})
    (root / "etc/lingbot-fleet").mkdir()
    (root / MONITOR_CONFIG.lstrip("/")).write_text('{"consecutive_runs": 3}\n')
    (root / MONITOR_TIMER.lstrip("/")).write_text("[Timer]\nOnUnitActiveSec=5min\n")
    ansible(root, {"action": "commit", "run_id": "run-1", "ran": {"playbook": "site.yml"}})
    outputs = {METRICS: b'lingbot_fleet_fallback_recommended{instance="main"} 1\n'}
    outputs[FALLBACK_FLAG] = b'{"instances": ["main"]}\n'
    for path, data in (*outputs.items(), (MONITOR_STATE, b"{}\n")):
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_bytes(data)

    preview = ansible(root, {"action": "rollback", "run_id": "rb"}, check=True)
    assert (
        f"would remove {METRICS} (an output of the monitor the rollback takes away)"
        in (preview["actions"])
    )
    assert (root / METRICS.lstrip("/")).exists()

    done = ansible(root, {"action": "rollback", "run_id": "rb"})
    assert done["changed"] is True
    assert "lingbot-fleet-monitor.timer" in done["rollback"]["units_to_stop"]
    for path in outputs:
        assert not (root / path.lstrip("/")).exists(), path
    assert (root / MONITOR_STATE.lstrip("/")).exists()  # the monitor's own, read by no one else
    # Outputs, not managed files: the rollback's generation does not hold them, so a monitor
    # that writes them again after a new install is no drift to the next rollback.
    shown = ansible(root, {"action": "show", "generation": 2})
    assert not set(outputs) & {entry["path"] for entry in shown["manifest"]["files"]}


def node_dirs(root: Path) -> set[str]:
    """The node's directories, but the generations' own."""
    return {
        "/" + str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_dir() and not str(path.relative_to(root)).startswith("var/lib/lingbot-fleet/gen")
    }


CUT_OFF_AFTER_SWAP = """
import os, shutil, sys
from lingbot_fleet.node import rollback
def killed(self, pending):
    os._exit(3)
rollback._Effects.run = killed
root, generations_dir, run_id = sys.argv[1:]
request = rollback.RollbackRequest(
    generations_dir, run_id, root=root, target=0, live_runs=[run_id]
)
rollback.roll_back(request, check_mode=False, find_bin=shutil.which)
"""


def test_a_rollback_cut_off_after_its_swap_still_removes_outputs_and_emptied_dirs(
    tmp_path: Path,
) -> None:
    """Killed between swapping the files in and removing what they leave behind, the next
    rollback finishes it: no metrics exported for a gone monitor, no empty directories
    (the textfile directory the provision made is empty only once the metrics are gone)."""
    root = make_root(tmp_path)
    original_files, original_dirs = snapshot(root), node_dirs(root)
    install = "20261201T090000Z-ctl01-p50"
    for directory in (
        "/etc/lingbot-fleet",
        os.path.dirname(METRICS),
        os.path.dirname(FALLBACK_FLAG),
    ):
        generations.note_dirs_created(GDIR, install, directory, str(root))
        (root / directory.lstrip("/")).mkdir(parents=True)
    generations.record_before(GDIR, install, [MONITOR_CONFIG, MONITOR_TIMER], str(root))
    (root / MONITOR_CONFIG.lstrip("/")).write_text('{"consecutive_runs": 3}\n')
    (root / MONITOR_TIMER.lstrip("/")).write_text("[Timer]\nOnUnitActiveSec=5min\n")
    generations.note_unit_enabled(GDIR, install, "lingbot-fleet-monitor.timer", str(root))
    generations.commit(GDIR, install, {"playbook": "site.yml"}, root=str(root))
    (root / METRICS.lstrip("/")).write_bytes(b"lingbot_fleet_monitor_up 1\n")
    (root / FALLBACK_FLAG.lstrip("/")).write_bytes(b'{"instances": ["main"]}\n')

    first, second = "20261201T100000Z-ctl01-p100", "20261201T100500Z-ctl01-p200"
    # The first rollback dies right after its swap, in its own process (the node's lock
    # knows a live module from a dead one by its process).
    cut_off = subprocess.run(
        [sys.executable, "-c", CUT_OFF_AFTER_SWAP, str(root), GDIR, first],
        env={**os.environ, "PATH": f"{stub_commands(root)}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert cut_off.returncode == 3, cut_off.stderr
    assert not (root / MONITOR_CONFIG.lstrip("/")).exists()  # swapped
    assert (root / METRICS.lstrip("/")).exists()  # left behind, for now

    again = ansible(root, {"action": "rollback", "run_id": second, "live_runs": [second]})
    assert again["failed"] is False, again
    assert again["finished_runs"] == [first]
    for path in (METRICS, FALLBACK_FLAG):
        assert not (root / path.lstrip("/")).exists(), path
    assert {k: v for k, v in snapshot(root).items() if "lingbot-fleet/gen" not in k} == (
        original_files
    )
    # Only the generations' own directories are new.
    assert node_dirs(root) == original_dirs | {"/var", "/var/lib", "/var/lib/lingbot-fleet"}
    # The finishing run noted the directories in the cut-off run's generation, so undoing
    # that rollback makes them again.
    shown = ansible(root, {"action": "show", "generation": 2})
    assert {d["path"] for d in shown["manifest"]["removed_dirs"]} >= {
        "/etc/lingbot-fleet",
        os.path.dirname(METRICS),
        os.path.dirname(FALLBACK_FLAG),
    }


def test_rollback_and_rollback_of_rollback_through_ansible(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    original = snapshot(root)
    provision(root, "run-1", 'GRUB_CMDLINE_LINUX="quiet iommu=pt"\n')
    provisioned = {k: v for k, v in snapshot(root).items() if "lingbot-fleet/gen" not in k}
    first = ansible(root, {"action": "rollback", "run_id": "rb-1", "ran": {"by": "ops"}})
    assert first["changed"] is True and first["generation"] == 2
    assert commands(root) == [
        "update-grub ",
        "systemctl daemon-reload",
        "systemctl enable nvidia-persistenced.service",
        "systemctl restart nvidia-persistenced.service",
        "systemctl is-active --quiet nvidia-persistenced.service",
    ]
    assert {k: v for k, v in snapshot(root).items() if "lingbot-fleet/gen" not in k} == original
    shown = ansible(root, {"action": "show", "generation": 2})
    assert shown["manifest"]["ran"] == {"by": "ops", "rollback_to": 0, "undone": [1]}
    second = ansible(root, {"action": "rollback", "run_id": "rb-2"})
    assert second["generation"] == 3
    assert {k: v for k, v in snapshot(root).items() if "lingbot-fleet/gen" not in k} == (
        provisioned
    )


def test_corrupt_manifest_fails_and_touches_nothing(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    provision(root, "run-1", 'GRUB_CMDLINE_LINUX="quiet iommu=pt"\n')
    manifest = root / GDIR.lstrip("/") / "1/manifest.json"
    manifest.write_text("{")
    before = snapshot(root)
    result = ansible(root, {"action": "rollback", "run_id": "rb"})
    assert result["failed"] is True
    assert result["msg"].startswith(f"{manifest} is corrupted (")
    assert snapshot(root) == before


def test_no_generation_fails_with_a_clear_message(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    result = ansible(root, {"action": "rollback", "run_id": "rb"})
    assert result["failed"] is True
    assert result["msg"] == (
        f"no generation in {root}{GDIR}: the toolkit has changed nothing on this node yet, so "
        "there is nothing to roll back; nothing was touched"
    )


def test_record_without_run_id_is_refused_by_the_argument_spec(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    result = ansible(root, {"action": "record", "paths": [GRUB]})
    assert result["failed"] is True
    assert result["msg"] == "action is record but all of the following are missing: run_id"


def test_a_rollback_cut_off_by_a_failed_command_is_finished_not_undone(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    original = snapshot(root)
    provision(root, "run-1", 'GRUB_CMDLINE_LINUX="quiet iommu=pt"\n')
    (tmp_path / "update-grub.fail").touch()
    # Run ids as the controller makes them: the second run's controller no longer runs the
    # first, so it takes the node's lock over at once.
    first, second = "20261201T100000Z-ctl01-p100", "20261201T100500Z-ctl01-p200"
    failed = ansible(root, {"action": "rollback", "run_id": first, "live_runs": [first]})
    assert failed["failed"] is True
    assert failed["msg"].startswith(
        f"{tmp_path}/bin/update-grub failed with exit status 1: update-grub: simulated failure"
    )
    assert "run the rollback again to finish it" in failed["msg"]
    restored = {k: v for k, v in snapshot(root).items() if "lingbot-fleet/gen" not in k}
    assert restored == original
    assert commands(root) == ["update-grub "]

    again = ansible(root, {"action": "rollback", "run_id": second, "live_runs": [second]})
    assert again["failed"] is False, again
    assert again["finished_runs"] == [first]
    assert again["rollback"] is None
    assert {k: v for k, v in snapshot(root).items() if "lingbot-fleet/gen" not in k} == original
    assert commands(root)[1:] == [
        "update-grub ",
        "systemctl daemon-reload",
        "systemctl enable nvidia-persistenced.service",
        "systemctl restart nvidia-persistenced.service",
        "systemctl is-active --quiet nvidia-persistenced.service",
    ]
    listing = ansible(root, {"action": "list"})["generations"]
    assert [(g["generation"], g["ok"]) for g in listing] == [(1, True), (2, True)]


def test_a_rollback_undoes_what_a_gone_run_left_open(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    original = snapshot(root)
    gone, second = "20261201T100000Z-ctl01-p100", "20261201T100500Z-ctl01-p200"
    # A run that saved and wrote its file, then died before its commit (and holds the lock).
    recorded = ansible(root, {"action": "record", "run_id": gone, "paths": [GRUB]})
    assert recorded["recorded"] == [GRUB]
    # Its module took the lock and ended (a module holds the node only while it runs).
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from lingbot_fleet.node.runlock import take;"
            " take(sys.argv[1], sys.argv[2])",
            str(root / GDIR.lstrip("/")),
            gone,
        ],
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "python")},
    )
    assert runlock.read_lock(str(root / GDIR.lstrip("/")))["run_id"] == gone
    (root / "etc/default/grub").write_text('GRUB_CMDLINE_LINUX="quiet iommu=pt"\n')
    done = ansible(
        root,
        {"action": "rollback", "run_id": second, "live_runs": [second], "rollback_to": 0},
    )
    assert done["failed"] is False, done
    assert done["committed_gone_runs"] == [1]
    assert (
        done["actions"][0]
        == f"took the node's lock over from run {gone} (its ansible-playbook process is gone)"
    )
    assert {k: v for k, v in snapshot(root).items() if "lingbot-fleet/gen" not in k} == {
        k: v for k, v in original.items() if "lingbot-fleet/gen" not in k
    }
    listing = ansible(root, {"action": "list"})["generations"]
    assert [g["generation"] for g in listing] == [1, 2]
