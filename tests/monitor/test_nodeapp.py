"""lingbot_fleet.controller.nodeapp: the monitor as one deterministic zipapp of the installed
package."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from lingbot_fleet.controller import nodeapp
from lingbot_fleet.controller.nodeapp import NodeAppError

# What only the controller runs: none of it may reach the nodes.
CONTROLLER_ONLY = (
    "lingbot_fleet/cli.py",
    "lingbot_fleet/audit/",
    "lingbot_fleet/lab/",
    "lingbot_fleet/plan/",
    "lingbot_fleet/controller/policy.py",
    "lingbot_fleet/rollout/",
    "lingbot_fleet/controller/ansible_data.py",
    "lingbot_fleet/controller/nodeapp.py",
    "lingbot_fleet/monitor/units.py",
    # What the install module needs; the monitor writes through lingbot_fleet.node.atomic.
    "lingbot_fleet/node/nodefiles.py",
    "lingbot_fleet/node/generations.py",
)


@pytest.fixture(scope="module")
def monitor_app() -> bytes:
    return nodeapp.build(interpreter=sys.executable)


def names_of(data: bytes) -> list[str]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return archive.namelist()


def contents(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def isolated(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run without site-packages (-S) and without PYTHONPATH: only the archive is there."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=60
    )


# ---- the monitor's archive ------------------------------------------------------------------


def test_the_same_package_gives_the_same_bytes(monitor_app: bytes) -> None:
    assert nodeapp.build(interpreter=sys.executable) == monitor_app
    assert monitor_app.startswith(f"#!{sys.executable}\n".encode())
    other = nodeapp.build(interpreter="/opt/python3.12/bin/python3")
    assert other.startswith(b"#!/opt/python3.12/bin/python3\n")
    assert contents(other) == contents(monitor_app)


def test_entries_are_sorted_with_fixed_times_and_modes_and_no_bytecode(monitor_app: bytes) -> None:
    with zipfile.ZipFile(io.BytesIO(monitor_app)) as archive:
        infos = archive.infolist()
    names = [info.filename for info in infos]
    assert names == sorted(names)
    assert "__main__.py" in names
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    assert {info.date_time for info in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {info.compress_type for info in infos} == {zipfile.ZIP_STORED}
    assert {info.external_attr >> 16 for info in infos} == {0o100644}


def test_the_archive_holds_what_the_monitor_imports_and_no_controller_code(
    monitor_app: bytes,
) -> None:
    names = names_of(monitor_app)
    for needed in (
        "lingbot_fleet/__init__.py",
        "lingbot_fleet/monitor/__main__.py",
        "lingbot_fleet/monitor/cli.py",
        "lingbot_fleet/monitor/config.py",
        "lingbot_fleet/monitor/run.py",
        "lingbot_fleet/gpu/probe.py",
        "lingbot_fleet/gpu/cuda.py",
        "lingbot_fleet/facts/smi.py",
        "lingbot_fleet/parsers/topo.py",
        "lingbot_fleet/node/atomic.py",
    ):
        assert needed in names
    assert [name for name in names if name.startswith(CONTROLLER_ONLY)] == []
    package = nodeapp.package_dir()
    for name in names:
        if name != "__main__.py":
            assert (package.parent / name).is_file(), name


def test_every_module_imports_from_the_archive_alone(tmp_path: Path, monitor_app: bytes) -> None:
    app = tmp_path / "lingbot-fleet-monitor"
    app.write_bytes(monitor_app)
    modules = [
        name.removesuffix("/__init__.py").removesuffix(".py").replace("/", ".")
        for name in names_of(monitor_app)
        if name.startswith("lingbot_fleet/") and not name.endswith("__main__.py")
    ]
    script = (
        "import importlib, json, sys\n"
        f"sys.path.insert(0, {str(app)!r})\n"
        "files = {m: importlib.import_module(m).__file__ for m in json.loads(sys.argv[1])}\n"
        "print(json.dumps(files))\n"
    )
    done = isolated([sys.executable, "-S", "-c", script, json.dumps(modules)], tmp_path)
    assert done.returncode == 0, done.stderr
    files = json.loads(done.stdout)
    assert sorted(files) == sorted(modules)
    assert all(path.startswith(str(app) + "/") for path in files.values())


def test_the_archive_runs_the_monitor(tmp_path: Path, monitor_app: bytes) -> None:
    app = tmp_path / "lingbot-fleet-monitor"
    app.write_bytes(monitor_app)
    app.chmod(0o755)
    shown = isolated([sys.executable, "-S", str(app), "--help"], tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: lingbot-fleet-monitor ")
    config = tmp_path / "monitor.json"
    config.write_text(json.dumps({"size_mib": 4}))
    # Run by its #! line, as operators run it.
    checked = isolated([str(app), "--check-config", "--config", str(config)], tmp_path)
    assert (checked.returncode, checked.stdout) == (0, f"configuration {config}: OK\n")
    config.write_text(json.dumps({"size_mib": 0}))
    refused = isolated([str(app), "--check-config", "--config", str(config)], tmp_path)
    assert refused.returncode == 1
    assert "size_mib must be at least 1, not 0" in refused.stderr


def test_python_m_still_runs_the_monitor() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lingbot_fleet.monitor", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: lingbot-fleet-monitor ")


# ---- following imports, on a package of our own -----------------------------------------------


def make_package(root: Path, files: dict[str, str]) -> Path:
    """A package named lingbot_fleet under ``root`` holding ``files``."""
    package = root / "lingbot_fleet"
    for name, text in {"__init__.py": '__version__ = "9.9"\n', **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


TOOL = {
    "tool/__init__.py": "",
    "tool/__main__.py": "from .run import go\nfrom .. import helper\n\ngo()\n",
    "tool/run.py": (
        "import json\n"
        "from typing import TYPE_CHECKING\n\n"
        "from ..shared import thing\n\n"
        "if TYPE_CHECKING:\n"
        "    from ..unused import Hint\n\n\n"
        "def go():\n"
        "    from lingbot_fleet.lazy import value\n\n"
        "    print(json.dumps([thing, value]))\n"
    ),
    "shared.py": "thing = 'shared'\n",
    "lazy.py": "value = 'lazy'\n",
    "helper.py": "import os\n",
    "unused.py": "import yaml\n",
}


def test_imports_are_followed_relative_absolute_and_inside_functions(tmp_path: Path) -> None:
    package = make_package(tmp_path / "src", TOOL)
    closure = nodeapp.import_closure("lingbot_fleet.tool.__main__", package)
    assert closure.files == (
        "lingbot_fleet/__init__.py",
        "lingbot_fleet/helper.py",
        "lingbot_fleet/lazy.py",
        "lingbot_fleet/shared.py",
        "lingbot_fleet/tool/__init__.py",
        "lingbot_fleet/tool/__main__.py",
        "lingbot_fleet/tool/run.py",
    )
    assert dict(closure.foreign) == {
        "json": ("lingbot_fleet/tool/run.py",),
        "os": ("lingbot_fleet/helper.py",),
        "typing": ("lingbot_fleet/tool/run.py",),
    }
    app = tmp_path / "tool.pyz"
    app.write_bytes(nodeapp.build("lingbot_fleet.tool", sys.executable, package))
    done = isolated([sys.executable, "-S", str(app)], tmp_path)
    assert (done.returncode, done.stdout) == (0, '["shared", "lazy"]\n'), done.stderr
    with zipfile.ZipFile(app) as archive:
        main = archive.read("__main__.py").decode()
    assert "lingbot_fleet.tool from lingbot-fleet 9.9" in main


def test_a_third_party_import_fails_the_build_and_names_the_file(tmp_path: Path) -> None:
    package = make_package(tmp_path / "src", {**TOOL, "helper.py": "import yaml\nimport pynvml\n"})
    with pytest.raises(NodeAppError) as raised:
        nodeapp.build("lingbot_fleet.tool", None, package)
    assert str(raised.value) == (
        "node-side code must need only the standard library, but imports yaml (imported by "
        "lingbot_fleet/helper.py); import it lazily and add it to nodeapp.OPTIONAL_IMPORTS, "
        "or keep that code on the controller"
    )


def test_a_module_without_a_file_fails_the_build(tmp_path: Path) -> None:
    package = make_package(tmp_path / "src", {**TOOL, "shared.py": "from .gone import x\n"})
    with pytest.raises(NodeAppError) as raised:
        nodeapp.build("lingbot_fleet.tool", None, package)
    assert str(raised.value) == (
        f"no file in the installed package at {package} for lingbot_fleet.gone (imported by "
        "lingbot_fleet/shared.py)"
    )


def test_an_interpreter_line_with_spaces_is_refused() -> None:
    with pytest.raises(NodeAppError, match="cannot hold a path with spaces"):
        nodeapp.zipapp_bytes({"__main__.py": b""}, "/opt/my python/bin/python3")


def test_the_cache_builds_once_per_content(tmp_path: Path) -> None:
    package = make_package(tmp_path / "src", TOOL)
    cache = tmp_path / "cache"
    first = nodeapp.cached_build(cache, "lingbot_fleet.tool", "/usr/bin/python3", package)
    built = first.stat().st_mtime_ns
    again = nodeapp.cached_build(cache, "lingbot_fleet.tool", "/usr/bin/python3", package)
    assert (again, again.stat().st_mtime_ns) == (first, built)
    assert first.read_bytes() == nodeapp.build("lingbot_fleet.tool", "/usr/bin/python3", package)
    (package / "shared.py").write_text("thing = 'changed'\n")
    # The sources are read once per process (a run); the next run sees the change.
    nodeapp.package_digest.cache_clear()
    changed = nodeapp.cached_build(cache, "lingbot_fleet.tool", "/usr/bin/python3", package)
    assert changed != first
    assert b"thing = 'changed'" in changed.read_bytes()
    other_python = nodeapp.cached_build(cache, "lingbot_fleet.tool", "/usr/bin/python3.11", package)
    assert other_python not in (first, changed)
    archives = [path for path in cache.iterdir() if not path.name.startswith(".")]
    assert sorted(path.name.startswith("tool-") for path in archives) == [True] * 3


def test_hosts_asking_at_once_share_one_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every host of a run asks for the archive at once: one builds, the others wait."""
    import threading
    import time

    package = make_package(tmp_path / "src", TOOL)
    builds = []
    real_build = nodeapp.build

    def slow_build(*args: object) -> bytes:
        builds.append(args)
        time.sleep(0.2)
        return real_build(*args)

    monkeypatch.setattr(nodeapp, "build", slow_build)
    cache = tmp_path / "cache"
    paths: list[Path] = []

    def ask() -> None:
        paths.append(nodeapp.cached_build(cache, "lingbot_fleet.tool", "/usr/bin/python3", package))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1
    assert len(set(paths)) == 1 and len(paths) == 8
