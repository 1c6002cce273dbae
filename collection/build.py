"""Build the Ansible collection lingbot.fleet, and stage the CLI package that carries it.

    python collection/build.py collection --output-dir build/collection

Every wheel of the package carries the collection: the package's build backend
(collection/build_backend.py, named in pyproject.toml) builds the wheel from a staged copy
of the package with the collection installed into ``lingbot_fleet/_collection``
(``stage_package``), whether the wheel is built by ``pip install .``, from a git URL, by
``make wheel`` or from an sdist.

The collection is generated from the repository, never kept twice in git:

- ``roles/<role>/`` without ``library/`` and ``action_plugins/``;
- ``roles/*/library/*.py`` become ``plugins/modules/``, with
  ``ansible.module_utils.lingbot_fleet`` rewritten to the collection's module_utils;
- ``plugins/action``, ``plugins/lookup``, ``plugins/doc_fragments``, ``plugins/filter`` and
  ``roles/*/action_plugins`` become the collection's plugins, with ``lingbot_fleet``
  rewritten to the collection's plugin_utils;
- ``plugins/module_utils/lingbot_fleet``: the files of the package the modules import
  (their import closure, standard library only: it runs on the nodes);
- ``plugins/plugin_utils/lingbot_fleet``: the files the controller-side plugins import,
  and the path monitor's program (``lingbot_fleet.controller.nodeapp`` builds it from there);
- ``playbooks/``: the repository's playbooks and its ``site.yml``;
- ``collection/`` (meta/, tests/, README.md, requirements.txt, bindep.txt), and
  ``collection/galaxy.source.yml`` as galaxy.yml, with the package's version written in.
  collection/ is not a collection by itself: it has no galaxy.yml, so
  ``ansible-galaxy collection build collection/`` refuses; ``make collection`` builds it.

``collection/tests/sanity/ignore-2.19.txt`` holds ansible-test's ignores, each with its
reason; module_utils and plugin_utils hold the same package files, so an entry for one
usually has its twin for the other.

The package's files are copied unchanged: they import each other relatively, which
works in every home (AnsiballZ follows relative imports in collection module_utils).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "python"))

from lingbot_fleet import __version__  # noqa: E402
from lingbot_fleet.controller.nodeapp import (  # noqa: E402
    MONITOR_PACKAGE,
    PACKAGE,
    Closure,
    NodeAppError,
    check_standard_library_only,
    import_closure,
    imports_of,
    module_file,
)

NAMESPACE = "lingbot"
NAME = "fleet"
COLLECTION_PREFIX = f"ansible_collections.{NAMESPACE}.{NAME}.plugins"
MODULE_UTILS_NAME = f"{COLLECTION_PREFIX}.module_utils.{PACKAGE}"
PLUGIN_UTILS_NAME = f"{COLLECTION_PREFIX}.plugin_utils.{PACKAGE}"
LEGACY_MODULE_UTILS_NAME = f"ansible.module_utils.{PACKAGE}"
# Plugin directories of the repository -> the collection's plugin type directory.
PLUGIN_SOURCES = {
    "plugins/action": "action",
    "plugins/lookup": "lookup",
    "plugins/filter": "filter",
    "plugins/doc_fragments": "doc_fragments",
}
ROLE_PLUGIN_DIRS = {"action_plugins": "action"}
ROLE_DIRS_LEFT_OUT = ("library", *ROLE_PLUGIN_DIRS)
# Programs the controller-side plugins build from plugin_utils (lingbot_fleet.controller.nodeapp).
CONTROLLER_PROGRAMS = (f"{MONITOR_PACKAGE}.__main__",)
IGNORED_NAMES = shutil.ignore_patterns("__pycache__", "*.pyc")
# What collection/ holds for the build itself, not for the collection.
GALAXY_SOURCE = "galaxy.source.yml"
COLLECTION_FILES_LEFT_OUT = ("build.py", "build_backend.py", GALAXY_SOURCE, "__pycache__", "*.pyc")


class BuildError(Exception):
    """The collection or the wheel cannot be built; str() names the file and the fix."""


def _python_files(directory: Path) -> list[Path]:
    return sorted(path for path in directory.glob("*.py") if path.name != "__init__.py")


def _rewrite(source: str, old: str, new: str) -> str:
    """``from old...``/``import old...`` statements -> ``new...`` (module level or indented)."""
    pattern = re.compile(rf"^(\s*)(from|import)\s+{re.escape(old)}(?=[.\s])", re.MULTILINE)
    return pattern.sub(lambda match: f"{match.group(1)}{match.group(2)} {new}", source)


def _imported_names(source: str, where: Path) -> list[str]:
    try:
        found = imports_of(source, "ansible_plugin", is_package=False)
    except SyntaxError as error:
        raise BuildError(f"{where}: not valid Python: {error}") from error
    names: list[str] = []
    for target, candidates in found:
        names += [target, *candidates]
    return names


def _package_entries(sources: Iterable[tuple[Path, str]], prefix: str) -> set[str]:
    """The ``lingbot_fleet.*`` modules that ``sources`` import under ``prefix``."""
    entries: set[str] = set()
    for path, source in sources:
        for name in _imported_names(source, path):
            if name == prefix or name.startswith(prefix + "."):
                entries.add(PACKAGE + name[len(prefix) :])
    return entries


def _closure_files(
    entries: Iterable[str], package_root: Path
) -> tuple[set[str], dict[str, tuple[str, ...]]]:
    """The package's files importing ``entries`` runs, and the other modules they import."""
    files: set[str] = set()
    foreign: dict[str, set[str]] = {}
    for entry in sorted(entries):
        if module_file(package_root, entry) is None:
            continue  # an attribute imported from a module, not a module of its own
        closure = import_closure(entry, package_root)
        files.update(closure.files)
        for top, users in closure.foreign.items():
            foreign.setdefault(top, set()).update(users)
    return files, {top: tuple(sorted(users)) for top, users in sorted(foreign.items())}


def _copy_package(files: Iterable[str], package_root: Path, destination: Path) -> None:
    for relative in sorted(files):
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(package_root.parent / relative, target)


def _check_rewritten(path: Path, source: str) -> None:
    """BuildError when a plugin or module still imports the package by a checkout name."""
    for name in _imported_names(source, path):
        top = name.split(".")[0]
        if top == PACKAGE or name.startswith(LEGACY_MODULE_UTILS_NAME):
            raise BuildError(
                f"{path}: still imports {name} after the rewrite; import it with "
                f"'from {PACKAGE}.<module> import ...' (plugins) or 'from "
                f"{LEGACY_MODULE_UTILS_NAME}.<module> import ...' (modules)"
            )


def _fragment_names(repo: Path) -> list[str]:
    return [path.stem for path in _python_files(repo / "plugins" / "doc_fragments")]


def _qualify_fragments(source: str, fragments: Iterable[str]) -> str:
    for fragment in fragments:
        source = re.sub(
            rf"^(\s+- ){re.escape(fragment)}\s*$",
            rf"\g<1>{NAMESPACE}.{NAME}.{fragment}",
            source,
            flags=re.MULTILINE,
        )
    return source


def _modules(repo: Path) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in sorted(repo.glob("roles/*/library/*.py")):
        if path.name in modules:
            raise BuildError(f"{path}: module {path.stem} is also in {modules[path.name]}")
        modules[path.name] = path
    return modules


def _plugins(repo: Path) -> dict[Path, Path]:
    """Collection path (relative to plugins/) -> the repository file."""
    plugins: dict[Path, Path] = {}
    sources = [(repo / directory, kind) for directory, kind in PLUGIN_SOURCES.items()]
    for role_dir in sorted((repo / "roles").iterdir()):
        sources += [(role_dir / directory, kind) for directory, kind in ROLE_PLUGIN_DIRS.items()]
    for directory, kind in sources:
        if not directory.is_dir():
            continue
        for path in _python_files(directory):
            target = Path(kind) / path.name
            if target in plugins:
                raise BuildError(f"{path}: plugin {target} is also in {plugins[target]}")
            plugins[target] = path
    return plugins


def _qualify_lookups(source: str, lookups: Iterable[str]) -> str:
    """lookup('name', ...) and query('name', ...) of the toolkit's own lookup plugins as
    lookup('lingbot.fleet.name', ...): in a collection's roles and playbooks a lookup is
    found by its full name only."""
    for lookup in lookups:
        source = re.sub(
            rf"\b(lookup|query|q)\((['\"]){re.escape(lookup)}\2",
            rf"\g<1>(\g<2>{NAMESPACE}.{NAME}.{lookup}\g<2>",
            source,
        )
    return source


def _qualify_lookups_in(directory: Path, repo: Path) -> None:
    lookups = [path.stem for path in _python_files(repo / "plugins" / "lookup")]
    for path in sorted(directory.rglob("*.yml")):
        text = path.read_text(encoding="utf-8")
        qualified = _qualify_lookups(text, lookups)
        if qualified != text:
            path.write_text(qualified, encoding="utf-8")


def _copy_roles(repo: Path, collection: Path) -> None:
    for role_dir in sorted((repo / "roles").iterdir()):
        if not (role_dir / "tasks").is_dir():
            continue
        shutil.copytree(
            role_dir,
            collection / "roles" / role_dir.name,
            ignore=shutil.ignore_patterns(*ROLE_DIRS_LEFT_OUT, "__pycache__", "*.pyc"),
        )
    _qualify_lookups_in(collection / "roles", repo)


def _copy_playbooks(repo: Path, collection: Path) -> None:
    """playbooks/*.yml, and the repository's site.yml importing them from its own directory."""
    destination = collection / "playbooks"
    shutil.copytree(repo / "playbooks", destination, ignore=IGNORED_NAMES)
    site = (repo / "site.yml").read_text(encoding="utf-8")
    site = re.sub(r"(import_playbook:\s+)playbooks/", r"\1", site)
    if "playbooks/" in re.sub(r"#.*", "", site):
        raise BuildError(
            f"{repo / 'site.yml'}: refers to playbooks/ in a way the build cannot rewrite; "
            "import each playbook with 'ansible.builtin.import_playbook: playbooks/<name>.yml'"
        )
    (destination / "site.yml").write_text(site, encoding="utf-8")
    _qualify_lookups_in(destination, repo)


def _copy_collection_files(repo: Path, collection: Path) -> None:
    source = repo / "collection"
    shutil.copytree(
        source,
        collection,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns(*COLLECTION_FILES_LEFT_OUT),
    )
    text = (source / GALAXY_SOURCE).read_text(encoding="utf-8")
    text, count = re.subn(r"^version:.*$", f"version: {__version__}", text, flags=re.MULTILINE)
    if count != 1:
        raise BuildError(f"{source / GALAXY_SOURCE}: needs exactly one 'version:' line")
    (collection / "galaxy.yml").write_text(text, encoding="utf-8")


def build_tree(repo: Path, output_dir: Path) -> Path:
    """Write ``<output_dir>/ansible_collections/lingbot/fleet`` afresh; its path."""
    collection = output_dir / "ansible_collections" / NAMESPACE / NAME
    if collection.exists():
        shutil.rmtree(collection)
    collection.mkdir(parents=True)
    package_root = repo / "python" / PACKAGE
    fragments = _fragment_names(repo)

    module_sources: list[tuple[Path, str]] = []
    for name, path in _modules(repo).items():
        source = path.read_text(encoding="utf-8")
        module_sources.append((path, source))
        source = _rewrite(source, LEGACY_MODULE_UTILS_NAME, MODULE_UTILS_NAME)
        source = _qualify_fragments(source, fragments)
        target = collection / "plugins" / "modules" / name
        _check_rewritten(target, source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source, encoding="utf-8")

    plugin_sources: list[tuple[Path, str]] = []
    for relative, path in _plugins(repo).items():
        source = path.read_text(encoding="utf-8")
        plugin_sources.append((path, source))
        source = _rewrite(source, PACKAGE, PLUGIN_UTILS_NAME)
        target = collection / "plugins" / relative
        _check_rewritten(target, source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source, encoding="utf-8")

    node_entries = _package_entries(module_sources, LEGACY_MODULE_UTILS_NAME)
    node_files, node_foreign = _closure_files(node_entries, package_root)
    try:
        check_standard_library_only(Closure(files=(), foreign=node_foreign))
    except NodeAppError as error:
        raise BuildError(f"the modules' module_utils: {error}") from error
    _copy_package(node_files, package_root, collection / "plugins" / "module_utils")

    controller_entries = _package_entries(plugin_sources, PACKAGE) | set(CONTROLLER_PROGRAMS)
    controller_files, _ = _closure_files(controller_entries, package_root)
    _copy_package(controller_files, package_root, collection / "plugins" / "plugin_utils")

    _copy_roles(repo, collection)
    _copy_playbooks(repo, collection)
    _copy_collection_files(repo, collection)
    return collection


def _ansible_galaxy() -> list[str]:
    """ansible-galaxy of the ansible-core this Python imports (a virtualenv's, or the package
    build's own environment, where ansible-core is a build requirement)."""
    if importlib.util.find_spec("ansible") is None:
        raise BuildError(
            f"{sys.executable} cannot import ansible: install ansible-core (make setup)"
        )
    return [sys.executable, "-m", "ansible.cli.galaxy"]


def build_tarball(collection: Path, output_dir: Path) -> Path:
    """``ansible-galaxy collection build`` of the tree into ``output_dir``; the tarball."""
    output_dir.mkdir(parents=True, exist_ok=True)
    tarball = output_dir / f"{NAMESPACE}-{NAME}-{__version__}.tar.gz"
    tarball.unlink(missing_ok=True)
    done = subprocess.run(
        [
            *_ansible_galaxy(),
            "collection",
            "build",
            str(collection),
            "--output-path",
            str(output_dir),
        ],
        capture_output=True,
        text=True,
        check=False,
        # Run where no project's ansible.cfg is found: the build must not depend on one.
        cwd=output_dir,
        env={key: value for key, value in os.environ.items() if key != "ANSIBLE_CONFIG"},
    )
    if done.returncode != 0 or not tarball.is_file():
        raise BuildError(
            f"ansible-galaxy collection build {collection} failed (exit {done.returncode}): "
            f"{done.stdout}{done.stderr}"
        )
    return tarball


def install_tarball(tarball: Path, collections_dir: Path) -> Path:
    """``ansible-galaxy collection install`` of the tarball into ``collections_dir``."""
    collections_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            *_ansible_galaxy(),
            "collection",
            "install",
            "--force",
            "-p",
            str(collections_dir),
            str(tarball),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=collections_dir,
        env={key: value for key, value in os.environ.items() if key != "ANSIBLE_CONFIG"},
    )
    installed = collections_dir / "ansible_collections" / NAMESPACE / NAME
    if done.returncode != 0 or not (installed / "MANIFEST.json").is_file():
        raise BuildError(
            f"ansible-galaxy collection install {tarball} failed (exit {done.returncode}): "
            f"{done.stdout}{done.stderr}"
        )
    return installed


def build_collection(repo: Path, output_dir: Path) -> Path:
    """The collection's tree and tarball under ``output_dir``; the tarball."""
    return build_tarball(build_tree(repo, output_dir), output_dir)


def stage_package(repo: Path, staging: Path) -> Path:
    """A copy of the package's sources in ``staging`` (pyproject.toml, README.md, python/)
    with the collection built from ``repo`` installed into ``lingbot_fleet/_collection``, as
    ``ansible-galaxy collection install`` lays it out (with MANIFEST.json); ``staging``.

    The wheel is built from there, so the checkout never holds a copy of the collection.
    """
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(repo / name, staging / name)
    shutil.copytree(
        repo / "python",
        staging / "python",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "_collection"),
    )
    with tempfile.TemporaryDirectory(prefix="lingbot-fleet-collection-") as output_name:
        tarball = build_collection(repo, Path(output_name))
        install_tarball(tarball, staging / "python" / PACKAGE / "_collection")
    return staging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    collection = commands.add_parser("collection", help="build the collection's tree and tarball")
    collection.add_argument("--output-dir", type=Path, default=REPO_ROOT / "build" / "collection")
    args = parser.parse_args(argv)
    try:
        print(build_collection(REPO_ROOT, args.output_dir.resolve()))
    except (BuildError, NodeAppError) as error:
        print(f"build: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
