import pytest

from lingbot_fleet.parsers import ParseError, parse


def test_two_gpu_partial_run(sample):
    result = parse("p2p-bandwidth", sample("p2p-bandwidth-2gpu-rtx4090-partial.txt"))
    assert result["devices"] == [
        {"index": 0, "name": "NVIDIA GeForce RTX 4090", "bdf": "0000:02:00.0"},
        {"index": 1, "name": "NVIDIA GeForce RTX 4090", "bdf": "0000:17:00.0"},
    ]
    assert result["peer_access"] == {"0": {"1": True}, "1": {"0": True}}
    assert result["connectivity"] == [[1, 1], [1, 1]]
    assert result["matrices"] == {
        "unidirectional_p2p_disabled_gbytes_per_s": [[1008.06, 6.34], [6.34, 926.75]],
        "unidirectional_p2p_enabled_writes_gbytes_per_s": [[1015.27, 6.60], [6.60, 945.63]],
        "bidirectional_p2p_disabled_gbytes_per_s": [[1018.92, 8.66], [8.67, 926.39]],
    }


def test_sections_only_with_latency(sample):
    result = parse("p2p-bandwidth", sample("p2p-bandwidth-6gpu-rtx6000-sections.txt"))
    assert result["devices"] == [] and result["connectivity"] is None
    matrices = result["matrices"]
    assert sorted(matrices) == [
        "bidirectional_p2p_enabled_gbytes_per_s",
        "latency_p2p_enabled_writes_gpu_us",
        "unidirectional_p2p_enabled_writes_gbytes_per_s",
    ]
    assert matrices["unidirectional_p2p_enabled_writes_gbytes_per_s"][3] == [
        50.97,
        50.97,
        50.97,
        1375.60,
        50.16,
        50.45,
    ]
    assert matrices["bidirectional_p2p_enabled_gbytes_per_s"][0][3] == 99.42
    assert matrices["latency_p2p_enabled_writes_gpu_us"][4] == [0.44, 0.44, 0.44, 0.38, 2.07, 0.36]


def test_reads_and_writes_are_told_apart(sample):
    matrices = parse("p2p-bandwidth", sample("p2p-bandwidth-6gpu-reads-writes.txt"))["matrices"]
    assert matrices["unidirectional_p2p_enabled_writes_gbytes_per_s"][2][0] == 10.01
    assert matrices["unidirectional_p2p_enabled_reads_gbytes_per_s"][2][0] == 9.90
    assert matrices["unidirectional_p2p_disabled_gbytes_per_s"][5][5] == 921.96


def test_device_list_and_tab_connectivity(sample):
    result = parse("p2p-bandwidth", sample("p2p-bandwidth-4gpu-v100-header.txt"))
    assert [device["bdf"] for device in result["devices"]] == [
        "0000:5d:00.0",
        "0000:5e:00.0",
        "0000:88:00.0",
        "0000:89:00.0",
    ]
    assert result["peer_access"]["2"] == {"0": True, "1": True, "3": True}
    assert result["connectivity"] == [[1, 1, 1, 1]] * 4
    assert result["matrices"] == {}


def test_disabled_latency_has_gpu_and_cpu_tables():
    text = (
        "P2P=Disabled Latency Matrix (us)\n   GPU     0      1\n     0   2.61  14.95\n"
        "     1  11.09   2.10\n\n   CPU     0      1\n     0   2.67   6.78\n     1   6.71   2.62\n"
        "Device=0 CANNOT Access Peer Device=1\n"
    )
    result = parse("p2p-bandwidth", text)
    assert result["matrices"] == {
        "latency_p2p_disabled_gpu_us": [[2.61, 14.95], [11.09, 2.10]],
        "latency_p2p_disabled_cpu_us": [[2.67, 6.78], [6.71, 2.62]],
    }
    assert result["peer_access"] == {"0": {"1": False}}


def test_a_cut_matrix_is_rejected(sample):
    text = sample("p2p-bandwidth-2gpu-rtx4090-partial.txt").rsplit("\n", 2)[0]
    with pytest.raises(ParseError, match=r"bidirectional_p2p_disabled_gbytes_per_s: 1 of 2 rows"):
        parse("p2p-bandwidth", text)


def test_a_short_row_is_rejected(sample):
    text = sample("p2p-bandwidth-6gpu-reads-writes.txt").replace("  22.33  22.37\n", "\n", 1)
    with pytest.raises(ParseError, match=r"does not hold device 0's 6 values"):
        parse("p2p-bandwidth", text)
