"""NodeChanges: the one write path of every module (compare, record, write atomically)."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

from lingbot_fleet.node import generations
from lingbot_fleet.node.nodefiles import NodeChanges, NodeFileError, write_atomic

ROOT_USER = pwd.getpwuid(os.getuid()).pw_name


def changes(root: Path, *, check_mode: bool = False, run_id: str | None = "run-1") -> NodeChanges:
    return NodeChanges(
        check_mode=check_mode,
        root=str(root),
        generations_dir="/var/lib/lingbot-fleet/generations",
        run_id=run_id,
    )


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_check_mode_writes_nothing_but_reports_the_change(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/app.conf").write_text("old\n")
    os.chmod(tmp_path / "etc/app.conf", 0o644)
    before = tree(tmp_path)
    node = changes(tmp_path, check_mode=True)
    assert node.write_file("/etc/app.conf", "new\n", owner=ROOT_USER, group=0) is True
    assert node.write_file("/etc/other.conf", "x\n", owner=ROOT_USER, group=0) is True
    assert node.remove_file("/etc/app.conf") is True
    node.run(["false"], "run false")
    assert tree(tmp_path) == before
    assert node.actions == [
        "would update /etc/app.conf",
        "would create /etc/other.conf",
        "would remove /etc/app.conf",
        "would run false",
    ]
    assert node.result()["changed"] is True
    assert "ansible_facts" not in node.result()


def test_write_records_the_old_file_first_and_a_second_write_changes_nothing(
    tmp_path: Path,
) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/app.conf").write_text("old\n")
    node = changes(tmp_path)
    assert node.write_file("/etc/app.conf", "new\n", mode=0o640, owner=ROOT_USER, group=0)
    assert (tmp_path / "etc/app.conf").read_text() == "new\n"
    assert oct((tmp_path / "etc/app.conf").stat().st_mode & 0o777) == "0o640"
    assert node.recorded == ["/etc/app.conf"]
    assert node.result()["ansible_facts"] == {"lingbot_generation_pending": "run-1"}
    assert node.result()["diff"][0]["before"] == "old\n"
    pending = Path(
        generations.pending_dir("/var/lib/lingbot-fleet/generations", "run-1", str(tmp_path))
    )
    manifest = json.loads((pending / "manifest.json").read_text())
    saved = pending / manifest["files"][0]["before"]["saved"]
    assert saved.read_text() == "old\n"

    again = changes(tmp_path, run_id="run-2")
    assert again.write_file("/etc/app.conf", "new\n", mode=0o640, owner=ROOT_USER, group=0) is False
    assert again.result() == {"changed": False, "actions": [], "changed_paths": [], "diff": []}


def test_directories_a_run_makes_are_noted_and_go_with_a_rollback(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_dir())
    node = changes(tmp_path)
    assert node.make_dir("/etc/lingbot-fleet", mode=0o755, owner=ROOT_USER, group=0)
    assert node.make_dir("/etc/lingbot-fleet/one", mode=0o750, owner=ROOT_USER, group=0)
    assert node.write_file("/etc/lingbot-fleet/one/app.conf", "x\n", owner=ROOT_USER, group=0)
    pending = Path(
        generations.pending_dir("/var/lib/lingbot-fleet/generations", "run-1", str(tmp_path))
    )
    manifest = json.loads((pending / "manifest.json").read_text())
    assert manifest["created_dirs"] == ["/etc/lingbot-fleet", "/etc/lingbot-fleet/one"]
    assert not changes(tmp_path, run_id="run-2").make_dir(
        "/etc/lingbot-fleet/one", mode=0o750, owner=ROOT_USER, group=0
    )
    generations.commit("/var/lib/lingbot-fleet/generations", "run-1", {}, root=str(tmp_path))
    plan = generations.plan_rollback("/var/lib/lingbot-fleet/generations", root=str(tmp_path))
    assert plan.dirs_to_remove == ("/etc/lingbot-fleet/one", "/etc/lingbot-fleet")
    generations.apply_rollback(plan, "/var/lib/lingbot-fleet/generations", "rb", str(tmp_path))
    after = sorted(
        str(p.relative_to(tmp_path))
        for p in tmp_path.rglob("*")
        if p.is_dir() and p.relative_to(tmp_path).parts[0] != "var"
    )
    assert after == before


def test_mode_change_alone_is_a_change_without_a_content_diff(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/app.conf").write_text("same\n")
    os.chmod(tmp_path / "etc/app.conf", 0o644)
    node = changes(tmp_path)
    assert node.write_file("/etc/app.conf", "same\n", mode=0o600, owner=ROOT_USER, group=0)
    assert oct((tmp_path / "etc/app.conf").stat().st_mode & 0o777) == "0o600"
    assert node.diffs == []


def test_a_refusing_validator_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/app.conf").write_text("old\n")

    def refuse(path: str) -> None:
        assert Path(path).read_text() == "bad\n"
        raise NodeFileError("app.conf: bad is not a setting")

    with pytest.raises(NodeFileError, match="bad is not a setting"):
        changes(tmp_path).write_file(
            "/etc/app.conf", "bad\n", owner=ROOT_USER, group=0, validate=refuse
        )
    assert sorted(os.listdir(tmp_path / "etc")) == ["app.conf"]
    assert (tmp_path / "etc/app.conf").read_text() == "old\n"


def test_secret_content_stays_out_of_the_diff(tmp_path: Path) -> None:
    node = changes(tmp_path)
    node.write_file(
        "/etc/secrets.env", "KEY=s3cr3t\n", mode=0o600, owner=ROOT_USER, group=0, secret=True
    )
    assert "s3cr3t" not in json.dumps(node.result())


def test_remove_tree_refuses_a_directory_holding_files_it_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "etc/lingbot/certs").mkdir(parents=True)
    (tmp_path / "etc/lingbot/certs/ca.pem").write_text("cert\n")
    with pytest.raises(NodeFileError, match=r"holds ca\.pem, which lingbot-fleet did not write"):
        changes(tmp_path).remove_tree("/etc/lingbot/certs", ["/etc/lingbot/certs/config.yaml"])
    assert (tmp_path / "etc/lingbot/certs/ca.pem").exists()


def test_write_atomic_replaces_the_file_in_one_rename(tmp_path: Path) -> None:
    target = tmp_path / "out.prom"
    target.write_text("old\n")
    inode_before = target.stat().st_ino
    write_atomic(str(target), "new\n", mode=0o600)
    assert target.read_text() == "new\n"
    assert target.stat().st_ino != inode_before
    assert sorted(os.listdir(tmp_path)) == ["out.prom"]


def test_every_read_write_listing_and_unit_is_watched(tmp_path: Path) -> None:
    """What a receipt watches comes from here (lingbot_fleet.node.receipts.keep)."""
    root = tmp_path / "node"
    (root / "etc/app.d").mkdir(parents=True)
    (root / "etc/old.conf").write_text("old\n")
    changes = NodeChanges(check_mode=True, root=str(root))
    changes.read("/etc/read.conf")
    changes.write_file("/etc/app.conf", "new\n", owner=os.getuid(), group=os.getgid())
    changes.remove_file("/etc/old.conf")
    changes.make_dir("/etc/app", owner=os.getuid(), group=os.getgid())
    assert changes.exists("/etc/maybe.conf") is False
    changes.note_read("/etc/passwd")
    assert changes.listdir("/etc/app.d") == []
    changes.run(["/bin/systemctl", "enable", "--now", "a.service"], "enable a")
    changes.run(["systemctl", "daemon-reload"], "reload")
    changes.run(["/usr/sbin/update-grub"], "update grub")
    changes.watch_unit("b.timer")
    assert changes.watched.paths == [
        "/etc/read.conf",
        "/etc/app.conf",
        "/etc/old.conf",
        "/etc/app",
        "/etc/maybe.conf",
        "/etc/passwd",
    ]
    assert changes.watched.listings == ["/etc/app.d"]
    assert changes.watched.units == ["a.service", "b.timer"]
