"""Hostile and mistaken captures handed to the parsers and `lingbot-fleet parse`: files that
are not regular files or are too large, escapes that never end, numbers that are not
numbers, ranges and expansions that would exhaust memory. Each is refused with the exact
message (or, for the escapes, read in one pass), and nothing is written beside the input.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from malformed_support import checksums

from lingbot_fleet.cli import main
from lingbot_fleet.parsers import ParseError, parse, read_capture
from lingbot_fleet.parsers._common import strip_escapes

SAMPLES = Path(__file__).resolve().parents[1] / "parsers" / "samples"
REGULAR_FILE_FIX = "not a regular file; save the command's output to a file and parse that file"
WHOLE = "not a whole number of at most 18 digits; paste the command's output unchanged"
DECIMAL = (
    "not a decimal figure of at most 18 digits on either side of the point; paste the command's"
    " output unchanged"
)
GEN_MAX = "smi-q: pci > gpu link info > pcie generation > max"
WIDTH_MAX = "smi-q: pci > gpu link info > link width > max"
MATRIX = "p2p-bandwidth: unidirectional_p2p_enabled_writes_gbytes_per_s: line 3: value"
FIVE_THOUSAND = "9" * 5000
SHOWN = "'" + "9" * 40 + "... (5000 chars)'"


@contextmanager
def hang_guard(seconds: int) -> Iterator[None]:
    """Fails the test instead of hanging CI: a parser that rescans per position takes hours
    on these inputs, one that reads in one pass milliseconds."""

    def expired(signum: int, frame: object) -> None:
        raise AssertionError(f"still parsing after {seconds} s: the parser is not linear")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# --- files that are not a capture ------------------------------------------------------------


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "capture.fifo"
    os.mkfifo(path)
    return path


def _directory(tmp_path: Path) -> Path:
    path = tmp_path / "capture.d"
    path.mkdir()
    return path


def _sparse_17_mib(tmp_path: Path) -> Path:
    path = tmp_path / "capture.txt"
    with path.open("wb") as handle:
        handle.truncate(17 * 1024 * 1024)
    return path


FILE_CASES = [
    ("a device that never ends", lambda tmp: Path("/dev/zero"), f"is a device, {REGULAR_FILE_FIX}"),
    ("a FIFO no one writes", _fifo, f"is a FIFO, {REGULAR_FILE_FIX}"),
    ("a directory", _directory, f"is a directory, {REGULAR_FILE_FIX}"),
    (
        "a file over the cap",
        _sparse_17_mib,
        "is larger than 16 MiB, more than any captured output; parse the output of one command",
    ),
]


@pytest.mark.parametrize(
    ("case", "make", "problem"), FILE_CASES, ids=[case[0] for case in FILE_CASES]
)
def test_the_cli_refuses_what_is_not_a_captured_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    make: Callable[[Path], Path],
    problem: str,
) -> None:
    path = make(tmp_path)
    before = checksums(tmp_path)
    with hang_guard(60):
        exit_code = main(["parse", "topo", str(path)])
    assert exit_code == 2, case
    assert capsys.readouterr().err == f"lingbot-fleet parse: {path} {problem}\n"
    assert checksums(tmp_path) == before


def test_read_capture_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ParseError) as refused:
        read_capture(str(tmp_path / "missing.txt"))
    assert str(refused.value) == f"cannot read {tmp_path}/missing.txt: No such file or directory"


# --- escapes that never end ----------------------------------------------------------------


@pytest.mark.parametrize(
    "escape", ["\x1b[", "\x1b]"], ids=["CSI without its final byte", "OSC without its BEL"]
)
def test_unterminated_escapes_are_read_in_one_pass(escape: str) -> None:
    """2 MiB of escapes that never end: a pattern that rescans from each position takes
    hours here. The text is kept (nothing that ends is there to strip) and the topo parser
    refuses it as what it is, not a matrix."""
    text = (escape + "1;") * (1024 * 1024 // 2)
    with hang_guard(60):
        assert strip_escapes(text) == text
        with pytest.raises(ParseError) as refused:
            parse("topo", text)
    assert str(refused.value) == (
        "topo: no header line naming GPU0 (like '\\tGPU0\\tGPU1\\tCPU Affinity'); expected the"
        " output of `nvidia-smi topo -m`"
    )


def test_escapes_that_end_are_stripped() -> None:
    assert strip_escapes("\x1b[1;32mGPU0\x1b[0m\x1b]0;title\x07 X") == "GPU0 X"


# --- numbers that are not numbers, ranges and expansions that never end --------------------

SMI_Q = (SAMPLES / "smi-q-580-h200-vm.txt").read_text()
SMI_GEN_MAX = "Max                                    : 5"
SMI_WIDTH_MAX = "Max                                    : 16x"
BANDWIDTH = (SAMPLES / "p2p-bandwidth-6gpu-rtx6000-sections.txt").read_text()
TOPO = (
    "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tPHB\t{cpus}\t{numa}\n"
    "GPU1\tPHB\t X \t0-15\t0\n"
)
SELF_DOUBLING_GRUB = "A=x\n" + 'A="$A$A"\n' * 40 + 'GRUB_CMDLINE_LINUX="$A"\n'


def _smi(field: str, value: str) -> str:
    return SMI_Q.replace(field, field.rsplit(": ", 1)[0] + ": " + value, 1)


TEXT_CASES = [
    ("generation 5.5", "smi-q", _smi(SMI_GEN_MAX, "5.5"), f"{GEN_MAX} is '5.5', {WHOLE}"),
    ("generation in superscript", "smi-q", _smi(SMI_GEN_MAX, "²"), f"{GEN_MAX} is '²', {WHOLE}"),
    (
        "generation of 5000 digits",
        "smi-q",
        _smi(SMI_GEN_MAX, FIVE_THOUSAND),
        f"{GEN_MAX} is {SHOWN}, {WHOLE}",
    ),
    (
        "negative generation",
        "smi-q",
        _smi(SMI_GEN_MAX, "-1"),
        f"{GEN_MAX} is -1, a negative count; paste the command's output unchanged",
    ),
    ("width 16.5x", "smi-q", _smi(SMI_WIDTH_MAX, "16.5x"), f"{WIDTH_MAX} is '16.5', {WHOLE}"),
    (
        "bandwidth 1.2.3",
        "p2p-bandwidth",
        BANDWIDTH.replace("56.57", "1.2.3", 1),
        f"{MATRIX} is '1.2.3', {DECIMAL}",
    ),
    (
        "bandwidth '.'",
        "p2p-bandwidth",
        BANDWIDTH.replace("56.57", ".", 1),
        f"{MATRIX} is '.', {DECIMAL}",
    ),
    (
        "bandwidth in superscript",
        "p2p-bandwidth",
        BANDWIDTH.replace("56.57", "²", 1),
        f"{MATRIX} is '²', {DECIMAL}",
    ),
    (
        "bandwidth nan",
        "p2p-bandwidth",
        BANDWIDTH.replace("56.57", "nan", 1),
        f"{MATRIX} is 'nan', {DECIMAL}",
    ),
    (
        "bandwidth 1e400",
        "p2p-bandwidth",
        BANDWIDTH.replace("56.57", "1e400", 1),
        f"{MATRIX} is '1e400', {DECIMAL}",
    ),
    (
        "bandwidth of 5000 digits",
        "p2p-bandwidth",
        BANDWIDTH.replace("56.57", FIVE_THOUSAND, 1),
        f"{MATRIX} is {SHOWN}, {DECIMAL}",
    ),
    (
        "negative bandwidth",
        "p2p-bandwidth",
        BANDWIDTH.replace("56.57", "-56.57", 1),
        f"{MATRIX} is '-56.57', a negative figure, which no bandwidth or latency is; paste the"
        " command's output unchanged",
    ),
    (
        "a CPU list of four billion CPUs",
        "topo",
        TOPO.format(cpus="0-4294967295", numa="0"),
        "topo: row GPU0: malformed CPU list '0-4294967295': '0-4294967295' is not N or N-M with"
        " CPU ids of at most 5 digits",
    ),
    (
        "a CPU list above the largest CPU id",
        "topo",
        TOPO.format(cpus="0-99999", numa="0"),
        "topo: row GPU0: malformed CPU list '0-99999': CPU 99999 is above the largest CPU id 65535",
    ),
    (
        "NUMA affinity in superscript",
        "topo",
        TOPO.format(cpus="0-15", numa="²"),
        "topo: row GPU0: NUMA Affinity is '²', not a node number, a span of nodes or N/A; paste"
        " the output of `nvidia-smi topo -m` unchanged",
    ),
    (
        "an NVLink count of 20 digits",
        "topo",
        TOPO.format(cpus="0-15", numa="0").replace("PHB", "NV" + "9" * 20, 1),
        f"topo: row GPU0 (line 2), column GPU1: 'NV{'9' * 20}' is not a link label (X, SYS, SOC,"
        " NODE, PHB, PXB, PIX, PXN, NV<n>).",
    ),
    (
        "a grub variable that doubles itself",
        "grub",
        SELF_DOUBLING_GRUB,
        "grub: line 18: A expands to 131072 characters, more than 65536; its $NAME references"
        " repeat a value. Set it without referring to itself.",
    ),
]


@pytest.mark.parametrize(
    ("case", "kind", "text", "message"), TEXT_CASES, ids=[case[0] for case in TEXT_CASES]
)
def test_the_cli_refuses_a_capture_with_the_value_named(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    kind: str,
    text: str,
    message: str,
) -> None:
    capture = tmp_path / "capture.txt"
    capture.write_text(text)
    before = checksums(tmp_path)
    with hang_guard(60):
        exit_code = main(["parse", kind, str(capture)])
    assert exit_code == 2, case
    assert capsys.readouterr().err == f"lingbot-fleet parse {kind}: {capture}: {message}\n"
    assert checksums(tmp_path) == before


def test_words_where_nvidia_smi_reports_no_figure_stay_absent() -> None:
    """N/A and [Not Supported] are nvidia-smi's words for "no figure": read as None, not
    refused, so a real capture from an older or virtualised GPU still parses."""
    text = _smi(SMI_GEN_MAX, "N/A").replace(
        "Current                                : 5",
        "Current                                : [Not Supported]",
        1,
    )
    [gpu] = parse("smi-q", text)["gpus"]
    assert gpu["pcie_gen_max"] is None
