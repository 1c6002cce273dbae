"""lingbot_fleet.node.generations on a temp root: record, commit, number, prune, roll back."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from lingbot_fleet.boot import grub
from lingbot_fleet.node import generations as gen

GDIR = "/var/lib/lingbot-fleet/generations"
GRUB = "/etc/default/grub"
DROPIN = "/etc/default/grub.d/lingbot-fleet.cfg"
CONFIG = "/etc/lingbot/main/config.yaml"
RAN = {"playbook": "site.yml", "tags": [], "user": "ops"}


def node(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    (root / "etc/default/grub.d").mkdir(parents=True)
    (root / "proc").mkdir()
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/boot/vmlinuz ro quiet pci=noacpi\n")
    (root / "etc/default/grub").write_bytes(b'GRUB_CMDLINE_LINUX="quiet pci=noacpi"\r\n')
    os.chmod(root / "etc/default/grub", 0o640)
    return root


def write(root: Path, path: str, data: bytes, mode: int | None = None) -> None:
    """Write a file; a new one gets mode 0644, an existing one keeps its mode."""
    real = root / path.lstrip("/")
    real.parent.mkdir(parents=True, exist_ok=True)
    new = not real.exists()
    real.write_bytes(data)
    if mode is not None or new:
        os.chmod(real, 0o644 if mode is None else mode)


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file outside the generations directory, with its mode."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode & 0o7777)
        for p in sorted(root.rglob("*"))
        if p.is_file() and "var/lib/lingbot-fleet" not in str(p)
    }


def run(root: Path, run_id: str, changes: dict[str, bytes | None]) -> gen.CommitResult:
    """One provisioning run: record, write or remove, commit."""
    gen.record_before(GDIR, run_id, list(changes), str(root))
    for path, data in changes.items():
        if data is None:
            (root / path.lstrip("/")).unlink()
        else:
            write(root, path, data)
    return gen.commit(GDIR, run_id, RAN, root=str(root))


def manifest(root: Path, number: int) -> dict:
    return json.loads((root / GDIR.lstrip("/") / str(number) / "manifest.json").read_text())


def test_record_saves_before_state_once_per_run(tmp_path: Path) -> None:
    root = node(tmp_path)
    assert gen.record_before(GDIR, "r1", [GRUB, DROPIN], str(root)) == [GRUB, DROPIN]
    write(root, GRUB, b"changed\n")
    assert gen.record_before(GDIR, "r1", [GRUB], str(root)) == []
    pending = root / GDIR.lstrip("/") / "pending/r1"
    saved = pending / "files/etc/default/grub"
    assert saved.read_bytes() == b'GRUB_CMDLINE_LINUX="quiet pci=noacpi"\r\n'
    entries = json.loads((pending / "manifest.json").read_text())["files"]
    assert entries[0]["before"] == {
        "exists": True,
        "mode": "0640",
        "uid": os.getuid(),
        "gid": os.getgid(),
        "owner": entries[0]["before"]["owner"],
        "group": entries[0]["before"]["group"],
        "size": 39,
        "sha256": hashlib.sha256(b'GRUB_CMDLINE_LINUX="quiet pci=noacpi"\r\n').hexdigest(),
        "saved": "files/etc/default/grub",
    }
    assert entries[1] == {"path": DROPIN, "kind": "grub", "before": {"exists": False}}


def test_commit_numbers_generations_and_fills_the_manifest(tmp_path: Path) -> None:
    root = node(tmp_path)
    write(root, "/etc/lingbot/plan.json", b'{"instances": [{"name": "main", "gpus": [0, 1]}]}')
    first = run(root, "r1", {GRUB: b'GRUB_CMDLINE_LINUX="quiet"\n', DROPIN: b"x=1\n"})
    second = run(root, "r2", {DROPIN: b"x=2\n"})
    assert (first.generation, second.generation) == (1, 2)
    assert first.changed_files == [GRUB, DROPIN]
    one = manifest(root, 1)
    assert one["generation"] == 1 and one["run_id"] == "r1" and one["complete"] is True
    assert one["ran"] == RAN
    assert one["kernel_cmdline"] == "BOOT_IMAGE=/boot/vmlinuz ro quiet pci=noacpi"
    assert one["plan"]["present"] is True
    assert one["plan"]["plan"] == {"instances": [{"name": "main", "gpus": [0, 1]}]}
    assert one["files"][1]["after"]["sha256"] == hashlib.sha256(b"x=1\n").hexdigest()
    assert one["files"][1]["after"]["mode"] == "0644"
    assert not (root / GDIR.lstrip("/") / "pending/r1").exists()


def test_run_that_changes_nothing_creates_no_generation(tmp_path: Path) -> None:
    root = node(tmp_path)
    result = run(root, "r1", {GRUB: (root / "etc/default/grub").read_bytes()})
    assert result.generation is None
    assert result.discarded_runs == ["r1"]
    assert gen.generation_numbers(GDIR, str(root)) == []
    assert not (root / GDIR.lstrip("/") / "pending/r1").exists()


def test_unchanged_files_are_left_out_of_a_generation(tmp_path: Path) -> None:
    root = node(tmp_path)
    result = run(root, "r1", {GRUB: (root / "etc/default/grub").read_bytes(), DROPIN: b"x\n"})
    assert result.changed_files == [DROPIN]
    assert [entry["path"] for entry in manifest(root, 1)["files"]] == [DROPIN]
    assert not (root / GDIR.lstrip("/") / "1/files/etc/default/grub").exists()


def test_retention_keeps_the_newest_and_numbering_goes_on(tmp_path: Path) -> None:
    root = node(tmp_path)
    for index in range(4):
        gen.record_before(GDIR, f"r{index}", [DROPIN], str(root))
        write(root, DROPIN, f"x={index}\n".encode())
        result = gen.commit(GDIR, f"r{index}", RAN, root=str(root), keep=2)
    assert result.generation == 4
    assert result.pruned == [2]
    assert gen.generation_numbers(GDIR, str(root)) == [3, 4]


def test_a_run_left_open_is_committed_as_incomplete(tmp_path: Path) -> None:
    root = node(tmp_path)
    gen.record_before(GDIR, "crashed", [DROPIN], str(root))
    write(root, DROPIN, b"half\n")
    result = run(root, "r2", {GRUB: b"new\n"})
    assert result.committed == [1, 2]
    assert manifest(root, 1)["complete"] is False
    assert manifest(root, 1)["ran"]["run_id"] == "crashed"
    assert manifest(root, 2)["complete"] is True


def test_rollback_restores_bytes_mode_owner_and_removes_new_files(tmp_path: Path) -> None:
    root = node(tmp_path)
    original = tree(root)
    run(root, "r1", {GRUB: b'GRUB_CMDLINE_LINUX="quiet"\n', DROPIN: b"x=1\n"})
    os.chmod(root / "etc/default/grub", 0o600)
    gen.commit(GDIR, "noop", RAN, root=str(root))
    plan = gen.plan_rollback(GDIR, force=True, root=str(root))
    assert plan.target == 0 and plan.undone == (1,)
    assert [(r.path, r.action) for r in plan.restores] == [(GRUB, "write"), (DROPIN, "remove")]
    assert plan.effects() == {
        "grub_changed": True,
        "units_changed": False,
        "services_to_restart": [],
        "units_to_stop": [],
    }
    assert gen.apply_rollback(plan, GDIR, "rb1", str(root)) == [GRUB, DROPIN]
    assert tree(root) == original
    info = (root / "etc/default/grub").stat()
    assert (info.st_uid, info.st_gid) == (os.getuid(), os.getgid())


def test_rollback_of_a_rollback_returns_the_changed_state(tmp_path: Path) -> None:
    root = node(tmp_path)
    original = tree(root)
    run(root, "r1", {GRUB: b"new grub\n", DROPIN: b"x=1\n"})
    changed = tree(root)
    plan = gen.plan_rollback(GDIR, root=str(root))
    gen.apply_rollback(plan, GDIR, "rb1", str(root))
    recorded = gen.commit(GDIR, "rb1", {"kind": "rollback"}, root=str(root))
    assert recorded.generation == 2
    assert tree(root) == original
    again = gen.plan_rollback(GDIR, root=str(root))
    assert again.target == 1 and again.undone == (2,)
    gen.apply_rollback(again, GDIR, "rb2", str(root))
    gen.commit(GDIR, "rb2", {"kind": "rollback"}, root=str(root))
    assert tree(root) == changed
    assert gen.generation_numbers(GDIR, str(root)) == [1, 2, 3]


def dirs(root: Path) -> dict[str, int]:
    """Every directory outside /var (where the generations live), with its mode."""
    return {
        str(p.relative_to(root)): p.stat().st_mode & 0o7777
        for p in sorted(root.rglob("*"))
        if p.is_dir() and p.relative_to(root).parts[0] != "var"
    }


INSTANCE_DIR = os.path.dirname(CONFIG)  # /etc/lingbot/main
MARKER = f"{INSTANCE_DIR}/.lingbot-fleet-instance"


def provision_instance(root: Path) -> None:
    """A run that creates /etc/lingbot/main/ (mode 0750) with two files in it."""
    gen.record_before(GDIR, "r1", [CONFIG, MARKER], str(root))
    (root / INSTANCE_DIR.lstrip("/")).mkdir(parents=True)
    os.chmod(root / INSTANCE_DIR.lstrip("/"), 0o750)
    write(root, CONFIG, b"gpus: [0, 1]\n", 0o640)
    write(root, MARKER, b"main\n")
    gen.commit(GDIR, "r1", RAN, root=str(root))


def test_a_rollback_removes_the_directories_the_undone_run_created(tmp_path: Path) -> None:
    root = node(tmp_path)
    original_dirs = dirs(root)
    provision_instance(root)
    entries = {entry["path"]: entry for entry in manifest(root, 1)["files"]}
    assert entries[CONFIG]["before"] == {
        "exists": False,
        "absent_dirs": ["/etc/lingbot", INSTANCE_DIR],
    }
    plan = gen.plan_rollback(GDIR, root=str(root))
    assert plan.dirs_to_remove == (INSTANCE_DIR, "/etc/lingbot")  # deepest first
    assert plan.to_json()["dirs_removed"] == [INSTANCE_DIR, "/etc/lingbot"]
    assert gen.apply_rollback(plan, GDIR, "rb1", str(root)) == [
        MARKER,
        CONFIG,
        INSTANCE_DIR,
        "/etc/lingbot",
    ]
    assert dirs(root) == original_dirs
    gen.commit(GDIR, "rb1", {"kind": "rollback"}, root=str(root))
    assert manifest(root, 2)["removed_dirs"] == [
        {"path": INSTANCE_DIR, "mode": "0750", "uid": os.getuid(), "gid": os.getgid()},
        {"path": "/etc/lingbot", "mode": "0755", "uid": os.getuid(), "gid": os.getgid()},
    ]


def test_undoing_that_rollback_makes_the_directories_again_as_they_were(tmp_path: Path) -> None:
    root = node(tmp_path)
    provision_instance(root)
    provisioned_files, provisioned_dirs = tree(root), dirs(root)
    gen.apply_rollback(gen.plan_rollback(GDIR, root=str(root)), GDIR, "rb1", str(root))
    gen.commit(GDIR, "rb1", {"kind": "rollback"}, root=str(root))
    again = gen.plan_rollback(GDIR, root=str(root))
    assert again.target == 1
    gen.apply_rollback(again, GDIR, "rb2", str(root))
    gen.commit(GDIR, "rb2", {"kind": "rollback"}, root=str(root))
    assert tree(root) == provisioned_files
    assert dirs(root) == provisioned_dirs  # /etc/lingbot/main is 0750 again
    # And undone once more, the directories go again: the record of rb2 knew they were new.
    last = gen.plan_rollback(GDIR, root=str(root))
    assert last.dirs_to_remove == (INSTANCE_DIR, "/etc/lingbot")


def test_a_directory_holding_anything_else_is_left(tmp_path: Path) -> None:
    root = node(tmp_path)
    provision_instance(root)
    write(root, "/etc/lingbot/certs/ca.pem", b"operator's\n")
    plan = gen.plan_rollback(GDIR, root=str(root))
    assert plan.dirs_to_remove == (INSTANCE_DIR,)
    gen.apply_rollback(plan, GDIR, "rb1", str(root))
    assert (root / "etc/lingbot/certs/ca.pem").read_bytes() == b"operator's\n"
    assert not (root / INSTANCE_DIR.lstrip("/")).exists()


def test_a_directory_filled_after_the_plan_is_left(tmp_path: Path) -> None:
    root = node(tmp_path)
    provision_instance(root)
    plan = gen.plan_rollback(GDIR, root=str(root))
    write(root, f"{INSTANCE_DIR}/late.txt", b"written meanwhile\n")
    removed = gen.apply_rollback(plan, GDIR, "rb1", str(root))
    assert INSTANCE_DIR not in removed and "/etc/lingbot" not in removed
    assert (root / INSTANCE_DIR.lstrip("/") / "late.txt").exists()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("absent_dirs", "/etc/lingbot"),
        ("absent_dirs", ["/var/other"]),
        ("removed_dirs", [{"path": "/etc/lingbot", "mode": "rwx", "uid": 0, "gid": 0}]),
        ("removed_dirs", [{"path": "relative", "mode": "0755", "uid": 0, "gid": 0}]),
        ("removed_dirs", {"path": "/etc/lingbot"}),
    ],
)
def test_damaged_directory_records_are_refused(tmp_path: Path, key: str, value: object) -> None:
    root = node(tmp_path)
    provision_instance(root)
    manifest_path = root / GDIR.lstrip("/") / "1/manifest.json"
    document = json.loads(manifest_path.read_text())
    if key == "absent_dirs":
        next(e for e in document["files"] if e["path"] == CONFIG)["before"][key] = value
    else:
        document[key] = value
    manifest_path.write_text(json.dumps(document))
    before = (tree(root), dirs(root))
    with pytest.raises(gen.GenerationError, match="is corrupted"):
        gen.plan_rollback(GDIR, root=str(root))
    assert (tree(root), dirs(root)) == before


def test_rollback_to_a_specific_generation_undoes_all_later_ones(tmp_path: Path) -> None:
    root = node(tmp_path)
    run(root, "r1", {DROPIN: b"x=1\n"})
    after_one = tree(root)
    run(root, "r2", {DROPIN: b"x=2\n", CONFIG: b"gpus: [0]\n"})
    run(root, "r3", {GRUB: b"three\n", CONFIG: b"gpus: [0, 1]\n"})
    plan = gen.plan_rollback(GDIR, target=1, root=str(root))
    assert plan.undone == (2, 3)
    assert {r.path: r.source_generation for r in plan.restores} == {
        CONFIG: 2,
        DROPIN: 2,
        GRUB: 3,
    }
    # The instance's config did not exist after generation 1: it is stopped, not restarted.
    assert plan.effects()["services_to_restart"] == []
    assert plan.effects()["units_to_stop"] == ["lingbot@main.service"]
    gen.apply_rollback(plan, GDIR, "rb", str(root))
    assert tree(root) == after_one


def test_no_generation_is_a_clear_error(tmp_path: Path) -> None:
    root = node(tmp_path)
    with pytest.raises(gen.GenerationError) as caught:
        gen.plan_rollback(GDIR, root=str(root))
    assert str(caught.value) == (
        f"no generation in {root}{GDIR}: the toolkit has changed nothing on this node yet, "
        "so there is nothing to roll back; nothing was touched"
    )


def test_target_out_of_range_is_refused(tmp_path: Path) -> None:
    root = node(tmp_path)
    run(root, "r1", {DROPIN: b"x=1\n"})
    with pytest.raises(gen.GenerationError, match=r"rollback_to=2 is out of range"):
        gen.plan_rollback(GDIR, target=2, root=str(root))


def test_rollback_to_the_newest_generation_restores_nothing(tmp_path: Path) -> None:
    root = node(tmp_path)
    run(root, "r1", {DROPIN: b"x=1\n"})
    plan = gen.plan_rollback(GDIR, target=1, root=str(root))
    assert (plan.target, plan.newest, plan.to_change) == (1, 1, [])


def test_corrupt_manifest_touches_nothing(tmp_path: Path) -> None:
    root = node(tmp_path)
    run(root, "r1", {GRUB: b"new\n", DROPIN: b"x=1\n"})
    before = tree(root)
    manifest_path = root / GDIR.lstrip("/") / "1/manifest.json"
    manifest_path.write_text('{"schema": 1, "generation": 1, "files": [')
    with pytest.raises(gen.GenerationError) as caught:
        gen.plan_rollback(GDIR, root=str(root))
    assert str(caught.value).startswith(f"{manifest_path} is corrupted (")
    assert str(caught.value).endswith(
        "; nothing was touched. Repair or remove that generation, or roll back to another "
        "one with -e rollback_to=<n>"
    )
    assert tree(root) == before


def test_saved_copy_checksum_mismatch_touches_nothing(tmp_path: Path) -> None:
    root = node(tmp_path)
    run(root, "r1", {GRUB: b"new\n", DROPIN: b"x=1\n"})
    before = tree(root)
    (root / GDIR.lstrip("/") / "1/files/etc/default/grub").write_bytes(b"tampered\n")
    with pytest.raises(gen.GenerationError) as caught:
        gen.plan_rollback(GDIR, root=str(root))
    tampered_sha = hashlib.sha256(b"tampered\n").hexdigest()
    original_sha = hashlib.sha256(b'GRUB_CMDLINE_LINUX="quiet pci=noacpi"\r\n').hexdigest()
    assert str(caught.value) == (
        "generation 1: the saved copy of /etc/default/grub has checksum "
        f"{tampered_sha}, the manifest says {original_sha}; "
        "nothing was touched. The generation is damaged: roll back to another one with "
        "-e rollback_to=<n>"
    )
    assert tree(root) == before


def test_file_changed_since_is_refused_unless_forced(tmp_path: Path) -> None:
    root = node(tmp_path)
    original = tree(root)
    run(root, "r1", {GRUB: b"new\n", DROPIN: b"x=1\n"})
    write(root, DROPIN, b"hand edit\n")
    before = tree(root)
    with pytest.raises(gen.GenerationError) as caught:
        gen.plan_rollback(GDIR, root=str(root))
    assert str(caught.value) == (
        f"changed since the toolkit last wrote them: {DROPIN}; nothing was touched. Look at "
        "the changes, then roll back anyway with -e rollback_force=true, or choose another "
        "generation with -e rollback_to=<n>"
    )
    assert tree(root) == before
    gen.apply_rollback(gen.plan_rollback(GDIR, force=True, root=str(root)), GDIR, "rb", str(root))
    assert tree(root) == original


def test_list_generations_reports_damaged_ones(tmp_path: Path) -> None:
    root = node(tmp_path)
    run(root, "r1", {DROPIN: b"x=1\n"})
    run(root, "r2", {DROPIN: b"x=2\n"})
    (root / GDIR.lstrip("/") / "2/manifest.json").write_text("not json")
    rows = gen.list_generations(GDIR, str(root))
    assert rows[0]["generation"] == 1 and rows[0]["ok"] is True
    assert rows[0]["files"] == [DROPIN] and rows[0]["kinds"] == ["grub"]
    assert rows[1]["generation"] == 2 and rows[1]["ok"] is False
    assert "is corrupted" in rows[1]["error"]


def test_non_regular_files_and_bad_names_are_refused(tmp_path: Path) -> None:
    root = node(tmp_path)
    os.symlink("grub", root / "etc/default/link")
    with pytest.raises(gen.GenerationError, match=r"^/etc/default/link is not a regular file"):
        gen.record_before(GDIR, "r1", ["/etc/default/link"], str(root))
    with pytest.raises(gen.GenerationError, match=r"not a normalized absolute path"):
        gen.record_before(GDIR, "r1", ["etc/../grub"], str(root))
    with pytest.raises(gen.GenerationError, match=r"run id '../x' is not usable"):
        gen.record_before(GDIR, "../x", [GRUB], str(root))


@pytest.mark.parametrize(
    ("paths", "services"),
    [
        (["/etc/systemd/system/lingbot@.service"], []),
        (
            ["/etc/systemd/system/nvidia-persistenced.service.d/lingbot-fleet.conf"],
            ["nvidia-persistenced.service"],
        ),
        (["/etc/lingbot/east/config.yaml", "/etc/lingbot/plan.json"], ["lingbot@east.service"]),
        (["/etc/systemd/system/lingbot@west.service.d/10-numa.conf"], ["lingbot@west.service"]),
    ],
)
def test_services_to_restart(paths: list[str], services: list[str]) -> None:
    assert gen.services_to_restart(paths) == services


def test_boot_state_compares_grub_cfg_with_running_kernel(tmp_path: Path) -> None:
    root = node(tmp_path)
    write(
        root,
        "/boot/grub/grub.cfg",
        b"menuentry 'Debian' {\n\tlinux\t/boot/vmlinuz ro quiet iommu=pt\n}\n",
    )
    state = grub.boot_state(str(root))
    assert state["configured"] == "ro quiet iommu=pt"
    assert state["reboot_required"] is True
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/boot/vmlinuz ro quiet iommu=pt\n")
    assert grub.boot_state(str(root))["reboot_required"] is False


def test_units_the_rollback_removes_are_stopped_not_restarted():
    from lingbot_fleet.node.generations import units_to_stop

    class Removed:
        def __init__(self, path, action="remove"):
            self.path = path
            self.action = action

    restores = [
        Removed("/etc/systemd/system/lingbot-fleet-monitor.timer"),
        Removed("/etc/systemd/system/lingbot-fleet-monitor.service"),
        Removed("/etc/systemd/system/lingbot@main.service.d/10-lingbot-fleet-plan.conf"),
        Removed("/etc/lingbot/numa1/config.yaml"),
        Removed("/etc/systemd/system/lingbot@.service"),
        Removed("/etc/systemd/system/nvidia-persistenced.service.d/lingbot-fleet.conf"),
        Removed("/etc/lingbot/main/config.yaml", action="write"),
    ]
    assert units_to_stop(restores) == [
        "lingbot-fleet-monitor.service",
        "lingbot-fleet-monitor.timer",
        "lingbot@main.service",
        "lingbot@numa1.service",
    ]


SECRETS = "/etc/lingbot/main/secrets.env"


def test_secrets_are_never_copied_and_a_rollback_keeps_the_current_key(tmp_path: Path) -> None:
    root = node(tmp_path)
    write(root, SECRETS, b"LINGBOT_API_KEY='old-key'\n", mode=0o600)
    run(root, "r1", {SECRETS: b"LINGBOT_API_KEY='new-key'\n", CONFIG: b"a: 1\n"})
    generations_tree = root / GDIR.lstrip("/")
    stored = b"".join(p.read_bytes() for p in generations_tree.rglob("*") if p.is_file())
    assert b"old-key" not in stored
    entry = next(e for e in manifest(root, 1)["files"] if e["path"] == SECRETS)
    assert entry["secret"] is True
    assert "saved" not in entry["before"]
    assert oct(generations_tree.stat().st_mode & 0o777) == "0o700"

    plan = gen.plan_rollback(GDIR, root=str(root))
    assert plan.kept_secrets == (SECRETS,)
    assert [restore.path for restore in plan.to_change] == [CONFIG]
    gen.apply_rollback(plan, GDIR, "r2", str(root))
    assert (root / SECRETS.lstrip("/")).read_bytes() == b"LINGBOT_API_KEY='new-key'\n"
    assert not (root / CONFIG.lstrip("/")).exists()


def test_saved_copies_keep_the_mode_of_the_file(tmp_path: Path) -> None:
    root = node(tmp_path)
    run(root, "r1", {GRUB: b"new\n"})
    entry = manifest(root, 1)["files"][0]
    saved = root / GDIR.lstrip("/") / "1" / entry["before"]["saved"]
    assert oct(saved.stat().st_mode & 0o777) == "0o640"


def test_a_unit_the_toolkit_enabled_is_disabled_by_a_rollback_past_it(tmp_path: Path) -> None:
    root = node(tmp_path)
    # Run 1 changes a file and enables a unit; run 2 only enables another one.
    gen.record_before(GDIR, "run-1", [CONFIG], str(root))
    write(root, CONFIG, b"kv_cache_strategy: p2p_direct\n")
    assert gen.note_unit_enabled(GDIR, "run-1", "nvidia-persistenced.service", str(root))
    assert not gen.note_unit_enabled(GDIR, "run-1", "nvidia-persistenced.service", str(root))
    first = gen.commit(GDIR, "run-1", RAN, root=str(root))
    assert first.generation == 1
    assert gen.note_unit_enabled(GDIR, "run-2", "lingbot-fleet-monitor.timer", str(root))
    # A run that only enabled a unit is a generation too: it changed the node.
    second = gen.commit(GDIR, "run-2", RAN, root=str(root))
    assert second.generation == 2
    assert manifest(root, 2)["units_enabled"] == ["lingbot-fleet-monitor.timer"]

    one_back = gen.plan_rollback(GDIR, 1, root=str(root))
    assert one_back.to_change == []
    assert one_back.needs_action
    assert one_back.effects()["units_to_stop"] == ["lingbot-fleet-monitor.timer"]
    to_zero = gen.plan_rollback(GDIR, 0, root=str(root))
    # The instance whose config goes away is stopped too.
    assert to_zero.effects()["units_to_stop"] == [
        "lingbot-fleet-monitor.timer",
        "lingbot@main.service",
        "nvidia-persistenced.service",
    ]
    assert to_zero.effects()["services_to_restart"] == []


def test_a_bad_unit_name_or_a_damaged_list_of_enabled_units_is_refused(tmp_path: Path) -> None:
    root = node(tmp_path)
    with pytest.raises(gen.GenerationError) as refused:
        gen.note_unit_enabled(GDIR, "run-1", "x; reboot", str(root))
    assert str(refused.value) == "'x; reboot' is not a systemd unit name; nothing was noted"
    assert not (root / GDIR.lstrip("/")).exists()
    gen.note_unit_enabled(GDIR, "run-1", "nvidia-persistenced.service", str(root))
    gen.commit(GDIR, "run-1", RAN, root=str(root))
    path = root / GDIR.lstrip("/") / "1" / "manifest.json"
    damaged = {**manifest(root, 1), "units_enabled": "nvidia-persistenced.service"}
    path.write_text(json.dumps(damaged))
    with pytest.raises(gen.GenerationError) as broken:
        gen.load_generation(GDIR, 1, str(root))
    assert str(broken.value) == (
        f"{path} is corrupted ('units_enabled' is 'nvidia-persistenced.service', not a list "
        "of unit names); nothing was touched. Repair or remove that generation, or roll back "
        "to another one with -e rollback_to=<n>"
    )
