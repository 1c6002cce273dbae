"""Programs that run on the nodes outside a module, built as one zipapp each.

The path monitor runs on every node from a systemd timer, not through Ansible. It is
shipped as one file: a zip application (PEP 441, what ``python -m zipapp`` makes) built on
the controller from the installed ``lingbot_fleet`` package (``lingbot_fleet.__file__``),
holding exactly the modules the program imports and a ``__main__.py`` that runs it as
``python -m <package>`` would.

Which modules: the import closure of the program's ``__main__`` module, found by reading
the import statements of each file (module level and inside functions), relative or
absolute, with the ``__init__`` of every package on the way. Following imports rather
than taking the package minus a hand-kept list of controller-only parts (cli, audit, lab,
plan, ...) means a new controller module never reaches the nodes and a new node module is
never forgotten. Imports outside ``lingbot_fleet`` must be in the standard library, or in
``OPTIONAL_IMPORTS`` (imported lazily, absent on most nodes); anything else fails the
build and names the file that imports it.

The bytes are deterministic: entries sorted by name, fixed timestamps, mode and creator,
no ``__pycache__``, stored uncompressed so the result does not depend on the controller's
zlib. The same package and interpreter line give the same archive on every controller,
so a node's copy is rewritten only when the code changed. Bytecode is left out on
purpose: it would tie the archive to the controller's Python version.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import os
import sys
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..node.atomic import write_atomic

PACKAGE = "lingbot_fleet"
MONITOR_PACKAGE = "lingbot_fleet.monitor"
# Imported inside functions and only when present on the node.
OPTIONAL_IMPORTS = frozenset({"pynvml"})
# 1980-01-01 00:00:00, the earliest time a zip entry can hold.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
# Part of every cache key: bump it when the archive layout changes.
FORMAT_VERSION = "1"

MAIN_TEMPLATE = '''\
"""{package} from lingbot-fleet {version}, as a zipapp (lingbot_fleet.controller.nodeapp)."""

import runpy

runpy.run_module("{package}", run_name="__main__", alter_sys=True)
'''


class NodeAppError(Exception):
    """The program cannot be built for the nodes; str() names the file and the fix."""


@dataclass(frozen=True)
class Closure:
    """What a program needs: its modules' files and the other modules they import."""

    # Paths relative to the package's parent directory ("lingbot_fleet/facts/smi.py"), sorted.
    files: tuple[str, ...]
    # Top-level module name outside the package -> the files that import it.
    foreign: Mapping[str, tuple[str, ...]]


def package_dir() -> Path:
    """The directory of the lingbot_fleet package this module is part of, wherever it is
    installed: site-packages, a checkout, or an Ansible collection's plugin_utils."""
    return Path(__file__).resolve().parents[1]


def module_file(root: Path, name: str) -> Path | None:
    """'lingbot_fleet.facts.smi' -> <root>/facts/smi.py or <root>/facts/smi/__init__.py."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    path = root.joinpath(*parts[1:])
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if parts[1:] and path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> Iterable[ast.Import | ast.ImportFrom]:
    """Every import statement, except those under ``if TYPE_CHECKING:`` (never run)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


def imports_of(source: str, module: str, is_package: bool) -> list[tuple[str, tuple[str, ...]]]:
    """(module imported, names that may be its submodules) per import in ``source``.

    ``import a.b`` gives ("a.b", ()); ``from .x import y, z`` in package p gives
    ("p.x", ("p.x.y", "p.x.z")): y and z are submodules where a file exists for them,
    else attributes of p.x.
    """
    found: list[tuple[str, tuple[str, ...]]] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in _import_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, ()) for alias in node.names]
            continue
        if node.level:
            parts = package.split(".")
            if node.level - 1 >= len(parts):
                raise NodeAppError(f"{module}: relative import beyond the top-level package")
            base = ".".join(parts[: len(parts) - (node.level - 1)])
            target = f"{base}.{node.module}" if node.module else base
        else:
            target = node.module or ""
        if target != "__future__":
            names = tuple(f"{target}.{alias.name}" for alias in node.names if alias.name != "*")
            found.append((target, names))
    return found


def import_closure(entry: str, root: Path) -> Closure:
    """Every file of the package that importing ``entry`` runs, and what else they import."""
    files: dict[str, Path] = {}
    foreign: dict[str, set[str]] = {}
    missing: list[str] = []
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in files:
            continue
        path = module_file(root, name)
        if path is None:
            missing.append(name)
            continue
        files[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:depth]) for depth in range(1, len(parts))]
        relative = path.relative_to(root.parent).as_posix()
        source = path.read_text(encoding="utf-8")
        for target, candidates in imports_of(source, name, path.name == "__init__.py"):
            top = target.split(".")[0]
            if top != PACKAGE:
                foreign.setdefault(top, set()).add(relative)
                continue
            if module_file(root, target) is None:
                missing.append(f"{target} (imported by {relative})")
                continue
            todo.append(target)
            todo += [name for name in candidates if module_file(root, name) is not None]
    if missing:
        raise NodeAppError(
            f"no file in the installed package at {root} for {', '.join(sorted(set(missing)))}"
        )
    return Closure(
        files=tuple(sorted(path.relative_to(root.parent).as_posix() for path in files.values())),
        foreign={top: tuple(sorted(users)) for top, users in sorted(foreign.items())},
    )


def check_standard_library_only(closure: Closure) -> None:
    """NodeAppError naming every import that is neither ours, stdlib nor optional."""
    outside = {
        top: users
        for top, users in closure.foreign.items()
        if top not in sys.stdlib_module_names and top not in OPTIONAL_IMPORTS
    }
    if outside:
        named = "; ".join(
            f"{top} (imported by {', '.join(users)})" for top, users in outside.items()
        )
        raise NodeAppError(
            f"node-side code must need only the standard library, but imports {named}; "
            "import it lazily and add it to nodeapp.OPTIONAL_IMPORTS, or keep that code "
            "on the controller"
        )


def zipapp_bytes(files: Mapping[str, bytes], interpreter: str | None = None) -> bytes:
    """A zipapp of ``files`` (archive name -> content), the same bytes for the same input.

    ``interpreter`` becomes the ``#!`` line, as ``python -m zipapp -p`` writes it.
    """
    if "__main__.py" not in files:
        raise NodeAppError("a zipapp needs a __main__.py at the top of the archive")
    buffer = io.BytesIO()
    if interpreter:
        if any(character.isspace() for character in interpreter):
            raise NodeAppError(
                f"interpreter {interpreter!r}: a #! line cannot hold a path with spaces"
            )
        buffer.write(b"#!" + interpreter.encode("utf-8") + b"\n")
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_STORED
            info.create_system = 3  # Unix, so external_attr carries the mode
            info.external_attr = 0o100644 << 16
            archive.writestr(info, files[name])
    return buffer.getvalue()


def program_files(package: str, root: Path | None = None) -> dict[str, bytes]:
    """Archive name -> content for the program ``python -m <package>`` runs."""
    root = root or package_dir()
    closure = import_closure(f"{package}.__main__", root)
    check_standard_library_only(closure)
    files = {name: (root.parent / name).read_bytes() for name in closure.files}
    version = _package_version(root)
    files["__main__.py"] = MAIN_TEMPLATE.format(package=package, version=version).encode()
    return files


def _package_version(root: Path) -> str:
    tree = ast.parse((root / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
        ):
            return str(node.value.value)
    return "unknown"


def build(
    package: str = MONITOR_PACKAGE, interpreter: str | None = None, root: Path | None = None
) -> bytes:
    """The zipapp of ``package`` (run as ``python -m``) from the installed lingbot_fleet."""
    return zipapp_bytes(program_files(package, root), interpreter)


@functools.cache
def package_digest(root: Path) -> str:
    """sha256 over the relative path and content of every .py file under ``root``, read once
    per process: the code as it was when the run started (the controller's main process
    warms it before Ansible's workers fork, so no host's worker reads it again)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def source_key(package: str, interpreter: str | None, root: Path) -> str:
    """sha256 over everything the archive is made from: every .py of the package, the
    program, the interpreter line and the format."""
    digest = hashlib.sha256()
    for part in (FORMAT_VERSION, package, interpreter or "", package_digest(root)):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def cached_build(
    cache_dir: str | os.PathLike[str],
    package: str = MONITOR_PACKAGE,
    interpreter: str | None = None,
    root: Path | None = None,
) -> Path:
    """The archive's path in ``cache_dir``, built when the sources changed since the last.

    Keyed by ``source_key``, so hosts of one run (and runs with the same package) share one
    build. The hosts of a run ask at once: the first builds under a lock of the cache
    directory while the others wait for it, rather than each building its own (a complete
    file is renamed into place either way).
    """
    import fcntl  # noqa: PLC0415 - only the controller builds

    root = root or package_dir()
    key = source_key(package, interpreter, root)
    directory = Path(cache_dir)
    target = directory / f"{package.rpartition('.')[2]}-{key[:32]}.pyz"
    if target.is_file():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".build.lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            write_atomic(str(target), build(package, interpreter, root), mode=0o644)
    return target


def sha256_file(path: str | os.PathLike[str]) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# Warm in the main process (see package_digest).
package_digest(package_dir())
