"""`lingbot-fleet generations list|show` over a dump of the module's list result."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from lingbot_fleet.controller.generations_cli import add_generations_parser

ROWS = [
    {
        "generation": 1,
        "ok": True,
        "committed": "2025-01-01T10:00:00Z",
        "complete": True,
        "run_id": "r1",
        "ran": {"play": "Keep the kernel command line right"},
        "kernel_cmdline": "BOOT_IMAGE=/boot/vmlinuz ro pci=noacpi",
        "files": ["/etc/default/grub", "/etc/default/grub.d/lingbot-fleet.cfg"],
        "kinds": ["grub"],
    },
    {"generation": 2, "ok": False, "error": "manifest.json is corrupted (bad)"},
]


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    dump = tmp_path / "generations.json"
    dump.write_text(json.dumps({"node-a": {"changed": False, "generations": ROWS}}))
    parser = argparse.ArgumentParser(prog="lingbot-fleet")
    add_generations_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([a.replace("DUMP", str(dump)) for a in argv])
    status = args.func(args)
    out, err = capsys.readouterr()
    return status, out, err


def test_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(tmp_path, capsys, "generations", "list", "DUMP")
    assert status == 0
    assert out.splitlines() == [
        "node-a:",
        "  gen  committed             what ran                      files  kinds",
        "    1  2025-01-01T10:00:00Z  Keep the kernel command line      2  grub",
        "    2  DAMAGED: manifest.json is corrupted (bad)",
    ]


def test_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(tmp_path, capsys, "generations", "show", "1", "DUMP", "--host", "node-a")
    assert status == 0
    assert out.splitlines()[0] == ("node-a: generation 1 (run r1), committed 2025-01-01T10:00:00Z")
    assert out.splitlines()[-1] == "node-a:     /etc/default/grub.d/lingbot-fleet.cfg"


def test_show_unknown_generation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(tmp_path, capsys, "generations", "show", "7", "DUMP")
    assert status == 1
    assert err == "node-a: no generation 7 (this node has: 1, 2)\n"
