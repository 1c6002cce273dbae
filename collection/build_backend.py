"""The package's build backend (pyproject.toml): setuptools', with the collection
lingbot.fleet built into every wheel.

``pip install .``, ``pip install git+URL``, ``pip wheel .`` (``make wheel``) and a build
from the sdist all build the wheel through ``build_wheel`` here: it stages the package with
the collection built from this tree (collection/build.py, ``stage_package``) and lets
setuptools build the wheel from the staging directory, so the installed ``lingbot-fleet``
runs the playbooks of the collection it carries. An editable install (``pip install -e .``)
is setuptools' own: it runs the checkout's playbooks (lingbot_fleet.controller.collection).
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401 - the PEP 517/660 hooks setuptools answers
    build_editable,
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

SOURCE_ROOT = Path(__file__).resolve().parents[1]


def _collection_build() -> ModuleType:
    """collection/build.py, loaded from its file (a module named ``build`` on sys.path would
    hide the ``build`` package of a frontend that runs hooks in its own process)."""
    spec = importlib.util.spec_from_file_location(
        "lingbot_fleet_collection_build", Path(__file__).with_name("build.py")
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {Path(__file__).with_name('build.py')}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """PEP 517: the wheel, built by setuptools from the package staged with its collection."""
    build = _collection_build()
    wheel_directory = os.path.abspath(wheel_directory)
    if metadata_directory is not None:
        metadata_directory = os.path.abspath(metadata_directory)
    with tempfile.TemporaryDirectory(prefix="lingbot-fleet-wheel-") as staging_name:
        try:
            staging = build.stage_package(SOURCE_ROOT, Path(staging_name))
        except (build.BuildError, build.NodeAppError) as error:
            raise SystemExit(f"lingbot-fleet build: {error}") from error
        previous = os.getcwd()
        os.chdir(staging)  # setuptools builds the project in the working directory
        try:
            return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
        finally:
            os.chdir(previous)
