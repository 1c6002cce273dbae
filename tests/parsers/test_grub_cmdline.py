import pytest

from lingbot_fleet.parsers import ParseError, parse


def _params(text: str) -> list[dict]:
    params = []
    for word in text.split():
        name, sep, value = word.partition("=")
        params.append({"name": name, "value": value if sep else None})
    return params


def test_arch_file_with_comments(sample):
    result = parse("grub", sample("grub-arch-graphene.txt"))
    assert result["variables"] == {
        "GRUB_DEFAULT": "0",
        "GRUB_TIMEOUT": "0",
        "GRUB_DISTRIBUTOR": "Arch",
        "GRUB_CMDLINE_LINUX_DEFAULT": "loglevel=3 quiet",
        "GRUB_CMDLINE_LINUX": "slab_nomerge init_on_free=1 lockdown=confidentiality "
        "vsyscall=none ia32_emulation=0 fb_tunnels=none preempt=none noautogroup",
        "GRUB_PRELOAD_MODULES": "part_gpt part_msdos",
        "GRUB_TIMEOUT_STYLE": "menu",
        "GRUB_TERMINAL_INPUT": "console",
        "GRUB_GFXMODE": "auto",
        "GRUB_GFXPAYLOAD_LINUX": "keep",
        "GRUB_DISABLE_RECOVERY": "true",
    }
    assert result["cmdline_linux_default"] == _params("loglevel=3 quiet")
    assert result["cmdline_linux"] == _params(result["variables"]["GRUB_CMDLINE_LINUX"])
    assert result["assignments"][0] == {"name": "GRUB_DEFAULT", "value": "0", "line": 3}


def test_one_line_without_final_newline(sample):
    result = parse("grub", sample("grub-passthrough-one-line.txt"))
    assert result["cmdline_linux"] is None
    assert result["cmdline_linux_default"] == _params(
        "quiet intel_iommu=on iommu=pt multifunction nofb nomodeset "
        "initcall_blacklist=sysfb_init nox2apic"
    )


def test_backquoted_command_is_kept_and_empty_cmdline_is_an_empty_list(sample):
    result = parse("grub", sample("grub-debian-backquote.txt"))
    assert result["variables"]["GRUB_DISTRIBUTOR"] == (
        "`lsb_release -i -s 2> /dev/null || echo Debian`"
    )
    assert result["unevaluated"] == [
        {
            "name": "GRUB_DISTRIBUTOR",
            "line": 3,
            "reason": "its value uses command substitution (`...`)",
        }
    ]
    assert result["cmdline_linux"] == []
    assert result["cmdline_linux_default"] == _params(
        "quiet intel_iommu=on iommu=pt i915.enable_guc=3 i915.max_vfs=7"
    )


def test_expansion_single_quotes_and_multi_line_values():
    text = (
        "GRUB_CMDLINE_LINUX='ro $NOT_EXPANDED'\n"
        'export GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
        'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} iommu=pt\n'
        '  pci=realloc=off" # keep\n'
    )
    result = parse("grub", text)
    assert result["cmdline_linux"] == [
        {"name": "ro", "value": None},
        {"name": "$NOT_EXPANDED", "value": None},
    ]
    assert result["cmdline_linux_default"] == _params("quiet iommu=pt pci=realloc=off")
    assert result["assignments"][-1]["line"] == 3


def test_unclosed_quote_and_shell_code_are_rejected():
    with pytest.raises(
        ParseError,
        match=r"^grub: line 1: unbalanced double quote: the quote opened here is never "
        r"closed; close the quote in the file\.$",
    ):
        parse("grub", 'GRUB_CMDLINE_LINUX="quiet\n')
    with pytest.raises(ParseError, match=r"^grub: line 1 is not a NAME=value assignment: 'if "):
        parse("grub", "if [ -d /sys/firmware/efi ]; then GRUB_CMDLINE_LINUX=efi; fi\n")
    with pytest.raises(ParseError, match=r"line 2 is not a NAME=value assignment: 'fi'"):
        parse("grub", "GRUB_TIMEOUT=5\nfi\n")
    with pytest.raises(ParseError, match=r"has 'splash' after the value of GRUB_CMDLINE_LINUX"):
        parse("grub", "GRUB_CMDLINE_LINUX=quiet splash\n")
    with pytest.raises(ParseError, match=r"no GRUB_\* variable is set"):
        parse("grub", "FOO=bar\n")


def test_a_command_line_that_needs_a_command_run_is_not_split():
    text = (
        'GRUB_CMDLINE_LINUX="$(cat /etc/kernel/cmdline) quiet"\n'
        'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX iommu=pt"\n'
        "GRUB_TIMEOUT=5; GRUB_DEFAULT=0 # two on one line\n"
    )
    result = parse("grub", text)
    assert result == {
        "variables": {
            "GRUB_CMDLINE_LINUX": '"$(cat /etc/kernel/cmdline) quiet"',
            "GRUB_CMDLINE_LINUX_DEFAULT": '"$GRUB_CMDLINE_LINUX iommu=pt"',
            "GRUB_TIMEOUT": "5",
            "GRUB_DEFAULT": "0",
        },
        "assignments": [
            {
                "name": "GRUB_CMDLINE_LINUX",
                "value": '"$(cat /etc/kernel/cmdline) quiet"',
                "line": 1,
            },
            {
                "name": "GRUB_CMDLINE_LINUX_DEFAULT",
                "value": '"$GRUB_CMDLINE_LINUX iommu=pt"',
                "line": 2,
            },
            {"name": "GRUB_TIMEOUT", "value": "5", "line": 3},
            {"name": "GRUB_DEFAULT", "value": "0", "line": 3},
        ],
        "unevaluated": [
            {
                "name": "GRUB_CMDLINE_LINUX",
                "line": 1,
                "reason": "its value uses command substitution or arithmetic"
                " ($(cat /etc/kernel/cmdline))",
            },
            {
                "name": "GRUB_CMDLINE_LINUX_DEFAULT",
                "line": 2,
                "reason": "it refers to $GRUB_CMDLINE_LINUX, which is not evaluated",
            },
        ],
        "cmdline_linux": None,
        "cmdline_linux_default": None,
        "partial": False,
    }


def test_a_later_plain_assignment_clears_an_unevaluated_value():
    result = parse("grub", 'GRUB_CMDLINE_LINUX="`cat x`"\nGRUB_CMDLINE_LINUX="quiet"\n')
    assert result["unevaluated"] == []
    assert result["cmdline_linux"] == [{"name": "quiet", "value": None}]


def test_cmdline_with_boot_image(sample):
    assert parse("cmdline", sample("cmdline-ubuntu-boot-image.txt")) == {
        "boot_image": "/boot/vmlinuz-6.8.0-49-generic",
        "params": _params("root=UUID=9ff8c203-950b-4f46-8c41-6e994151ecd3 ro quiet splash"),
        "init_args": [],
        "partial": False,
    }


def test_cmdline_systemd_boot_without_boot_image(sample):
    result = parse("cmdline", sample("cmdline-proxmox-systemd-boot.txt"))
    assert result["boot_image"] is None
    assert result["params"][:2] == [
        {"name": "initrd", "value": "\\EFI\\proxmox\\6.8.12-1-pve\\initrd.img-6.8.12-1-pve"},
        {"name": "root", "value": "ZFS=rpool/ROOT/pve-1"},
    ]
    assert [param["name"] for param in result["params"][2:]] == [
        "boot",
        "quiet",
        "intel_iommu",
        "iommu",
        "i915.enable_guc",
        "i915.max_vfs",
    ]


def test_cmdline_quotes_and_init_args():
    result = parse("cmdline", 'BOOT_IMAGE=/vmlinuz dyndbg="file x.c +p" -- single')
    assert result["params"] == [{"name": "dyndbg", "value": '"file x.c +p"'}]
    assert result["init_args"] == ["single"]
