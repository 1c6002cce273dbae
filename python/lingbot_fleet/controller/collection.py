"""Where the command line finds the Ansible content it runs: the collection lingbot.fleet.

In order:

1. the collection carried by the installed wheel (``lingbot_fleet/_collection``: the
   package's build puts it into every wheel, collection/build_backend.py), of this
   package's own version;
2. a development checkout, when this package is imported from one (an editable install):
   its own playbooks and ``ansible.cfg``, the way the people who clone it run ``site.yml``;
3. ``lingbot.fleet`` installed with ansible-galaxy on Ansible's collections path
   (``ANSIBLE_COLLECTIONS_PATH``, ``collections_path`` of ansible.cfg, the defaults).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__

NAMESPACE = "lingbot"
NAME = "fleet"
FQCN = f"{NAMESPACE}.{NAME}"
# The collections directory (holding ansible_collections/) the wheel carries.
BUNDLED_COLLECTIONS_DIR = Path(__file__).resolve().parents[1] / "_collection"
PACKAGE_DIR = Path(__file__).resolve().parents[1]


class CollectionNotFoundError(Exception):
    """No lingbot.fleet to run; str() says where it was looked for and how to install it."""


@dataclass(frozen=True)
class Content:
    """Where the playbooks are, and what Ansible needs in its environment to run them."""

    playbooks_dir: Path
    source: str  # "wheel", "checkout" or "installed": for messages
    environment: dict[str, str] = field(default_factory=dict)

    def playbook(self, name: str) -> Path:
        path = self.playbooks_dir / f"{name}.yml"
        if not path.is_file():
            raise CollectionNotFoundError(f"{self.source} content has no playbook {path}")
        return path


def _collection_dir(collections_dir: Path) -> Path:
    return collections_dir / "ansible_collections" / NAMESPACE / NAME


def _version(collection: Path) -> str | None:
    try:
        manifest = json.loads((collection / "MANIFEST.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return str(manifest.get("collection_info", {}).get("version"))


def _checkout_root() -> Path | None:
    """The checkout this package is imported from (python/lingbot_fleet in it), or None."""
    root = PACKAGE_DIR.parent.parent
    markers = ("ansible.cfg", "site.yml", "collection/galaxy.source.yml", "playbooks")
    if PACKAGE_DIR.parent.name == "python" and all((root / m).exists() for m in markers):
        return root
    return None


def configured_collections_paths() -> list[Path]:
    """Ansible's collections path as configured here (environment, ansible.cfg, defaults)."""
    from ansible import constants  # noqa: PLC0415 - keep ansible out of import time

    return [Path(path) for path in constants.COLLECTIONS_PATHS]


def _with_collections_dir(collections_dir: Path) -> dict[str, str]:
    paths = [str(collections_dir), *(str(path) for path in configured_collections_paths())]
    return {"ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(dict.fromkeys(paths))}


def find_content() -> Content:
    """The content to run (see the module's docstring for the order)."""
    bundled = _collection_dir(BUNDLED_COLLECTIONS_DIR)
    if (bundled / "MANIFEST.json").is_file():
        return Content(
            bundled / "playbooks", "wheel", _with_collections_dir(BUNDLED_COLLECTIONS_DIR)
        )
    checkout = _checkout_root()
    if checkout is not None:
        environment = {"ANSIBLE_CONFIG": str(checkout / "ansible.cfg")}
        return Content(checkout / "playbooks", "checkout", environment)
    searched = configured_collections_paths()
    for collections_dir in searched:
        installed = _collection_dir(collections_dir)
        if not (installed / "playbooks").is_dir():
            continue
        version = _version(installed)
        if version != __version__:
            raise CollectionNotFoundError(
                f"{FQCN} at {installed} is version {version}, this lingbot-fleet is "
                f"{__version__}: install the collection of the same version "
                "(ansible-galaxy collection install --force lingbot-fleet-<version>.tar.gz)"
            )
        return Content(installed / "playbooks", "installed", _with_collections_dir(collections_dir))
    raise CollectionNotFoundError(
        f"the Ansible collection {FQCN} is not installed (searched "
        f"{', '.join(str(path) for path in searched) or 'no collections path'}): install "
        "lingbot-fleet with pip (every wheel of it carries the collection), or the collection "
        "with 'ansible-galaxy collection install lingbot-fleet-<version>.tar.gz'"
    )
