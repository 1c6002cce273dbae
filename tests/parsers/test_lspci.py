import pytest

from lingbot_fleet.parsers import ParseError, parse

ALL_ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl")


def test_root_port_link_and_acs(sample):
    (device,) = parse("lspci", sample("lspci-vvv-intel-root-port-acs.txt"))["devices"]
    assert device["bdf"] == "0000:00:0c.0"
    assert device["class"] == "PCI bridge"
    assert device["vendor_id"] is None and device["device_id"] is None
    assert device["lnkcap"] == {"speed_gt_per_s": 8.0, "width": 1}
    assert device["lnksta"] == {
        "speed_gt_per_s": 5.0,
        "width": 1,
        "speed_downgraded": True,
        "width_downgraded": False,
    }
    assert device["lnkcap2_max_speed_gt_per_s"] == 8.0
    assert device["lnkctl2_target_speed_gt_per_s"] == 8.0
    assert device["acs_cap"] == dict.fromkeys(ALL_ACS_FLAGS, False) | {
        "SrcValid": True,
        "TransBlk": True,
        "UpstreamFwd": True,
        "DirectTrans": False,
    }
    assert device["acs_ctl"] == dict.fromkeys((*ALL_ACS_FLAGS, "DirectTrans"), False) | {
        "SrcValid": True
    }
    assert (device["numa_node"], device["iommu_group"], device["kernel_driver"]) == (
        0,
        None,
        "pcieport",
    )


def test_nn_ids_and_a_cut_device(sample):
    (device,) = parse("lspci", sample("lspci-vv-nn-a100-cut.txt"))["devices"]
    assert device["bdf"] == "0000:da:00.0"
    assert (device["class"], device["class_id"]) == ("3D controller", "0302")
    assert (device["vendor_id"], device["device_id"]) == ("10de", "20b0")
    assert device["numa_node"] == 5
    assert device["lnkcap"] is None and device["lnksta"] is None and device["acs_ctl"] is None


def test_many_devices_lnksta_without_notes_and_iommu_group():
    text = (
        "0000:41:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 PCIe] [10de:2331]"
        " (rev a1)\n\tIOMMU group: 18\n\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16\n"
        "\t\tLnkSta:\tSpeed 2.5GT/s, Width x8\n\tKernel driver in use: nvidia\n\n"
        "0000:40:01.1 PCI bridge [0604]: Advanced Micro Devices, Inc. [AMD] Device [1022:14ab]\n"
        "\t\tLnkCap2: Supported Link Speeds: 2.5-32GT/s, Crosslink- Retimer+ 2Retimers+ DRS-\n"
        "\t\tLnkCtl2: Target Link Speed: 16GT/s, EnterCompliance- SpeedDis-\n"
    )
    gpu, bridge = parse("lspci", text)["devices"]
    assert gpu["lnksta"] == {
        "speed_gt_per_s": 2.5,
        "width": 8,
        "speed_downgraded": None,
        "width_downgraded": None,
    }
    assert (gpu["iommu_group"], gpu["kernel_driver"], gpu["device_id"]) == (18, "nvidia", "2331")
    assert bridge["vendor_id"] == "1022" and bridge["device_id"] == "14ab"
    assert bridge["lnkcap2_max_speed_gt_per_s"] == 32.0
    assert bridge["lnkctl2_target_speed_gt_per_s"] == 16.0


def test_text_without_a_device_line_or_only_lnk_lines_is_rejected():
    with pytest.raises(ParseError, match=r"^lspci: no device line like '0000:41:00.0"):
        parse("lspci", "\t\tLnkSta:\tSpeed 2.5GT/s, Width x8\n\t\tDevSta:\tCorrErr-\n")
