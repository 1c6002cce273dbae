"""lingbot.fleet builds from this tree, installs with ansible-galaxy and parses without
this repository's ansible.cfg; ansible-test sanity passes on it."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from collection_support import BIN, REPO_ROOT, Built, run

PLAYBOOKS = ("site", "provision", "rollback", "audit", "rollout")
INVENTORY = "all:\n  children:\n    gpu-nodes:\n      hosts:\n        node1:\n"


def test_the_collection_holds_every_module_plugin_role_and_playbook(
    built_collection: Built,
) -> None:
    installed = built_collection.installed
    modules = sorted(path.name for path in REPO_ROOT.glob("roles/*/library/*.py"))
    assert sorted(p.name for p in (installed / "plugins" / "modules").glob("*.py")) == modules
    actions = [
        *REPO_ROOT.glob("plugins/action/*.py"),
        *REPO_ROOT.glob("roles/*/action_plugins/*.py"),
    ]
    assert sorted(p.name for p in (installed / "plugins" / "action").glob("*.py")) == sorted(
        path.name for path in actions
    )
    roles = sorted(path.parent.name for path in REPO_ROOT.glob("roles/*/tasks"))
    assert sorted(path.name for path in (installed / "roles").iterdir()) == roles
    assert not list((installed / "roles").glob("*/library")), "modules belong in plugins/modules"
    assert sorted(p.stem for p in (installed / "playbooks").glob("*.yml")) == sorted(PLAYBOOKS)
    manifest = json.loads((installed / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["version"] == __import__("lingbot_fleet").__version__


def test_roles_and_playbooks_name_the_lookups_by_their_full_name(built_collection: Built) -> None:
    # In a collection's roles a lookup is found by its full name only.
    installed = built_collection.installed
    texts = [path.read_text() for path in sorted(installed.glob("**/*.yml"))]
    assert any("lookup('lingbot.fleet.lingbot_run')" in text for text in texts)
    for name in (path.stem for path in (REPO_ROOT / "plugins" / "lookup").glob("*.py")):
        assert not [text for text in texts if f"lookup('{name}'" in text], name


def test_modules_import_the_collections_module_utils(built_collection: Built) -> None:
    source = (built_collection.installed / "plugins" / "modules" / "kernel_cmdline.py").read_text()
    assert "from ansible_collections.lingbot.fleet.plugins.module_utils.lingbot_fleet" in source
    assert "ansible.module_utils.lingbot_fleet" not in source
    node_side = built_collection.installed / "plugins" / "module_utils" / "lingbot_fleet"
    # Only what the modules import runs on the nodes: no controller code.
    assert (node_side / "boot" / "grub.py").is_file()
    assert not (node_side / "controller").exists()
    assert not (node_side / "audit" / "evaluate.py").exists()


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_collection_playbooks_parse_without_the_repository(
    built_collection: Built, playbook: str
) -> None:
    workdir = built_collection.workdir
    (workdir / "hosts.yml").write_text(INVENTORY)
    done = run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "hosts.yml",
            "--syntax-check",
            f"lingbot.fleet.{playbook}",
        ],
        workdir,
        built_collection.environment(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert str(built_collection.installed / "playbooks" / f"{playbook}.yml") in done.stdout


def test_a_module_documents_itself_through_ansible_doc(built_collection: Built) -> None:
    done = run(
        [str(BIN / "ansible-doc"), "--json", "lingbot.fleet.kernel_cmdline"],
        built_collection.workdir,
        built_collection.environment(),
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)["lingbot.fleet.kernel_cmdline"]["doc"]
    assert "generation_run_id" in doc["options"], "the doc fragment resolves in the collection"


# The pip ansible-test 2.19 bootstraps into its sanity venvs. Where it cannot download the
# bootstrap script, it takes one from its cache: pip_bootstrap.py goes there (unless one is
# there already) with the pip wheel it installs from.
ANSIBLE_TEST_PIP_VERSION = "24.2"


def offline_pip_bootstrap() -> None:
    cache = Path.home() / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    wheel = cache / f"pip-{ANSIBLE_TEST_PIP_VERSION}-py3-none-any.whl"
    if not wheel.exists():
        argv = [str(BIN / "pip"), "download", "--no-deps", "--only-binary", ":all:", "-d"]
        done = run([*argv, str(cache), f"pip=={ANSIBLE_TEST_PIP_VERSION}"], cache, os.environ)
        assert done.returncode == 0, done.stdout + done.stderr
    bootstrap = cache / f"get_pip_{ANSIBLE_TEST_PIP_VERSION.replace('.', '_')}.py"
    if not bootstrap.exists():
        shutil.copyfile(Path(__file__).with_name("pip_bootstrap.py"), bootstrap)


def test_ansible_test_sanity_passes(built_collection: Built, tmp_path) -> None:
    # ansible-test runs in the collection's own tree, outside any git checkout.
    tree = tmp_path / "ansible_collections" / "lingbot" / "fleet"
    shutil.copytree(built_collection.tree, tree)
    offline_pip_bootstrap()
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    done = run(
        [str(BIN / "ansible-test"), "sanity", "--local", "--python", python, "--color", "no"],
        tree,
        built_collection.environment(),
        timeout_s=900,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    for test in ("validate-modules", "import", "pylint", "ansible-doc", "action-plugin-docs"):
        assert f'Running sanity test "{test}"' in done.stdout + done.stderr
