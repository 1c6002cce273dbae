import pytest

from lingbot_fleet.parsers import ParseError, parse


def _matrix(names, rows):
    return {
        name: dict(zip(names, row.split(), strict=True))
        for name, row in zip(names, rows, strict=True)
    }


def test_old_driver_soc_is_sys_and_the_nic_column_is_kept(sample):
    result = parse("topo", sample("topo-4gpu-k40m-soc-mlx4.txt"))
    gpus = ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert result["links"] == _matrix(
        gpus, ["X PHB SYS SYS", "PHB X SYS SYS", "SYS SYS X PHB", "SYS SYS PHB X"]
    )
    assert result["gpus"] == [
        {"name": "GPU0", "cpu_affinity": [0, 1, 2, 3, 4, 5], "numa_node": None},
        {"name": "GPU1", "cpu_affinity": [0, 1, 2, 3, 4, 5], "numa_node": None},
        {"name": "GPU2", "cpu_affinity": [6, 7, 8, 9, 10, 11], "numa_node": None},
        {"name": "GPU3", "cpu_affinity": [6, 7, 8, 9, 10, 11], "numa_node": None},
    ]
    assert result["nics"] == {"mlx4_0": "mlx4_0"}
    assert result["nic_links"] == {
        "GPU0": {"mlx4_0": "SYS"},
        "GPU1": {"mlx4_0": "SYS"},
        "GPU2": {"mlx4_0": "PHB"},
        "GPU3": {"mlx4_0": "PHB"},
    }


def test_tabs_numa_affinity_and_gpu_numa_id_na(sample):
    result = parse("topo", sample("topo-2gpu-rtx5090-tabs-gpu-numa-id.txt"))
    assert result == {
        "gpus": [
            {"name": "GPU0", "cpu_affinity": list(range(64)), "numa_node": 0},
            {"name": "GPU1", "cpu_affinity": list(range(64)), "numa_node": 0},
        ],
        "links": {"GPU0": {"GPU0": "X", "GPU1": "PHB"}, "GPU1": {"GPU0": "PHB", "GPU1": "X"}},
        "nics": {},
    }


def test_spaces_without_affinity_columns_or_legend(sample):
    result = parse("topo", sample("topo-8gpu-rtx6000-spaces-no-affinity.txt"))
    names = [f"GPU{i}" for i in range(8)]
    same, other = "NODE NODE NODE", "SYS SYS SYS SYS"
    assert result["links"] == _matrix(
        names,
        [
            f"X {same} {other}",
            f"NODE X NODE NODE {other}",
            f"NODE NODE X NODE {other}",
            f"{same} X {other}",
            f"{other} X {same}",
            f"{other} NODE X NODE NODE",
            f"{other} NODE NODE X NODE",
            f"{other} {same} X",
        ],
    )
    assert all(gpu["cpu_affinity"] == [] and gpu["numa_node"] is None for gpu in result["gpus"])
    assert "nic_links" not in result


def test_nic_legend_ansi_header_nvlink_and_short_nic_rows():
    text = (
        "\x1b[4m\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\r\n"
        "GPU0\t X \tNV12\tPXB\t0-15,32-47\t0\t\tN/A\r\n"
        "GPU1\tNV12\t X \tSYS\t16-31\t1-3\t\tN/A\r\n"
        "NIC0\tPXB\tSYS\t X \n\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0"
    )
    result = parse("topo", text)
    assert result["links"] == {
        "GPU0": {"GPU0": "X", "GPU1": "NV12"},
        "GPU1": {"GPU0": "NV12", "GPU1": "X"},
    }
    assert result["gpus"][0] == {
        "name": "GPU0",
        "cpu_affinity": [*range(16), *range(32, 48)],
        "numa_node": 0,
    }
    assert result["gpus"][1]["numa_node"] is None  # spans nodes 1-3
    assert result["nics"] == {"NIC0": "mlx5_0"}
    assert result["nic_links"] == {"GPU0": {"NIC0": "PXB"}, "GPU1": {"NIC0": "SYS"}}


def test_a_truncated_row_is_rejected(sample):
    lines = sample("topo-4gpu-k40m-soc-mlx4.txt").splitlines()
    lines[3] = "GPU2\tSOC\tSOC"
    with pytest.raises(ParseError, match=r"row GPU2 \(line 4\) has 2 cells but the header names 5"):
        parse("topo", "\n".join(lines))


def test_a_row_missing_its_affinity_is_rejected(sample):
    text = sample("topo-2gpu-rtx5090-tabs-gpu-numa-id.txt").replace(
        "0-63\t0\t\tN/A\nGPU1", "\nGPU1"
    )
    with pytest.raises(ParseError, match=r"row GPU0 \(line 2\) has 0 values after the links"):
        parse("topo", text)


def test_output_cut_before_the_last_gpu_row_is_rejected(sample):
    text = "\n".join(sample("topo-8gpu-rtx6000-spaces-no-affinity.txt").splitlines()[:6])
    with pytest.raises(ParseError, match=r"names GPU5, GPU6, GPU7 but there is no row for them"):
        parse("topo", text)


def test_an_unknown_link_label_is_rejected(sample):
    text = sample("topo-2gpu-rtx5090-tabs-gpu-numa-id.txt").replace("GPU1\tPHB", "GPU1\tPHX")
    with pytest.raises(ParseError, match=r"column GPU0: 'PHX' is not a link label"):
        parse("topo", text)
