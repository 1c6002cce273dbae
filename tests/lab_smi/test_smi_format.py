"""The formatting helpers of the lab's nvidia-smi against hand-written states."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from lingbot_lab import persistence, smi

NOW_S = 1_700_000_000.0


def views(state: dict[str, Any], root: Path) -> list[smi.GpuView]:
    return smi.gpu_views(state, root, NOW_S)


def mark_busy(root: Path, index: int, until_s: float) -> None:
    busy = root / "run" / "lingbot-lab" / "busy"
    busy.mkdir(parents=True, exist_ok=True)
    (busy / str(index)).write_text(f"{until_s}\n")


def parse_topology_matrix(
    text: str,
) -> tuple[list[str], dict[tuple[int, int], str], list[list[str]]]:
    """Header labels, the GPU x GPU cells and each row's affinity columns."""
    lines = text.split("\n")
    header = re.fullmatch(r"\t\x1b\[4m(.*)\x1b\[0m", lines[0])
    assert header, repr(lines[0])
    labels = header.group(1).split("\t")
    gpu_labels = [label for label in labels if re.fullmatch(r"GPU\d+", label)]
    cells: dict[tuple[int, int], str] = {}
    affinities = []
    for line in lines[1 : 1 + len(gpu_labels)]:
        row = re.fullmatch(r"GPU(\d+)\t(.*)", line)
        assert row, repr(line)
        values = row.group(2).split("\t")
        for column, value in enumerate(values[: len(gpu_labels)]):
            cells[(int(row.group(1)), int(gpu_labels[column][3:]))] = value
        affinities.append(values[len(gpu_labels) :])
    return labels, cells, affinities


def test_bus_id_has_eight_digit_domain_in_upper_case() -> None:
    assert smi.nvml_bus_id("0000:c1:00.0") == "00000000:C1:00.0"
    assert smi.nvml_bus_id("00000000:41:00.0") == "00000000:41:00.0"


def test_cuda_version_from_driver_number() -> None:
    assert smi.cuda_version_text(12040) == "12.4"
    assert smi.cuda_version_text(12020) == "12.2"


def test_table_rows_are_exact_and_91_wide(state: dict[str, Any], lab_root: Path) -> None:
    text = smi.format_table(state, views(state, lab_root), NOW_S)
    lines = text.rstrip("\n").split("\n")
    assert lines[0] == time.ctime(NOW_S) + "       "
    assert all(len(line) == 91 for line in lines[1:] if line.strip()), [
        (len(line), line) for line in lines[1:] if len(line) != 91
    ]
    assert lines[2] == (
        "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      "
        "CUDA Version: 12.4     |"
    )
    assert lines[8:11] == [
        "|   0  NVIDIA H100 80GB HBM3          Off "
        "|   00000000:41:00.0 Off |                    0 |",
        "| N/A   31C    P8             49W /  700W "
        "|       1MiB /  81559MiB |      0%      Default |",
        "|                                         "
        "|                        |             Disabled |",
    ]
    assert "|   2  NVIDIA H100 80GB HBM3          On  |   00000000:C1:00.0 Off |" in text
    assert lines[-2] == "|  No running processes found" + " " * 61 + "|"


def test_persistence_file_overrides_default(state: dict[str, Any], lab_root: Path) -> None:
    persistence.write_persistence(lab_root, 0, True)
    persistence.write_persistence(lab_root, 2, False)
    modes = [gpu.persistence_enabled for gpu in views(state, lab_root)]
    assert modes == [True, False, False, False]
    assert (lab_root / "run/lingbot-lab/persistence/0").read_text() == "1\n"


def test_busy_gpu_runs_p0_at_load_generation(state: dict[str, Any], lab_root: Path) -> None:
    mark_busy(lab_root, 3, NOW_S + 5)
    mark_busy(lab_root, 0, NOW_S - 5)
    gpus = views(state, lab_root)
    assert [(gpu.pstate, gpu.link_gen_current) for gpu in gpus] == [
        ("P8", 1),
        ("P8", 1),
        ("P8", 1),
        ("P0", 4),
    ]
    row = smi.format_query_gpu(
        state, [gpus[3]], ["pstate", "pcie.link.gen.current", "pcie.link.gen.max"], NOW_S
    )
    assert row == "pstate, pcie.link.gen.current, pcie.link.gen.max\nP0, 4, 4\n"


def test_list_gpus(state: dict[str, Any], lab_root: Path) -> None:
    text = smi.format_list(views(state, lab_root)[:2])
    assert text == (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5f0c2a4e-1b3d-4e8f-9a7b-0c1d2e3f0001)\n"
        "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-5f0c2a4e-1b3d-4e8f-9a7b-0c1d2e3f0002)\n"
    )


def test_topology_matrix_parses_back_to_state(state: dict[str, Any]) -> None:
    text = smi.format_topology_matrix(state)
    labels, cells, affinities = parse_topology_matrix(text)
    assert labels == [
        "GPU0",
        "GPU1",
        "GPU2",
        "GPU3",
        "CPU Affinity",
        "NUMA Affinity",
        "GPU NUMA ID",
    ]
    expected = {(pair["a"], pair["b"]): pair["topology"] for pair in state["pairs"]}
    expected.update({(index, index): " X " for index in range(4)})
    assert cells == expected
    assert affinities == [["0-15", "0", "", "N/A"]] * 2 + [["16-31", "1", "", "N/A"]] * 2
    assert "  PIX  = Connection traversing at most a single PCIe bridge\n" in text
    assert "\nLegend:\n\n  X    = Self\n" in text


def test_topology_matrix_without_numa_information(state: dict[str, Any]) -> None:
    for gpu in state["gpus"]:
        gpu["numa_node"] = -1
        gpu["cpu_list"] = "0-31"
    _labels, _cells, affinities = parse_topology_matrix(smi.format_topology_matrix(state))
    assert affinities == [["0-31", "N/A", "", "N/A"]] * 4


@pytest.mark.parametrize(("letter", "kind"), sorted(smi.P2P_KINDS.items()))
def test_p2p_matrix_parses_back_to_state(state: dict[str, Any], letter: str, kind: str) -> None:
    text = smi.format_p2p_matrix(state, letter)
    lines = text.split("\n")
    assert lines[0] == " \tGPU0\tGPU1\tGPU2\tGPU3\t"
    cells = {}
    for line in lines[1:5]:
        row = re.fullmatch(r" GPU(\d)\t((?:[A-Z]+\t){4})", line)
        assert row, repr(line)
        for column, value in enumerate(row.group(2).rstrip("\t").split("\t")):
            cells[(int(row.group(1)), column)] = value
    expected = {(pair["a"], pair["b"]): pair["p2p_status"][kind] for pair in state["pairs"]}
    expected.update({(index, index): "X" for index in range(4)})
    assert cells == expected
    assert text.endswith("  NS   = Not supported\n  U    = Unknown\n")


def test_query_link_info_block(state: dict[str, Any], lab_root: Path) -> None:
    mark_busy(lab_root, 3, NOW_S + 5)
    gpu = views(state, lab_root)[3]
    lines = smi.q_pci_lines(gpu)
    start = lines.index("        GPU Link Info")
    assert lines[start : start + 10] == [
        "        GPU Link Info",
        "            PCIe Generation",
        "                Max                       : 4",
        "                Current                   : 4",
        "                Device Current            : 4",
        "                Device Max                : 5",
        "                Host Max                  : 4",
        "            Link Width",
        "                Max                       : 16x",
        "                Current                   : 16x",
    ]
    assert "        Bus Id                            : 00000000:C2:00.0" in lines
    assert "        Device Id                         : 0x233010DE" in lines


def test_query_whole_report(state: dict[str, Any], lab_root: Path) -> None:
    persistence.write_persistence(lab_root, 1, True)
    gpus = views(state, lab_root)
    text = smi.format_query(state, gpus[1:2], NOW_S)
    assert text.startswith(
        "\n==============NVSMI LOG==============\n\n"
        f"Timestamp                                 : {time.ctime(NOW_S)}\n"
        "Driver Version                            : 550.54.15\n"
        "CUDA Version                              : 12.4\n\n"
        "Attached GPUs                             : 4\n"
        "GPU 00000000:42:00.0\n"
        "    Product Name                          : NVIDIA H100 80GB HBM3\n"
    )
    for line in (
        "    Persistence Mode                      : Enabled",
        "    MIG Mode\n        Current                           : Disabled",
        "    Performance State                     : P8",
        "                Current                   : 8x",
        "        Total                             : 81559 MiB",
    ):
        assert line in text


def test_query_display_sections(state: dict[str, Any], lab_root: Path) -> None:
    gpus = views(state, lab_root)
    text = smi.format_query(state, gpus[:1], NOW_S, ["MEMORY"])
    assert text.split("GPU 00000000:41:00.0\n")[1] == (
        "    FB Memory Usage\n"
        "        Total                             : 81559 MiB\n"
        "        Reserved                          : 0 MiB\n"
        "        Used                              : 1 MiB\n"
        "        Free                              : 81558 MiB\n\n"
    )


ALL_FIELDS = (
    "index,name,uuid,pci.bus_id,persistence_mode,pstate,pcie.link.gen.current,"
    "pcie.link.gen.max,pcie.link.gen.gpumax,pcie.link.gen.hostmax,pcie.link.width.current,"
    "pcie.link.width.max,memory.total,mig.mode.current,driver_version,serial"
)


def test_query_gpu_csv_with_units(state: dict[str, Any], lab_root: Path) -> None:
    names = smi.resolve_query_fields(ALL_FIELDS)
    text = smi.format_query_gpu(state, views(state, lab_root), names, NOW_S)
    lines = text.split("\n")
    assert lines[0] == ALL_FIELDS.replace(",", ", ").replace("memory.total", "memory.total [MiB]")
    assert lines[2] == (
        "1, NVIDIA H100 80GB HBM3, GPU-5f0c2a4e-1b3d-4e8f-9a7b-0c1d2e3f0002, 00000000:42:00.0, "
        "Disabled, P8, 1, 5, 5, 5, 8, 16, 81559 MiB, Disabled, 550.54.15, 1650223000002"
    )
    assert lines[4].startswith("3, NVIDIA H100 80GB HBM3, GPU-5f0c2a4e-1b3d-4e8f-9a7b-0c1d2e3f0004")
    assert ", P8, 1, 4, 5, 4, 16, 16, " in lines[4]


def test_query_gpu_noheader_nounits(state: dict[str, Any], lab_root: Path) -> None:
    names = smi.resolve_query_fields("gpu_bus_id,memory.total,memory.used,mig.mode.current")
    text = smi.format_query_gpu(
        state, views(state, lab_root)[2:3], names, NOW_S, header=False, units=False
    )
    assert text == "00000000:C1:00.0, 81559, 1, Disabled\n"


def test_query_gpu_mig_not_applicable_on_workstation_boards(
    state: dict[str, Any], lab_root: Path
) -> None:
    state["gpus"][0].update(name="NVIDIA RTX A6000", brand="NVIDIA RTX")
    gpu = views(state, lab_root)[0]
    assert smi.query_field_value("mig.mode.current", gpu, state, NOW_S) == "[N/A]"
    assert smi.format_table_gpu(gpu)[0].endswith("|                  Off |")


def test_unknown_query_field_is_rejected() -> None:
    with pytest.raises(smi.QueryFieldError) as error:
        smi.resolve_query_fields("index,numa.node")
    assert str(error.value) == 'Field "numa.node" is not a valid field to query.'


def test_persistence_mode_needs_root(state: dict[str, Any], lab_root: Path) -> None:
    output, code = smi.set_persistence_mode(
        lab_root, views(state, lab_root)[:1], True, is_root=False, daemon_running=False
    )
    assert code == smi.EXIT_NO_PERMISSION
    assert output == (
        "Unable to set persistence mode for GPU 00000000:41:00.0: Insufficient Permissions\n"
        "Terminating early due to previous errors.\n"
    )
    assert not (lab_root / "run/lingbot-lab/persistence/0").exists()


def test_persistence_mode_through_daemon_and_legacy(state: dict[str, Any], lab_root: Path) -> None:
    output, code = smi.set_persistence_mode(
        lab_root, views(state, lab_root)[:2], True, is_root=True, daemon_running=True
    )
    assert (output, code) == (
        "Enabled persistence mode for GPU 00000000:41:00.0.\n"
        "Enabled persistence mode for GPU 00000000:42:00.0.\n"
        "All done.\n",
        0,
    )
    output, code = smi.set_persistence_mode(
        lab_root, views(state, lab_root)[1:3], False, is_root=True, daemon_running=False
    )
    assert (output, code) == (
        "Disabled Legacy persistence mode for GPU 00000000:42:00.0.\n"
        "Disabled Legacy persistence mode for GPU 00000000:C1:00.0.\n"
        "All done.\n",
        0,
    )
    assert [gpu.persistence_enabled for gpu in views(state, lab_root)] == [
        True,
        False,
        False,
        False,
    ]
    output, _code = smi.set_persistence_mode(
        lab_root, views(state, lab_root)[:1], True, is_root=True, daemon_running=True
    )
    assert output == ("Persistence mode is already Enabled for GPU 00000000:41:00.0.\nAll done.\n")


def test_lost_gpu_is_reported_and_skipped(lost_state: dict[str, Any], lab_root: Path) -> None:
    command = smi.Command(action="table")
    output, code = smi.run_command(command, lost_state, lab_root, NOW_S, is_root=True)
    assert code == smi.EXIT_GPU_LOST
    assert output.startswith(
        "Unable to determine the device handle for GPU0000:42:00.0: Unknown Error\n"
    )
    assert "00000000:42:00.0" not in output
    assert "|   3  NVIDIA H100 80GB HBM3" in output
    text = smi.format_p2p_matrix(lost_state, "r")
    assert " GPU1\tU\tX\tU\tU\t" in text


@pytest.mark.parametrize(
    ("wanted", "indices"),
    [
        (["2"], [2]),
        (["0000:c2:00.0"], [3]),
        (["00000000:41:00.0", "1"], [0, 1]),
        (["GPU-5f0c2a4e-1b3d-4e8f-9a7b-0c1d2e3f0003"], [2]),
    ],
)
def test_select_gpus(
    state: dict[str, Any], lab_root: Path, wanted: list[str], indices: list[int]
) -> None:
    selected = smi.select_gpus(views(state, lab_root), wanted)
    assert [gpu.index for gpu in selected] == indices


def test_select_unknown_gpu(state: dict[str, Any], lab_root: Path) -> None:
    with pytest.raises(smi.ArgumentError) as error:
        smi.select_gpus(views(state, lab_root), ["7"])
    assert (error.value.message, error.value.code) == ("No devices were found\n", 6)


@pytest.mark.parametrize(
    "argv",
    [
        ["topo"],
        ["topo", "-p2p", "x"],
        ["-pm", "2"],
        ["--query-gpu=index"],
        ["--query-gpu=index", "--format=json"],
        ["-d", "MEMORY"],
        ["--bogus"],
    ],
)
def test_rejected_command_lines(argv: list[str]) -> None:
    with pytest.raises(smi.ArgumentError) as error:
        smi.parse_command(argv)
    assert error.value.message == (
        "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
    )
    assert error.value.code == 2


def test_command_line_forms() -> None:
    assert smi.parse_command(["--query-gpu", "index,uuid", "--format=csv,noheader", "--id=1"]) == (
        smi.Command(
            action="query-gpu",
            ids=["1"],
            query_fields="index,uuid",
            format_options=["csv", "noheader"],
        )
    )
    assert smi.parse_command(["-q", "-d", "memory,pcie", "-i", "0"]) == smi.Command(
        action="query", ids=["0"], displays=["MEMORY", "PCIE"]
    )
    assert smi.parse_command(["topo", "-p2p", "w"]) == smi.Command(action="topo-p2p", p2p_kind="w")
    assert smi.parse_command(["-i", "0", "-pm", "1"]).persistence_value == "1"
