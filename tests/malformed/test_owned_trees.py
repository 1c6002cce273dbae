"""Hostile generations trees and manifests, through the lingbot_generation module on a temp
root: a directory the toolkit did not create (another user's, a group-writable one, one
that is not a generations tree), a manifest entry for a file no role writes, saved copies
reached through symbolic links, and a saved copy in a sibling generation whose name has
the generation's as a prefix. Each is refused with the exact message, and a checksum
listing of the root (owners included) is the same before and after: nothing written,
chmodded or pruned.

``{root}`` in an expected message stands for the temp root.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from malformed_support import checksums, role_module, run_module, write_tree

from lingbot_fleet.node import nodefiles  # noqa: F401 - the module imports it

GENERATIONS = "/var/lib/lingbot-fleet/generations"
MARKER = f"{GENERATIONS}/.lingbot-fleet-generations"
MARKER_TEXT = "lingbot-fleet generations 1\n"
NOBODY = 65534
SECRET = "root:$6$planted:19000:0:99999:7:::\n"
SECRET_SHA = hashlib.sha256(SECRET.encode()).hexdigest()
BEFORE = {"exists": True, "mode": "0644", "uid": 0, "gid": 0, "size": len(SECRET)}
PLAN = "/etc/lingbot/plan.json"
RULE = (
    "a directory the toolkit owns is an absolute, normalized path with a component below the "
    "top level that names the toolkit (holds 'lingbot-fleet'), not under /proc, /sys or /dev, e.g. "
    "/var/lib/lingbot-fleet/generations; nothing was touched"
)

Setup = Callable[[Path], None]


def manifest(number: int, path: str, saved: str | None) -> str:
    before = {**BEFORE, "sha256": SECRET_SHA, **({"saved": saved} if saved else {})}
    entry = {"path": path, "kind": "other", "before": before, "after": {"exists": False}}
    return json.dumps({"schema": 1, "generation": number, "files": [entry]})


def planted(path: str, saved: str = "files/x", **extra: Any) -> dict[str, Any]:
    """A marked tree whose generation 1 restores ``path`` from ``saved``; generation 2 is
    empty, so a rollback to 0 undoes generation 1."""
    return {
        MARKER: MARKER_TEXT,
        f"{GENERATIONS}/.lock.guard": "",
        f"{GENERATIONS}/1/manifest.json": manifest(1, path, saved),
        f"{GENERATIONS}/1/{saved}": SECRET,
        f"{GENERATIONS}/2/manifest.json": json.dumps({"schema": 1, "generation": 2, "files": []}),
        "/etc/lingbot": None,
        **extra,
    }


def chown(node_path: str, uid: int) -> Setup:
    return lambda root: os.chown(root / node_path.lstrip("/"), uid, uid)


def chmod(node_path: str, mode: int) -> Setup:
    return lambda root: os.chmod(root / node_path.lstrip("/"), mode)


def module(**args: Any) -> Callable[[pytest.MonkeyPatch, Path], str]:
    def run(monkeypatch: pytest.MonkeyPatch, root: Path) -> str:
        result = run_module(
            monkeypatch,
            role_module("generations", "lingbot_generation"),
            {"root": str(root), **args},
        )
        assert result["failed"], result
        return result["msg"]

    return run


RECORD = {"action": "record", "run_id": "r1", "paths": [PLAN]}
COMMIT = {"action": "commit", "run_id": "r1", "keep": 1}
ROLLBACK = {"action": "rollback", "run_id": "r9", "rollback_to": 0}
NOT_OURS = (
    "is not a directory of the toolkit (the toolkit would create, chmod and prune there); " + RULE
)

CASES = [
    (
        "generations_dir=/var/lib: refused before anything is made",
        {"/var/lib/dpkg/status": "Package: x\n", PLAN: "{}"},
        None,
        module(**RECORD, generations_dir="/var/lib"),
        f"generations_dir: '/var/lib' {NOT_OURS}",
    ),
    (
        "generations_dir=/: refused",
        {"/7/data": "x", PLAN: "{}"},
        None,
        module(**COMMIT, generations_dir="/"),
        f"generations_dir: '/' {NOT_OURS}",
    ),
    (
        "generations_dir=/tmp: refused",
        {"/tmp/1/kept": "x", PLAN: "{}"},
        None,
        module(**RECORD, generations_dir="/tmp"),
        f"generations_dir: '/tmp' {NOT_OURS}",
    ),
    (
        "generations_dir with '..': refused",
        {PLAN: "{}"},
        None,
        module(**RECORD, generations_dir="/var/lib/lingbot-fleet/../../../etc"),
        "generations_dir: '/var/lib/lingbot-fleet/../../../etc' is not normalized ('..', '.', "
        f"'//' or a trailing '/'); {RULE}",
    ),
    (
        "a tree another user owns: not written, not chmodded",
        {f"{GENERATIONS}/pending": None, PLAN: "{}"},
        chown(GENERATIONS, NOBODY),
        module(**RECORD),
        "{root}" + GENERATIONS + f" is owned by uid {NOBODY}, not by uid 0 that runs the toolkit; "
        "nothing was touched. Another user could plant generations there: remove it (the "
        "toolkit creates every directory of the generations tree itself), or set "
        "generations_dir to another path (generations_dir names a directory the toolkit "
        "creates and owns)",
    ),
    (
        "a tree another user owns: a rollback reads none of its manifests",
        planted(PLAN, f"files{PLAN}", **{PLAN: "{}"}),
        chown(GENERATIONS, NOBODY),
        module(**ROLLBACK),
        "nothing was touched: {root}" + GENERATIONS + f" is owned by uid {NOBODY}, not by uid 0 "
        "that runs the toolkit; nothing was touched. Another user could plant generations "
        "there: remove it (the toolkit creates every directory of the generations tree "
        "itself), or set generations_dir to another path (generations_dir names a directory "
        "the toolkit creates and owns)",
    ),
    (
        "a group-writable tree: not written, not chmodded",
        {MARKER: MARKER_TEXT, PLAN: "{}"},
        chmod(GENERATIONS, 0o770),
        module(**RECORD),
        "{root}" + GENERATIONS + " is writable by its group or others (mode 0770); nothing was "
        "touched. Other users could plant generations there: check what it holds, then chmod "
        "go-w {root}" + GENERATIONS + ", or set generations_dir to another path "
        "(generations_dir names a directory the toolkit creates and owns)",
    ),
    (
        "a parent of the tree another user owns",
        {f"{GENERATIONS}": None, PLAN: "{}"},
        chown("/var/lib/lingbot-fleet", NOBODY),
        module(**RECORD),
        "{root}/var/lib/lingbot-fleet is owned by uid 65534, not by uid 0 that runs the "
        "toolkit; nothing was touched. Another user could plant generations there: remove it "
        "(the toolkit creates every directory of the generations tree itself), or set "
        "generations_dir to another path (generations_dir names a directory the toolkit "
        "creates and owns)",
    ),
    (
        "a tree reached through a symbolic link",
        {"/var/lib/lingbot-fleet": "-> /srv/elsewhere", "/srv/elsewhere/generations": None},
        None,
        module(**RECORD),
        "{root}/var/lib/lingbot-fleet is a symbolic link; nothing was touched. Replace it with "
        "the directory it stands for, or set generations_dir to another path; every directory "
        "of the generations tree must be a real directory (generations_dir names a directory "
        "the toolkit creates and owns)",
    ),
    (
        "an unmarked directory with all-digit subdirectories: nothing pruned",
        {
            "/srv/lingbot-fleet-data/1/model.bin": "weights",
            "/srv/lingbot-fleet-data/2/model.bin": "weights",
            "/srv/lingbot-fleet-data/3/notes": "x",
        },
        None,
        module(**COMMIT, generations_dir="/srv/lingbot-fleet-data"),
        "{root}/srv/lingbot-fleet-data exists but holds no .lingbot-fleet-generations and "
        "things that are not generations; nothing was touched. The toolkit takes over only a "
        "directory it created: set generations_dir to a new path, or move the directory away "
        "(generations_dir names a directory the toolkit creates and owns)",
    ),
    (
        "a planted manifest entry for /etc/shadow",
        planted("/etc/shadow", **{"/etc/shadow": "root:*:1::::::\n"}),
        None,
        module(**ROLLBACK),
        "generation 1 holds an entry for /etc/shadow, which no role of the toolkit writes (nor "
        "generations_record_paths names); nothing was touched. Someone else wrote {root}"
        + GENERATIONS
        + "/1: look at it, remove it, and roll back to another generation with "
        "-e rollback_to=<n>",
    ),
    (
        "a path that only shares a prefix with a toolkit directory",
        planted("/etc/lingbotx/env"),
        None,
        module(**ROLLBACK),
        "generation 1 holds an entry for /etc/lingbotx/env, which no role of the toolkit "
        "writes (nor generations_record_paths names); nothing was touched. Someone else wrote "
        "{root}" + GENERATIONS + "/1: look at it, remove it, and roll back to another "
        "generation with -e rollback_to=<n>",
    ),
    (
        "a saved copy that is a symbolic link out of the tree",
        {
            **planted(PLAN, f"files{PLAN}"),
            f"{GENERATIONS}/1/files{PLAN}": "-> /etc/shadow-copy",
            "/etc/shadow-copy": SECRET,
        },
        None,
        module(action="show", generation=1),
        f"generation 1: the saved copy of {PLAN} is, or lies below, a symbolic link, and a "
        "generation holds only regular files in real directories; nothing was touched. The "
        "generation is damaged or was planted: roll back to another one with -e rollback_to=<n>",
    ),
    (
        "a saved copy below a symbolic link to a directory out of the tree",
        {
            **{k: v for k, v in planted(PLAN, f"files{PLAN}").items() if "/1/files" not in k},
            f"{GENERATIONS}/1/files": "-> /outside",
            f"/outside{PLAN}": SECRET,
        },
        None,
        module(**ROLLBACK),
        f"generation 1: the saved copy of {PLAN} is, or lies below, a symbolic link, and a "
        "generation holds only regular files in real directories; nothing was touched. The "
        "generation is damaged or was planted: roll back to another one with -e rollback_to=<n>",
    ),
    (
        "a restored file below a directory that is a symbolic link",
        {
            **{k: v for k, v in planted(PLAN, f"files{PLAN}").items() if k != "/etc/lingbot"},
            "/etc/lingbot": "-> /etc/cron.d",
            "/etc/cron.d": None,
        },
        None,
        module(**ROLLBACK),
        f"/etc/lingbot is a symbolic link, so restoring {PLAN} would write where it leads; "
        "nothing was touched. Replace the link with the directory it stands for, then roll "
        "back again",
    ),
    (
        "a saved copy in a sibling generation (/…/1 vs /…/10)",
        {
            **planted(PLAN, f"files{PLAN}"),
            f"{GENERATIONS}/10/files{PLAN}": SECRET,
        },
        lambda root: _replant(root, f"{root}{GENERATIONS}/10/files{PLAN}"),
        module(action="show", generation=1),
        "{root}"
        + GENERATIONS
        + "/1/manifest.json is corrupted (saved copy '{root}"
        + GENERATIONS
        + f"/10/files{PLAN}' is outside it); nothing was touched. Repair or remove that "
        "generation, or roll back to another one with -e rollback_to=<n>",
    ),
]


def _replant(root: Path, saved: str) -> None:
    """Generation 1's saved copy named by its absolute path in generation 10 (a path that
    starts with generation 1's own directory as a string)."""
    (root / GENERATIONS.lstrip("/") / "1" / "manifest.json").write_text(manifest(1, PLAN, saved))


def owners_and_checksums(root: Path) -> dict[str, str]:
    listing = checksums(root)
    for name in listing:
        info = (root / name.lstrip("/")).lstat()
        listing[name] += f" {info.st_uid}:{info.st_gid}"
    return listing


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
@pytest.mark.parametrize(
    ("files", "setup", "runner", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_hostile_tree_is_refused_and_nothing_is_touched(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    *,
    files: dict[str, Any],
    setup: Setup | None,
    runner: Callable[[pytest.MonkeyPatch, Path], str],
    message: str,
) -> None:
    root = tmp_path / "node"
    root.mkdir()
    write_tree(root, files)
    for name, content in files.items():  # links in the tree point inside the temp root
        if isinstance(content, str) and content.startswith("-> /"):
            link = root / name.lstrip("/")
            link.unlink()
            link.symlink_to(root / content[4:])
    if setup is not None:
        setup(root)
    before = owners_and_checksums(root)
    assert runner(monkeypatch, root) == message.replace("{root}", str(root))
    assert owners_and_checksums(root) == before
