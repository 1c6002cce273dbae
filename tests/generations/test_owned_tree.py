"""The generations tree is the toolkit's own: created and marked by it, pruned only of
generations, and restored from only into the files the toolkit's roles write."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from lingbot_fleet.boot import bootfiles
from lingbot_fleet.gpu import acs, persistence
from lingbot_fleet.lingbot import layout as lingbot_layout
from lingbot_fleet.monitor import install_options
from lingbot_fleet.node import generations as gen
from lingbot_fleet.node.values import owned_dir

GENERATIONS = "/var/lib/lingbot-fleet/generations"
PLAN = lingbot_layout.PLAN_PATH


def base(root: Path) -> Path:
    return root / GENERATIONS.lstrip("/")


def one_generation(root: Path, run_id: str, text: str) -> int | None:
    plan = root / PLAN.lstrip("/")
    plan.parent.mkdir(parents=True, exist_ok=True)
    gen.record_before(GENERATIONS, run_id, [PLAN], str(root))
    plan.write_text(text)
    return gen.commit(GENERATIONS, run_id, {}, root=str(root), keep=2).generation


def test_the_first_write_creates_a_private_marked_tree(tmp_path: Path) -> None:
    assert one_generation(tmp_path, "r1", "a") == 1
    info = base(tmp_path).stat()
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == os.geteuid()
    marker = base(tmp_path) / gen.TREE_MARKER
    assert marker.read_text() == "lingbot-fleet generations 1\n"
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600


def test_an_earlier_tree_is_marked_and_never_chmodded(tmp_path: Path) -> None:
    """A tree of an earlier version (no marker, only generations) is taken over as it is."""
    earlier = base(tmp_path)
    (earlier / "3").mkdir(parents=True)
    (earlier / "3" / "manifest.json").write_text(
        json.dumps({"schema": 1, "generation": 3, "files": []})
    )
    earlier.chmod(0o755)
    assert one_generation(tmp_path, "r1", "a") == 4
    assert (earlier / gen.TREE_MARKER).is_file()
    assert stat.S_IMODE(earlier.stat().st_mode) == 0o755


def test_prune_removes_only_generations(tmp_path: Path) -> None:
    for number, text in enumerate("abc", start=1):
        assert one_generation(tmp_path, f"r{number}", text) == number
    stray = base(tmp_path) / "77"  # all digits, no manifest: not a generation
    stray.mkdir()
    (stray / "notes").write_text("mine")
    assert gen.prune(GENERATIONS, 1, str(tmp_path)) == [2]
    assert gen.generation_numbers(GENERATIONS, str(tmp_path)) == [3, 77]
    assert (stray / "notes").read_text() == "mine"


@pytest.mark.parametrize(
    "path",
    [
        bootfiles.DEFAULT_GRUB_PATH,
        f"{bootfiles.GRUB_D_DIR}/lingbot-fleet.cfg",
        bootfiles.KERNEL_CMDLINE_PATH,
        *bootfiles.GRUB_CFG_PATHS,
        *bootfiles.BLS_GRUBENV_PATHS,
        f"{bootfiles.BLS_ENTRIES_DIR}/abc-6.1.0.conf",
        "/boot/efi/EFI/redhat/grubenv",
        lingbot_layout.PLAN_PATH,
        lingbot_layout.config_path("main"),
        lingbot_layout.marker_path("main"),
        lingbot_layout.template_path(),
        lingbot_layout.dropin_path("main"),
        acs.UNIT_PATH,
        f"{persistence.DEFAULT_DROPIN_DIR}/lingbot-fleet.conf",
        persistence.UVM_MODULES_LOAD,
        lingbot_layout.WARM_UP_PROGRAM,
        *install_options.managed_files(
            {
                name: spec.get("default")
                for name, spec in install_options.INSTALL_ARGUMENT_SPEC.items()
            }
        ),
    ],
)
def test_every_file_a_role_writes_is_restorable(path: str) -> None:
    assert gen.is_restorable(path)


@pytest.mark.parametrize(
    "path",
    [
        "/etc/shadow",
        "/etc/lingbotx/env",
        "/etc/lingbot-fleetx/monitor.json",
        "/etc/default/grub.d.evil/x.cfg",
        "/etc/systemd/system/sshd.service",
        "/etc/cron.d/lingbot",
        "/boot/efi/EFI/BOOT/BOOTX64.EFI",
        "/root/.ssh/authorized_keys",
    ],
)
def test_other_files_are_not_restorable(path: str) -> None:
    assert not gen.is_restorable(path)


def test_inventory_recorded_paths_are_restorable_by_component() -> None:
    assert gen.is_restorable("/opt/app/conf/app.ini", ["/opt/app/conf"])
    assert not gen.is_restorable("/opt/app/conf2/app.ini", ["/opt/app/conf"])


def test_the_default_directories_are_owned_dirs() -> None:
    assert owned_dir(gen.DEFAULT_GENERATIONS_DIR, "generations_dir") == GENERATIONS
