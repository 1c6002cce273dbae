"""grub.cfg generation, update-grub, grubby, and the boot cmdline the firmware reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from labmodel_support import load_profile, run_tool

from lingbot_lab.grubcfg import (
    GrubConfigError,
    boot_cmdline,
    first_linux_line,
    generate_grub_cfg,
    install_boot_config,
    read_bls_entries,
    read_grub_settings,
)

KERNEL = "6.1.0-18-amd64"
UUID = "6f1c2a4e-3b5d-4e8f-9a7b-0c1d2e3f4a5b"


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def node_root(tmp_path: Path, default_grub: str) -> Path:
    write(tmp_path, f"boot/vmlinuz-{KERNEL}", "")
    write(tmp_path, f"boot/initrd.img-{KERNEL}", "")
    write(tmp_path, "etc/default/grub", default_grub)
    return tmp_path


def default_linux_line(root: Path) -> str:
    text, _ = generate_grub_cfg(root, None)
    return next(line for line in text.splitlines() if line.startswith("\tlinux"))


def test_messy_default_grub_and_dropins_give_the_exact_linux_line(tmp_path):
    root = node_root(
        tmp_path,
        '# comment with GRUB_CMDLINE_LINUX="nope"\n'
        "GRUB_DEFAULT=0\n"
        "GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`\n"
        "GRUB_CMDLINE_LINUX_DEFAULT='quiet  splash'   # trailing comment\n"
        "GRUB_CMDLINE_LINUX=console=ttyS0,115200\n"
        'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX pci=noacpi"\n'
        '#GRUB_CMDLINE_LINUX=""\n',
    )
    write(
        root,
        "etc/default/grub.d/50-cloud.cfg",
        'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} iommu=pt"\n',
    )
    write(
        root,
        "etc/default/grub.d/90-lingbot.cfg",
        'GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX} intel_iommu=on"\n',
    )
    write(root, "etc/default/grub.d/ignored.conf", 'GRUB_CMDLINE_LINUX="ignored"\n')
    settings = read_grub_settings(root)
    assert settings["GRUB_CMDLINE_LINUX"] == "console=ttyS0,115200 pci=noacpi intel_iommu=on"
    assert settings["GRUB_CMDLINE_LINUX_DEFAULT"] == "quiet  splash iommu=pt"
    assert settings["GRUB_DISTRIBUTOR"] == "Debian"
    assert default_linux_line(root) == (
        f"\tlinux\t/boot/vmlinuz-{KERNEL} root=UUID={UUID} ro console=ttyS0,115200 pci=noacpi"
        " intel_iommu=on quiet  splash iommu=pt"
    )


def test_empty_cmdline_linux_leaves_the_double_space_like_10_linux(tmp_path):
    root = node_root(tmp_path, 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX=""\n')
    text, versions = generate_grub_cfg(root, None)
    assert versions == [KERNEL]
    assert default_linux_line(root) == f"\tlinux\t/boot/vmlinuz-{KERNEL} root=UUID={UUID} ro  quiet"
    assert f"\t\tlinux\t/boot/vmlinuz-{KERNEL} root=UUID={UUID} ro single " in text.splitlines()
    assert first_linux_line(text) == [f"/boot/vmlinuz-{KERNEL}", f"root=UUID={UUID}", "ro", "quiet"]


def test_a_dropin_overrides_the_main_file(tmp_path):
    root = node_root(tmp_path, 'GRUB_CMDLINE_LINUX_DEFAULT="quiet pci=noacpi"\n')
    write(root, "etc/default/grub.d/99-fix.cfg", "GRUB_CMDLINE_LINUX_DEFAULT=quiet\n")
    assert default_linux_line(root).endswith(" ro  quiet")


def test_syntax_error_fails_like_update_grub(tmp_path):
    root = node_root(tmp_path, 'GRUB_CMDLINE_LINUX_DEFAULT="quiet\n')
    with pytest.raises(
        GrubConfigError, match=r"^/usr/sbin/grub-mkconfig: \d+: /.*/etc/default/grub: Syntax error"
    ):
        read_grub_settings(root)
    result = run_tool("update-grub", root)
    assert result.returncode != 0
    assert "Syntax error: Unterminated quoted string" in result.stderr
    assert not (root / "boot/grub/grub.cfg").exists()


def test_update_grub_prints_like_the_real_one_and_writes_grub_cfg(tmp_path):
    root = node_root(
        tmp_path,
        "GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`\n"
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX=""\n',
    )
    result = run_tool("update-grub", root)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "Generating grub configuration file ...",
        f"Found linux image: /boot/vmlinuz-{KERNEL}",
        f"Found initrd image: /boot/initrd.img-{KERNEL}",
        "done",
    ]
    grub_cfg = (root / "boot/grub/grub.cfg").read_text(encoding="utf-8")
    assert (
        "menuentry 'Debian GNU/Linux' --class debian --class gnu-linux --class gnu --class os"
        f" $menuentry_id_option 'gnulinux-simple-{UUID}' {{" in grub_cfg.splitlines()
    )
    profile = load_profile("a6000-phb")
    assert boot_cmdline(root, profile) == (
        f"BOOT_IMAGE=/boot/vmlinuz-{KERNEL} root=UUID={UUID} ro quiet"
    )


def test_boot_cmdline_without_any_boot_config_uses_the_profile(tmp_path):
    profile = load_profile("a6000-noacpi")
    assert boot_cmdline(tmp_path, profile) == (
        f"BOOT_IMAGE=/boot/vmlinuz-{KERNEL} root=UUID={UUID} ro quiet pci=noacpi"
    )


def redhat_root(tmp_path: Path) -> Path:
    write(tmp_path, "etc/machine-id", "0f3e9c1a5b7d4e2f8a6c0b1d3e5f7a9b\n")
    install_boot_config(tmp_path, load_profile("h100-sxm-nvswitch"))
    return tmp_path


RHEL_KERNEL = "5.14.0-362.24.1.el9_3.x86_64"
RHEL_ENTRY = f"0f3e9c1a5b7d4e2f8a6c0b1d3e5f7a9b-{RHEL_KERNEL}"
RHEL_ARGS = "ro crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M rhgb quiet"


def test_grubby_info_and_default_kernel(tmp_path):
    root = redhat_root(tmp_path)
    result = run_tool("grubby", root, "--info=ALL")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "index=0",
        f'kernel="/boot/vmlinuz-{RHEL_KERNEL}"',
        f'args="{RHEL_ARGS}"',
        f'root="UUID={UUID}"',
        f'initrd="/boot/initramfs-{RHEL_KERNEL}.img"',
        f'title="Red Hat Enterprise Linux ({RHEL_KERNEL})"',
        f'id="{RHEL_ENTRY}"',
    ]
    assert run_tool("grubby", root, "--default-kernel").stdout == f"/boot/vmlinuz-{RHEL_KERNEL}\n"
    assert boot_cmdline(root, load_profile("h100-sxm-nvswitch")) == (
        f"BOOT_IMAGE=/boot/vmlinuz-{RHEL_KERNEL} root=UUID={UUID} {RHEL_ARGS}"
    )


def test_grubby_args_move_to_the_end_and_remove_args(tmp_path):
    root = redhat_root(tmp_path)
    result = run_tool(
        "grubby", root, "--update-kernel=ALL", "--args=intel_iommu=on iommu=pt rhgb=0"
    )
    assert result.returncode == 0, result.stderr
    options = read_bls_entries(root)[0].options
    assert options == (
        f"root=UUID={UUID} ro crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M quiet"
        " intel_iommu=on iommu=pt rhgb=0"
    )
    result = run_tool(
        "grubby",
        root,
        f"--update-kernel=/boot/vmlinuz-{RHEL_KERNEL}",
        "--args=iommu=off",
        "--remove-args=crashkernel rhgb=0 quiet=1",
    )
    assert result.returncode == 0, result.stderr
    assert read_bls_entries(root)[0].options == (
        f"root=UUID={UUID} ro quiet intel_iommu=on iommu=off"
    )
    assert (root / "etc/default/grub").read_text().splitlines()[5] == (
        'GRUB_CMDLINE_LINUX="crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M quiet'
        ' intel_iommu=on iommu=pt rhgb=0"'
    ), "only --update-kernel=ALL rewrites GRUB_CMDLINE_LINUX"


def test_grubby_unknown_kernel_fails(tmp_path):
    root = redhat_root(tmp_path)
    result = run_tool("grubby", root, "--update-kernel=/boot/vmlinuz-9.9", "--args=quiet")
    assert result.returncode == 1
    assert result.stderr == "grubby: The param /boot/vmlinuz-9.9 is incorrect\n"


def test_grubby_default_follows_saved_entry(tmp_path):
    root = redhat_root(tmp_path)
    older = "5.14.0-284.11.1.el9_2.x86_64"
    write(
        root,
        f"boot/loader/entries/0f3e9c1a5b7d4e2f8a6c0b1d3e5f7a9b-{older}.conf",
        f"title old\nversion {older}\nlinux /vmlinuz-{older}\noptions root=UUID={UUID} ro old\n",
    )
    assert run_tool("grubby", root, "--default-index").stdout == "0\n"
    result = run_tool("grubby", root, f"--set-default=/boot/vmlinuz-{older}")
    assert result.returncode == 0, result.stderr
    assert run_tool("grubby", root, "--default-index").stdout == "1\n"
    assert boot_cmdline(root, load_profile("h100-sxm-nvswitch")) == (
        f"BOOT_IMAGE=/boot/vmlinuz-{older} root=UUID={UUID} ro old"
    )
    grubenv = (root / "boot/grub2/grubenv").read_bytes()
    assert len(grubenv) == 1024
    assert grubenv.startswith(b"# GRUB Environment Block\nsaved_entry=")


RHEL8_KERNEL = "4.18.0-513.5.1.el8_9.x86_64"
RHEL8_ARGS = (
    f"root=UUID={UUID} ro crashkernel=auto rd.lvm.lv=rhel/root rd.lvm.lv=rhel/swap rhgb quiet"
)


def rhel8_root(tmp_path: Path) -> Path:
    write(tmp_path, "etc/machine-id", "0f3e9c1a5b7d4e2f8a6c0b1d3e5f7a9b\n")
    install_boot_config(tmp_path, load_profile("rhel8-bls-kernelopts"))
    return tmp_path


def test_rhel8_layout_links_grubenv_to_the_esp_and_entries_take_kernelopts(tmp_path):
    root = rhel8_root(tmp_path)
    link = root / "boot/grub2/grubenv"
    assert link.is_symlink()
    assert str(link.readlink()) == "../efi/EFI/redhat/grubenv"
    assert read_bls_entries(root)[0].options == "$kernelopts"
    assert not (root / "etc/kernel/cmdline").exists()
    info = run_tool("grubby", root, "--info=DEFAULT").stdout.splitlines()
    assert info[2] == f'args="{RHEL8_ARGS.removeprefix(f"root=UUID={UUID} ")} pci=noacpi"'
    assert boot_cmdline(root, load_profile("rhel8-bls-kernelopts")) == (
        f"BOOT_IMAGE=/boot/vmlinuz-{RHEL8_KERNEL} {RHEL8_ARGS} pci=noacpi"
    )


def test_rhel8_grubby_all_edits_kernelopts_through_the_link(tmp_path):
    root = rhel8_root(tmp_path)
    result = run_tool(
        "grubby", root, "--update-kernel=ALL", "--args=iommu=pt", "--remove-args=pci=noacpi"
    )
    assert result.returncode == 0, result.stderr
    assert (root / "boot/grub2/grubenv").is_symlink(), "grubby replaced the link"
    esp = (root / "boot/efi/EFI/redhat/grubenv").read_text()
    assert f"kernelopts={RHEL8_ARGS} iommu=pt\n" in esp
    assert len(esp) == 1024
    assert read_bls_entries(root)[0].options == "$kernelopts"
    assert boot_cmdline(root, load_profile("rhel8-bls-kernelopts")) == (
        f"BOOT_IMAGE=/boot/vmlinuz-{RHEL8_KERNEL} {RHEL8_ARGS} iommu=pt"
    )
    grub_lines = (root / "etc/default/grub").read_text().splitlines()
    assert f'GRUB_CMDLINE_LINUX="{RHEL8_ARGS.split(" ro ")[1]} iommu=pt"' in grub_lines


def test_rhel8_grubby_one_kernel_writes_literal_options(tmp_path):
    root = rhel8_root(tmp_path)
    result = run_tool(
        "grubby", root, f"--update-kernel=/boot/vmlinuz-{RHEL8_KERNEL}", "--args=iommu=pt"
    )
    assert result.returncode == 0, result.stderr
    assert read_bls_entries(root)[0].options == f"{RHEL8_ARGS} pci=noacpi iommu=pt"
    assert f"kernelopts={RHEL8_ARGS} pci=noacpi\n" in (root / "boot/grub2/grubenv").read_text()


def test_rhel9_layout_has_kernel_cmdline_and_literal_options(tmp_path):
    write(tmp_path, "etc/machine-id", "0f3e9c1a5b7d4e2f8a6c0b1d3e5f7a9b\n")
    install_boot_config(tmp_path, load_profile("rhel9-bls-kernel-cmdline"))
    args = f"root=UUID={UUID} ro crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M"
    args += " rd.lvm.lv=rhel/root rhgb quiet amd_iommu=on"
    assert (tmp_path / "etc/kernel/cmdline").read_text() == args + "\n"
    assert read_bls_entries(tmp_path)[0].options == args
    grubenv = tmp_path / "boot/grub2/grubenv"
    assert not grubenv.is_symlink()
    assert "kernelopts" not in grubenv.read_text()
