import pytest

from lingbot_fleet.parsers import ParseError, parse


def test_tab_separated_with_leading_space(sample):
    assert parse("p2p", sample("p2p-2gpu-rtx5090-rw.txt")) == {
        "gpus": ["GPU0", "GPU1"],
        "status": {"GPU0": {"GPU0": "X", "GPU1": "GNS"}, "GPU1": {"GPU0": "GNS", "GPU1": "X"}},
    }


def test_indented_space_separated(sample):
    assert parse("p2p", sample("p2p-2gpu-indented-ns.txt"))["status"] == {
        "GPU0": {"GPU0": "X", "GPU1": "NS"},
        "GPU1": {"GPU0": "NS", "GPU1": "X"},
    }


def test_a_cut_matrix_is_rejected(sample):
    text = "\n".join(sample("p2p-2gpu-rtx5090-rw.txt").splitlines()[:2])
    with pytest.raises(ParseError, match=r"^p2p: no row for GPU1; the output is cut"):
        parse("p2p", text)


def test_an_unknown_status_is_rejected(sample):
    with pytest.raises(ParseError, match=r"'YES' is not a P2P status"):
        parse("p2p", sample("p2p-2gpu-rtx5090-rw.txt").replace("GNS", "YES", 1))
