from pathlib import Path

import pytest

from lingbot_fleet.parsers import KINDS, ParseError, parse

SAMPLES = Path(__file__).parent / "samples"


def test_kinds_are_the_seven_documented_outputs():
    assert KINDS == ("topo", "p2p", "smi-q", "lspci", "p2p-bandwidth", "grub", "cmdline")


def test_unknown_kind_names_the_known_ones():
    with pytest.raises(ParseError, match=r"unknown output kind 'nvlink'; choose one of: topo, p2p"):
        parse("nvlink", "x")


@pytest.mark.parametrize("kind", KINDS)
def test_empty_text_is_rejected_with_the_kind_named(kind):
    with pytest.raises(ParseError, match=rf"^{kind}: the input is empty; expected "):
        parse(kind, " \n\t\n")


def test_every_sample_has_a_source_note():
    samples = sorted(SAMPLES.glob("*.txt"))
    assert len(samples) >= 16
    for path in samples:
        note = Path(f"{path}.source").read_text()
        assert "URL:" in note and "Licence:" in note, path.name


@pytest.mark.parametrize(
    ("kind", "wrong_sample"),
    [
        ("topo", "grub-arch-graphene.txt"),
        ("topo", "p2p-2gpu-rtx5090-rw.txt"),
        ("p2p", "topo-2gpu-rtx5090-tabs-gpu-numa-id.txt"),
        ("smi-q", "lspci-vv-nn-a100-cut.txt"),
        ("lspci", "grub-arch-graphene.txt"),
        ("p2p-bandwidth", "topo-4gpu-k40m-soc-mlx4.txt"),
        ("grub", "topo-4gpu-k40m-soc-mlx4.txt"),
        ("cmdline", "grub-debian-backquote.txt"),
    ],
)
def test_a_sample_of_another_kind_is_rejected(kind, wrong_sample):
    with pytest.raises(ParseError, match=rf"^{kind}: "):
        parse(kind, (SAMPLES / wrong_sample).read_text())
