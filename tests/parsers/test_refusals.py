"""Text of another kind is refused: `lingbot-fleet parse` exits 2 and names the kind."""

from pathlib import Path

import pytest

from lingbot_fleet.cli import main

SAMPLES = Path(__file__).parent / "samples"

LSPCI = (
    "lspci: no device line like '0000:41:00.0 3D controller: NVIDIA ...' and not only Lnk*"
    " lines like 'LnkSta: Speed 16GT/s, Width x16'; expected the output of `lspci -vv` or"
    " `lspci -vvv` (with or without -nn), or its Lnk* lines (`lspci -vv | grep Lnk`)"
)
SMI_Q = (
    "smi-q: no 'Attached GPUs' field or NVSMI LOG banner, and the text does not start at a"
    " 'GPU 00000000:81:00.0' line, a PCI section or a GPU Link Info block; expected the"
    " output of `nvidia-smi -q` or a part of it"
)
CMDLINE_EXPECTED = (
    "the content of /proc/cmdline (one line), a 'Kernel command line:' line of the kernel"
    " log, or a grubenv block with kernelopts"
)
GRUB_EXPECTED = "the content of /etc/default/grub (NAME=value lines) or of a grubenv block"


def _grub_line(number: int, text: str) -> str:
    return f"grub: line {number} is not a NAME=value assignment: {text!r}; expected {GRUB_EXPECTED}"


def _cmdline_lines(count: int) -> str:
    return (
        f"cmdline: the input has {count} non-empty lines; /proc/cmdline holds one."
        f" Expected {CMDLINE_EXPECTED}."
    )


@pytest.mark.parametrize(
    ("kind", "name", "message"),
    [
        ("smi-q", "lspci-grep-lnk-one-gpu-no-notes.txt", SMI_Q),
        ("cmdline", "lspci-grep-lnk-one-gpu-no-notes.txt", _cmdline_lines(6)),
        (
            "grub",
            "lspci-grep-lnkcap-lnksta-switch-and-gpu.txt",
            _grub_line(
                1, "LnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM L1, Exit Latency L1 <64us"
            ),
        ),
        ("lspci", "cmdline-dmesg-timestamp.txt", LSPCI),
        ("smi-q", "cmdline-dmesg-timestamp.txt", SMI_Q),
        (
            "grub",
            "cmdline-dmesg-no-timestamp.txt",
            _grub_line(
                1,
                "Kernel command line: BOOT_IMAGE=/vmlinuz-5.15.0-105-generic"
                " root=UUID=5d3c1f0e-8a4b-4c7d-9e2f-1b6a7c8d9e0f ro intel_iommu=on iommu=pt"
                " pci=noacpi quiet splash vt.handoff=7",
            ),
        ),
        ("lspci", "grubenv-rhel8-kernelopts.txt", LSPCI),
        ("smi-q", "grubenv-rhel8-editenv-list.txt", SMI_Q),
        (
            "topo",
            "grubenv-rhel8-kernelopts.txt",
            "topo: no header line naming GPU0 (like '\\tGPU0\\tGPU1\\tCPU Affinity');"
            " expected the output of `nvidia-smi topo -m`",
        ),
        ("lspci", "smi-q-pci-section-only.txt", LSPCI),
        ("cmdline", "smi-q-grep-gpu-link-info.txt", _cmdline_lines(23)),
        ("grub", "smi-q-two-gpus-from-gpu-line.txt", _grub_line(1, "GPU 00000000:81:00.0")),
        ("smi-q", "topo-2gpu-rtx5090-tabs-gpu-numa-id.txt", SMI_Q),
        ("smi-q", "p2p-2gpu-rtx5090-rw.txt", SMI_Q),
        ("lspci", "topo-4gpu-k40m-soc-mlx4.txt", LSPCI),
        (
            "cmdline",
            "grub-passthrough-one-line.txt",
            "cmdline: the input sets GRUB_CMDLINE_LINUX_DEFAULT, a line of /etc/default/grub;"
            f" parse it as kind grub. Expected {CMDLINE_EXPECTED}.",
        ),
        (
            "grub",
            "cmdline-ubuntu-boot-image.txt",
            "grub: line 1 has 'root=UUID=9ff8c203-950b-4f46-8c41-6e994151ecd3 ro quiet splash'"
            " after the value of BOOT_IMAGE; a value with spaces must be quoted.",
        ),
    ],
)
def test_wrong_kind_exits_2_with_the_kind_named(capsys, kind, name, message):
    path = SAMPLES / name
    assert main(["parse", kind, str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"lingbot-fleet parse {kind}: {path}: {message}\n"


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        (
            "cmdline",
            "[    0.000000] Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103)\n",
            f"cmdline: the input starts with '[', which is not a kernel parameter name;"
            f" expected {CMDLINE_EXPECTED}",
        ),
        (
            "cmdline",
            "\t\tLnkSta:\tSpeed 2.5GT/s, Width x8\n",
            f"cmdline: the input starts with 'LnkSta:', which is not a kernel parameter name;"
            f" expected {CMDLINE_EXPECTED}",
        ),
        (
            "cmdline",
            "# GRUB Environment Block\nsaved_entry=0\n" + "#" * 64,
            "cmdline: the grubenv block has no kernelopts, so it holds no command line;"
            f" expected {CMDLINE_EXPECTED}",
        ),
        (
            "lspci",
            "\t\tLnkSta:\tSpeed 2.5GT/s, Width x8\n\t\tDevCap:\tMaxPayload 256 bytes\n",
            LSPCI,
        ),
        ("smi-q", "    PCI\n        Bridge Chip\n            Type : N/A\n", SMI_Q),
        ("smi-q", "        GPU Link Info\n", SMI_Q),
    ],
)
def test_near_misses_are_refused(tmp_path, capsys, kind, text, message):
    path = tmp_path / "capture.txt"
    path.write_text(text)
    assert main(["parse", kind, str(path)]) == 2
    assert capsys.readouterr().err == f"lingbot-fleet parse {kind}: {path}: {message}\n"
