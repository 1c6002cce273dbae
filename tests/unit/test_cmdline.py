"""Kernel command-line tokenizer and policy (lingbot_fleet.boot.cmdline)."""

from __future__ import annotations

import pytest

from lingbot_fleet.boot.cmdline import (
    KernelParam,
    PolicyError,
    build_policy,
    check_policy,
    cpu_vendor_from_cpuinfo,
    effective_words,
    iommu_vendor_switch,
    parse_cmdline,
    render_cmdline,
    same_effect,
    satisfies,
    split_words,
    strip_unwanted,
)


def params(text: str) -> list[KernelParam]:
    return parse_cmdline(text)


def test_split_words_keeps_quoted_blanks_and_quotes() -> None:
    assert split_words(' a  dyndbg="file x.c +p"\tb=1\n') == ["a", 'dyndbg="file x.c +p"', "b=1"]


def test_parse_values_with_equals_and_commas() -> None:
    assert params("BOOT_IMAGE=/vmlinuz ro pci=realloc=off console=ttyS0,115200") == [
        KernelParam("BOOT_IMAGE", "/vmlinuz"),
        KernelParam("ro"),
        KernelParam("pci", "realloc=off"),
        KernelParam("console", "ttyS0,115200"),
    ]


def test_parse_keeps_repeats_and_stops_at_double_dash() -> None:
    assert render_cmdline(params("quiet pci=noacpi quiet -- single pci=x")) == (
        "quiet pci=noacpi quiet"
    )


def test_empty_value_differs_from_flag() -> None:
    assert params("a= b") == [KernelParam("a", ""), KernelParam("b")]


def test_dash_and_underscore_names_compare_equal() -> None:
    assert satisfies(params("nvidia-drm.modeset=1"), KernelParam("nvidia_drm.modeset", "1"))


@pytest.mark.parametrize(
    ("cmdline", "wanted", "expected"),
    [
        ("iommu=pt", KernelParam("iommu", "pt"), True),
        ("iommu=pt,nobypass", KernelParam("iommu", "pt"), True),
        ("iommu=nobypass iommu=pt", KernelParam("iommu", "pt"), True),
        ("iommu=off", KernelParam("iommu", "pt"), False),
        ("pcie_aspm=off pcie_aspm=force", KernelParam("pcie_aspm", "off"), False),
        ("pcie_aspm=force pcie_aspm=off", KernelParam("pcie_aspm", "off"), True),
        ("quiet", KernelParam("quiet"), True),
        ("quiet=1", KernelParam("quiet"), False),
        ("", KernelParam("quiet"), False),
    ],
)
def test_satisfies(cmdline: str, wanted: KernelParam, expected: bool) -> None:
    assert satisfies(params(cmdline), wanted) is expected


@pytest.mark.parametrize(
    ("word", "absent", "expected"),
    [
        ("pci=noacpi", ["pci=noacpi"], None),
        ("pci=noacpi,realloc", ["pci=noacpi"], KernelParam("pci", "realloc")),
        ("pci=realloc,noacpi,nommconf", ["pci=noacpi"], KernelParam("pci", "realloc,nommconf")),
        ("pci=realloc=off", ["pci=noacpi"], KernelParam("pci", "realloc=off")),
        ("pci=realloc=off", ["pci=realloc"], KernelParam("pci", "realloc=off")),
        ("pci=noacpi,realloc", ["pci"], None),
        ("pci=noacpi,realloc", ["pci=noacpi,realloc"], None),
        ("console=ttyS0,115200", ["console=ttyS0"], KernelParam("console", "ttyS0,115200")),
        ("console=ttyS0,115200", ["console"], None),
        ("quiet", ["pci=noacpi"], KernelParam("quiet")),
    ],
)
def test_strip_unwanted(word: str, absent: list[str], expected: KernelParam | None) -> None:
    policy = build_policy({}, absent)
    assert strip_unwanted(params(word)[0], policy.absent) == expected


def test_check_policy_against_running_cmdline() -> None:
    policy = build_policy({"iommu": "pt", "quiet": None}, ["pci=noacpi", "nomodeset"])
    running = params("BOOT_IMAGE=/boot/vmlinuz-6.1 ro quiet pci=noacpi,realloc nomodeset")
    report = check_policy(running, policy)
    assert report.missing == (KernelParam("iommu", "pt"),)
    assert report.unwanted == (KernelParam("pci", "noacpi,realloc"), KernelParam("nomodeset"))
    assert not report.compliant
    assert check_policy(params("ro quiet iommu=pt pci=realloc"), policy).compliant


def test_build_policy_renders_non_string_values() -> None:
    policy = build_policy({"nvme_core.default_ps_max_latency_us": 0, "quiet": None}, [])
    assert [p.render() for p in policy.present] == [
        "nvme_core.default_ps_max_latency_us=0",
        "quiet",
    ]


@pytest.mark.parametrize(
    ("present", "absent", "message"),
    [
        (
            {"iommu": "pt"},
            ["iommu"],
            "kernel parameter 'iommu' is asked to be absent while 'iommu=pt' is asked to be "
            "present; remove it from one of the two lists.",
        ),
        (
            {"pci": "noacpi,realloc"},
            ["pci=noacpi"],
            "kernel parameter 'pci=noacpi' is asked to be absent while 'pci=noacpi,realloc' is "
            "asked to be present; remove it from one of the two lists.",
        ),
        (
            {"pcie_aspm": "off"},
            ["pcie_aspm=off"],
            "kernel parameter 'pcie_aspm=off' is asked to be absent while 'pcie_aspm=off' is "
            "asked to be present; remove it from one of the two lists.",
        ),
        (
            {"iommu pt": None},
            [],
            "present: malformed kernel parameter name 'iommu pt'; a name is letters, digits, "
            "'_', '-' and '.', starting with a letter, digit or '_'. Fix the name in the policy.",
        ),
        (
            {},
            ["=pt"],
            "absent: malformed kernel parameter name ''; a name is letters, digits, '_', '-' "
            "and '.', starting with a letter, digit or '_'. Fix the name in the policy.",
        ),
        (
            {"iommu": ""},
            [],
            "present: kernel parameter 'iommu' has an empty value; write the bare name (iommu) "
            "for a flag, or give a value.",
        ),
        (
            {"dyndbg": "file x.c"},
            [],
            "present: value of kernel parameter 'dyndbg' ('file x.c') contains ' '; values "
            "must not contain whitespace, quotes, '$', '`', '\\\\', ';' or '#'. Fix the value "
            "in the policy.",
        ),
        (
            {"a": "$(reboot)"},
            [],
            "present: value of kernel parameter 'a' ('$(reboot)') contains '$'; values must "
            "not contain whitespace, quotes, '$', '`', '\\\\', ';' or '#'. Fix the value in "
            "the policy.",
        ),
        (
            {"nvidia-drm.modeset": "1", "nvidia_drm.modeset": "0"},
            [],
            "present: kernel parameter 'nvidia_drm.modeset' is given twice (also as "
            "'nvidia-drm.modeset'); keep one.",
        ),
    ],
)
def test_bad_policies_are_refused(present: dict, absent: list[str], message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        build_policy(present, absent)
    assert str(caught.value) == message


def test_absent_other_option_of_present_list_param_is_allowed() -> None:
    policy = build_policy({"pci": "realloc"}, ["pci=noacpi"])
    assert policy.absent == (KernelParam("pci", "noacpi"),)


@pytest.mark.parametrize(
    ("vendor", "expected"),
    [
        ("GenuineIntel", KernelParam("intel_iommu", "on")),
        ("AuthenticAMD", KernelParam("amd_iommu", "on")),
        ("HygonGenuine", KernelParam("amd_iommu", "on")),
    ],
)
def test_iommu_vendor_switch(vendor: str, expected: KernelParam) -> None:
    assert iommu_vendor_switch(vendor) == expected


def test_unknown_vendor_is_refused() -> None:
    with pytest.raises(PolicyError, match="unknown CPU vendor 'CentaurHauls'"):
        iommu_vendor_switch("CentaurHauls")


def test_cpu_vendor_from_cpuinfo() -> None:
    cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n"
    assert cpu_vendor_from_cpuinfo(cpuinfo) == "AuthenticAMD"
    with pytest.raises(PolicyError, match="no vendor_id line in /proc/cpuinfo"):
        cpu_vendor_from_cpuinfo("processor : 0\n")


# --- comparing two command lines ----------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        ("BOOT_IMAGE=/boot/vmlinuz ro iommu=pt quiet", "ro quiet iommu=pt", True),
        ("BOOT_IMAGE=(hd0,gpt2)/vmlinuz ro", "BOOT_IMAGE=/vmlinuz ro", True),
        ("ro iommu=pt iommu=pt quiet", "ro quiet iommu=pt", True),
        ("console=tty0 console=ttyS0", "console=ttyS0 console=tty0", False),
        ("iommu=off iommu=pt", "iommu=pt iommu=off", False),
        ("ro quiet", "ro quiet iommu=pt", False),
        ("ro -- single", "ro -- single", True),
        ("ro -- a b", "ro -- b a", False),
        ("ro root=/dev/sda1", "ro root=/dev/sda2", False),
    ],
)
def test_same_effect(first: str, second: str, same: bool) -> None:
    assert same_effect(split_words(first), split_words(second)) is same


def test_effective_words_keep_the_order_of_one_name() -> None:
    words = split_words("BOOT_IMAGE=/vmlinuz quiet console=tty0 ro console=ttyS0 quiet")
    assert effective_words(words) == ("console=tty0", "console=ttyS0", "quiet", "ro")
