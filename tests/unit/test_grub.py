"""grub defaults files: parse, evaluate, edit (lingbot_fleet.boot.grub)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lingbot_fleet.boot.cmdline import KernelParam, build_policy, parse_cmdline, render_cmdline
from lingbot_fleet.boot.grub import (
    GrubEditError,
    GrubFile,
    GrubParseError,
    NextBoot,
    configured_params,
    next_boot,
    next_boot_gaps,
    parse_grub_cfg,
    parse_grub_file,
    plan_default_grub,
    plan_grub_d,
    reboot_pending,
    render_dropin,
    sourcing_order,
)

SAMPLES = Path(__file__).parent / "grub_samples"
GRUB = "/etc/default/grub"
DROPIN = "/etc/default/grub.d/lingbot-fleet.cfg"
POLICY = build_policy({"iommu": "pt"}, ["pci=noacpi", "iommu=off"])
DROPIN_TEXT = (
    "# Managed by lingbot-fleet (role kernel_cmdline): kernel parameters it adds.\n"
    "# Set them in the inventory (kernel_cmdline_present), not here.\n"
    'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"\n'
)


def grub(text: str, path: str = GRUB) -> GrubFile:
    return parse_grub_file(path, text)


def configured(*texts: str) -> str:
    files = [
        grub(text, f"/etc/default/grub.d/{i}.cfg" if i else GRUB) for i, text in enumerate(texts)
    ]
    return render_cmdline(configured_params(files))


def read_sample(name: str) -> str:
    return (SAMPLES / name).read_bytes().decode()


# --- evaluation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('GRUB_CMDLINE_LINUX="a b"\nGRUB_CMDLINE_LINUX_DEFAULT="c"\n', "a b c"),
        ("GRUB_CMDLINE_LINUX='a $X b'\n", "a $X b"),
        ("GRUB_CMDLINE_LINUX=a\\ b\n", "a b"),
        ("GRUB_CMDLINE_LINUX=pci=realloc=off\"  x\"'y z'\n", "pci=realloc=off xy z"),
        ('X=1\nGRUB_CMDLINE_LINUX="a=$X b=${X}c $Y"\n', "a=1 b=1c"),
        ('GRUB_CMDLINE_LINUX="a"\nGRUB_CMDLINE_LINUX="b"\n', "b"),
        ('GRUB_CMDLINE_LINUX="a"\nGRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX b"\n', "a b"),
        ('GRUB_CMDLINE_LINUX="a" # GRUB_CMDLINE_LINUX="b"\n#GRUB_CMDLINE_LINUX="c"\n', "a"),
        ('  export GRUB_CMDLINE_LINUX="a"\r\nGRUB_CMDLINE_LINUX_DEFAULT=b\r\n', "a b"),
        ('GRUB_CMDLINE_LINUX="a \\"q r\\" \\$HOME"\n', 'a "q r" $HOME'),
        ('GRUB_CMDLINE_LINUX="a\\\nb"\n', "ab"),
        ('GRUB_CMDLINE_LINUX="dyndbg=\\"file x.c +p\\" a"\n', 'dyndbg="file x.c +p" a'),
        ('GRUB_CMDLINE_LINUX="a price=5$ b"\n', "a price=5$ b"),
        ('GRUB_DISTRIBUTOR=`lsb_release -i -s || echo Debian`\nGRUB_CMDLINE_LINUX="a"\n', "a"),
        ('GRUB_X=$(cat /x)\nGRUB_CMDLINE_LINUX="a"\n', "a"),
        ('if [ -e /x ]; then\n  GRUB_TERMINAL=console\nfi\nGRUB_CMDLINE_LINUX="a"\n', "a"),
        ("", ""),
    ],
)
def test_configured_cmdline(text: str, expected: str) -> None:
    assert configured(text) == expected


def test_dropins_are_sourced_after_the_main_file_in_sorted_order() -> None:
    assert sourcing_order(
        ["/etc/default/grub.d/50-cloudimg.cfg", GRUB, "/etc/default/grub.d/10-a.cfg"]
    ) == [
        "/etc/default/grub",
        "/etc/default/grub.d/10-a.cfg",
        "/etc/default/grub.d/50-cloudimg.cfg",
    ]
    assert (
        configured(
            'GRUB_CMDLINE_LINUX="a"\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n',
            'GRUB_CMDLINE_LINUX_DEFAULT="console=ttyS0"\n',
            'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"\n',
        )
        == "a iommu=pt console=ttyS0"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX="quiet\n',
            "/etc/default/grub:2: unbalanced double quote: the quote opened here is never "
            "closed. Fix: close the quote.",
        ),
        (
            "GRUB_CMDLINE_LINUX='quiet\n",
            "/etc/default/grub:1: unbalanced single quote: the quote opened here is never "
            "closed. Fix: close the quote.",
        ),
        (
            "GRUB_TERMINAL=`echo x\n",
            "/etc/default/grub:1: unbalanced backquote: the command substitution opened here "
            "is never closed. Fix: close it with a backquote.",
        ),
    ],
)
def test_unparseable_files_are_refused(text: str, message: str) -> None:
    with pytest.raises(GrubParseError) as caught:
        grub(text)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'GRUB_CMDLINE_LINUX="$(cat /etc/cmdline) quiet"\n',
            "/etc/default/grub:1: GRUB_CMDLINE_LINUX cannot be evaluated safely: its value "
            "uses command substitution or arithmetic ($(cat /etc/cmdline)). Fix: replace it "
            "with the literal parameters.",
        ),
        (
            "GRUB_CMDLINE_LINUX_DEFAULT=`cat /x`\n",
            "/etc/default/grub:1: GRUB_CMDLINE_LINUX_DEFAULT cannot be evaluated safely: its "
            "value uses command substitution (`...`). Fix: replace the command substitution "
            "with the literal parameters.",
        ),
        (
            'GRUB_CMDLINE_LINUX="${EXTRA:-quiet}"\n',
            "/etc/default/grub:1: GRUB_CMDLINE_LINUX cannot be evaluated safely: its value "
            "uses the parameter expansion ${EXTRA:-quiet}. Fix: use a plain $NAME or ${NAME} "
            "reference or literal parameters.",
        ),
        (
            'EXTRA=$(cat /x)\nGRUB_CMDLINE_LINUX="$EXTRA"\n',
            "/etc/default/grub:2: GRUB_CMDLINE_LINUX refers to $EXTRA, which cannot be "
            "evaluated safely (/etc/default/grub:1: EXTRA cannot be evaluated safely: its "
            "value uses command substitution or arithmetic ($(cat /x))). Fix: replace it with "
            "the literal parameters.",
        ),
        (
            "GRUB_CMDLINE_LINUX=quiet splash\n",
            "/etc/default/grub:1: GRUB_CMDLINE_LINUX cannot be evaluated safely: the "
            "assignment is followed by 'splash' on the same line (a command run with it, or "
            "an unquoted value with blanks). Fix: quote the whole value and keep one "
            "assignment per line.",
        ),
        (
            'if [ -e /etc/gpu ]; then\n  GRUB_CMDLINE_LINUX="iommu=pt"\nfi\n',
            "/etc/default/grub:2: GRUB_CMDLINE_LINUX cannot be evaluated safely: it is "
            "assigned inside an if/case/loop block, so its value depends on run-time "
            "conditions. Fix: make it a plain assignment outside any block.",
        ),
        (
            '[ -e /etc/gpu ] && GRUB_CMDLINE_LINUX="iommu=pt"\n',
            "/etc/default/grub:1: the kernel command line is set inside a command ('[ -e "
            '/etc/gpu ] && GRUB_CMDLINE_LINUX="iommu=pt"\'), whose effect depends on run-time '
            "conditions. Fix: make it a plain assignment on a line of its own.",
        ),
        (
            ". /etc/default/site-grub\n",
            "/etc/default/grub:1: '. /etc/default/site-grub' sources another file, which may "
            "set the kernel command line. Fix: move its settings into this file or into "
            "/etc/default/grub.d/*.cfg.",
        ),
    ],
)
def test_unevaluable_cmdline_is_refused(text: str, message: str) -> None:
    with pytest.raises(GrubParseError) as caught:
        configured(text)
    assert str(caught.value) == message


def test_unevaluable_assignment_overwritten_later_is_harmless() -> None:
    assert configured('GRUB_CMDLINE_LINUX="$(x)"\nGRUB_CMDLINE_LINUX="a"\n') == "a"


# --- Debian family: drop-in + removals over the sample files ---------------------------

SAMPLE_CONFIGURED = {
    "debian12": "iommu=pt quiet",
    "ubuntu2204-crlf": "console=tty1 console=ttyS0,115200n8 iommu=pt quiet splash",
    "unquoted-export": "iommu=pt quiet nosplash",
    "self-reference": (
        "console=ttyS0,115200n8 pci=realloc=off pci=realloc "
        "nvme_core.default_ps_max_latency_us=0 iommu=pt"
    ),
    "repeated-dead": "crashkernel=auto rd.lvm.lv=rl/root iommu=pt quiet loglevel=3",
    "multiline": "crashkernel=1G-4G:192M,4G-64G:256M mitigations=off iommu=pt",
}


def test_parameter_set_by_the_admin_gets_no_dropin() -> None:
    plan = plan_grub_d(
        [grub('GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt pci=noacpi"\n')], DROPIN, POLICY
    )
    assert plan.new_texts == {GRUB: 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt"\n'}
    assert render_cmdline(plan.configured) == "quiet iommu=pt"


def test_parameter_set_in_another_dropin_gets_no_dropin() -> None:
    site = "/etc/default/grub.d/50-site.cfg"
    files = [grub('GRUB_CMDLINE_LINUX=""\n'), grub('GRUB_CMDLINE_LINUX="iommu=pt"\n', site)]
    assert plan_grub_d(files, DROPIN, POLICY).new_texts == {}
    with_dropin = [*files, grub(DROPIN_TEXT, DROPIN)]
    assert plan_grub_d(with_dropin, DROPIN, POLICY).new_texts == {DROPIN: None}


def test_dropin_holds_only_the_parameters_not_set_elsewhere() -> None:
    policy = build_policy({"iommu": "pt", "pcie_aspm": "off"}, [])
    plan = plan_grub_d([grub('GRUB_CMDLINE_LINUX="iommu=pt"\n')], DROPIN, policy)
    assert plan.new_texts == {DROPIN: DROPIN_TEXT.replace("iommu=pt", "pcie_aspm=off")}
    assert render_cmdline(plan.configured) == "iommu=pt pcie_aspm=off"


@pytest.mark.parametrize("name", sorted(SAMPLE_CONFIGURED))
def test_sample_files_are_edited_exactly(name: str) -> None:
    before = read_sample(f"{name}.grub")
    expected = read_sample(f"{name}.expected")
    plan = plan_grub_d([grub(before)], DROPIN, POLICY)
    assert plan.new_texts == {GRUB: expected, DROPIN: DROPIN_TEXT}
    assert render_cmdline(plan.configured) == SAMPLE_CONFIGURED[name]
    again = plan_grub_d([grub(expected), grub(DROPIN_TEXT, DROPIN)], DROPIN, POLICY)
    assert again.new_texts == {}
    assert render_cmdline(again.configured) == SAMPLE_CONFIGURED[name]


def test_sample_edits_change_only_the_unwanted_words() -> None:
    before = read_sample("ubuntu2204-crlf.grub")
    after = read_sample("ubuntu2204-crlf.expected")
    assert before.replace('"pci=noacpi quiet splash"', '"quiet splash"') == after
    assert after.count("\r\n") == before.count("\r\n") == 9


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ('GRUB_CMDLINE_LINUX="quiet pci=noacpi splash"\n', 'GRUB_CMDLINE_LINUX="quiet splash"\n'),
        ('GRUB_CMDLINE_LINUX="pci=noacpi iommu=off quiet"\n', 'GRUB_CMDLINE_LINUX="quiet"\n'),
        ('GRUB_CMDLINE_LINUX="quiet\tpci=noacpi  iommu=off"\n', 'GRUB_CMDLINE_LINUX="quiet"\n'),
        ("GRUB_CMDLINE_LINUX=' pci=noacpi '\n", "GRUB_CMDLINE_LINUX=' '\n"),
        ('GRUB_CMDLINE_LINUX="pci=noacpi,realloc"\n', 'GRUB_CMDLINE_LINUX="pci=realloc"\n'),
        ("GRUB_CMDLINE_LINUX=pci=nommconf,noacpi\n", "GRUB_CMDLINE_LINUX=pci=nommconf\n"),
        ('GRUB_CMDLINE_LINUX="pci=no"acpi\n', 'GRUB_CMDLINE_LINUX=""\n'),
        (
            'GRUB_CMDLINE_LINUX="iommu=off,nobypass quiet"  # old\n',
            'GRUB_CMDLINE_LINUX="iommu=nobypass quiet"  # old\n',
        ),
        (
            'OPTS="pci=noacpi quiet"\nGRUB_CMDLINE_LINUX="$OPTS"\n',
            'OPTS="quiet"\nGRUB_CMDLINE_LINUX="$OPTS"\n',
        ),
        (
            'GRUB_CMDLINE_LINUX="pci=noacpi"\nGRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX x"\n',
            'GRUB_CMDLINE_LINUX=""\nGRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX x"\n',
        ),
    ],
)
def test_removal_edits(before: str, after: str) -> None:
    plan = plan_grub_d([grub(before)], DROPIN, POLICY)
    assert plan.new_texts[GRUB] == after


def test_unwanted_parameters_are_removed_from_other_dropins_too() -> None:
    cloud = "/etc/default/grub.d/50-cloudimg-settings.cfg"
    files = [
        grub('GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'),
        grub('GRUB_CMDLINE_LINUX_DEFAULT="console=ttyS0 pci=noacpi"\n', cloud),
    ]
    plan = plan_grub_d(files, DROPIN, POLICY)
    assert plan.new_texts == {
        cloud: 'GRUB_CMDLINE_LINUX_DEFAULT="console=ttyS0"\n',
        DROPIN: DROPIN_TEXT,
    }
    assert render_cmdline(plan.configured) == "iommu=pt console=ttyS0"


def test_conflicting_value_of_a_present_parameter_is_removed() -> None:
    policy = build_policy({"pcie_aspm": "off"}, [])
    text = 'GRUB_CMDLINE_LINUX=""\nGRUB_CMDLINE_LINUX_DEFAULT="quiet pcie_aspm=force"\n'
    plan = plan_grub_d([grub(text)], DROPIN, policy)
    assert plan.new_texts[GRUB] == 'GRUB_CMDLINE_LINUX=""\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
    assert render_cmdline(plan.configured) == "pcie_aspm=off quiet"


def test_changed_policy_rewrites_the_dropin_and_empty_policy_removes_it() -> None:
    files = [grub('GRUB_CMDLINE_LINUX=""\n'), grub(DROPIN_TEXT, DROPIN)]
    plan = plan_grub_d(files, DROPIN, build_policy({"iommu": "pt", "pcie_aspm": "off"}, []))
    assert plan.new_texts == {DROPIN: DROPIN_TEXT.replace("iommu=pt", "iommu=pt pcie_aspm=off")}
    assert plan_grub_d(files, DROPIN, build_policy({}, [])).new_texts == {DROPIN: None}


def test_dropin_is_sourced_in_its_sorted_place() -> None:
    late = "/etc/default/grub.d/zz-site.cfg"
    files = [grub('GRUB_CMDLINE_LINUX="a"\n'), grub('GRUB_CMDLINE_LINUX="b"\n', late)]
    with pytest.raises(GrubEditError) as caught:
        plan_grub_d(files, DROPIN, POLICY)
    assert str(caught.value) == (
        "the edited grub configuration would still not match the policy (missing iommu=pt); "
        "nothing was written. Check where these parameters are set (another variable, a "
        "file this module does not edit) and fix them by hand"
    )


def test_rewrite_of_a_quoted_list_parameter_is_refused() -> None:
    with pytest.raises(GrubEditError) as caught:
        plan_grub_d([grub('GRUB_CMDLINE_LINUX=pci="noacpi,realloc"\n')], DROPIN, POLICY)
    assert str(caught.value) == (
        "/etc/default/grub:1: kernel parameter 'pci=noacpi,realloc' is written with quotes, "
        "escapes or references, so it cannot be rewritten safely to 'pci=realloc'; write it "
        "as one plain word and run again"
    )


def test_render_dropin_line_endings() -> None:
    params = [KernelParam("iommu", "pt"), KernelParam("quiet")]
    assert render_dropin(params, "\r\n").endswith(
        'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt quiet"\r\n'
    )


# --- RedHat family: /etc/default/grub alone --------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            'GRUB_CMDLINE_LINUX="crashkernel=auto rhgb quiet"\n',
            'GRUB_CMDLINE_LINUX="crashkernel=auto rhgb quiet iommu=pt"\n',
        ),
        ('GRUB_CMDLINE_LINUX=""\n', 'GRUB_CMDLINE_LINUX="iommu=pt"\n'),
        ("GRUB_CMDLINE_LINUX='rhgb'\r\n", "GRUB_CMDLINE_LINUX='rhgb iommu=pt'\r\n"),
        ("GRUB_CMDLINE_LINUX=rhgb # x\n", 'GRUB_CMDLINE_LINUX=rhgb" iommu=pt" # x\n'),
        (
            'GRUB_CMDLINE_LINUX="rhgb pci=noacpi"\n',
            'GRUB_CMDLINE_LINUX="rhgb iommu=pt"\n',
        ),
        ("GRUB_TIMEOUT=5", 'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX="iommu=pt"\n'),
        ("GRUB_TIMEOUT=5\r\n", 'GRUB_TIMEOUT=5\r\nGRUB_CMDLINE_LINUX="iommu=pt"\r\n'),
    ],
)
def test_default_grub_edits(before: str, after: str) -> None:
    plan = plan_default_grub(grub(before), POLICY)
    assert plan.new_texts == {GRUB: after}
    assert plan_default_grub(grub(after), POLICY).new_texts == {}


# --- the next boot: grub.cfg, BLS entries, grubenv --------------------------------------

DEBIAN_GRUB_CFG = read_sample("debian12-saved.grub.cfg")
RUNNING_DEBIAN = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 root=UUID=1 ro iommu=pt quiet"


def boot_root(tmp_path: Path, files: dict[str, str], running: str) -> str:
    for path, text in {**files, "/proc/cmdline": running + "\n"}.items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return str(tmp_path)


def grubenv(**values: str) -> str:
    body = "# GRUB Environment Block\n" + "".join(f"{k}={v}\n" for k, v in values.items())
    return body + "#" * (1024 - len(body))


@pytest.mark.parametrize(
    ("default", "env", "entry", "args"),
    [
        ("0", None, "gnulinux-simple-1", "root=UUID=1 ro iommu=pt quiet"),
        ("${saved_entry}", None, "gnulinux-simple-1", "root=UUID=1 ro iommu=pt quiet"),
        (
            "${saved_entry}",
            {"saved_entry": "gnulinux-advanced-1>gnulinux-6.1.0-17-amd64-advanced-1"},
            "gnulinux-6.1.0-17-amd64-advanced-1",
            "root=UUID=1 ro quiet pci=noacpi",
        ),
        (
            "${saved_entry}",
            {
                "saved_entry": "Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux "
                "6.1.0-17-amd64"
            },
            "gnulinux-6.1.0-17-amd64-advanced-1",
            "root=UUID=1 ro quiet pci=noacpi",
        ),
        ("saved", {"saved_entry": "gnulinux-simple-1"}, "gnulinux-simple-1", None),
        ("1>1", None, "gnulinux-6.1.0-17-amd64-advanced-1", "root=UUID=1 ro quiet pci=noacpi"),
        ("1", None, "gnulinux-6.1.0-18-amd64-advanced-1", None),
        ("no-such-entry", None, "gnulinux-simple-1", None),
        (
            "0",
            {"next_entry": "gnulinux-advanced-1>gnulinux-6.1.0-17-amd64-advanced-1"},
            "gnulinux-6.1.0-17-amd64-advanced-1",
            None,
        ),
    ],
)
def test_grub_cfg_default_entry(
    tmp_path: Path, default: str, env: dict[str, str] | None, entry: str, args: str | None
) -> None:
    files = {"/boot/grub/grub.cfg": DEBIAN_GRUB_CFG.replace("@DEFAULT@", default)}
    if env is not None:
        files["/boot/grub/grubenv"] = grubenv(**env)
    boot = next_boot(boot_root(tmp_path, files, RUNNING_DEBIAN))
    assert boot.source == "/boot/grub/grub.cfg"
    assert boot.entry == entry
    if args is not None:
        assert boot.args == tuple(args.split())
    assert boot.boot_time == ()


def test_saved_default_that_boots_the_running_entry_is_no_pending_reboot(tmp_path: Path) -> None:
    files = {
        "/boot/grub/grub.cfg": DEBIAN_GRUB_CFG.replace("@DEFAULT@", "${saved_entry}"),
        "/boot/grub/grubenv": grubenv(saved_entry="gnulinux-6.1.0-18-amd64-advanced-1"),
    }
    root = boot_root(tmp_path, files, RUNNING_DEBIAN)
    boot = next_boot(root)
    assert boot.kernel == "/boot/vmlinuz-6.1.0-18-amd64"
    assert reboot_pending(RUNNING_DEBIAN, boot) is False
    older = grubenv(saved_entry="gnulinux-advanced-1>gnulinux-6.1.0-17-amd64-advanced-1")
    (tmp_path / "boot/grub/grubenv").write_text(older)
    assert reboot_pending(RUNNING_DEBIAN, next_boot(root)) is True


UBUNTU_GRUB_CFG = read_sample("ubuntu2404.grub.cfg")
RUNNING_UBUNTU = "BOOT_IMAGE=/boot/vmlinuz-6.8.0-31-generic root=UUID=1 ro quiet splash"


@pytest.mark.parametrize("handoff", [" vt.handoff=7", ""])
def test_ubuntu_vt_handoff_is_taken_as_the_running_boot_took_it(
    tmp_path: Path, handoff: str
) -> None:
    running = RUNNING_UBUNTU + handoff
    boot = next_boot(boot_root(tmp_path, {"/boot/grub/grub.cfg": UBUNTU_GRUB_CFG}, running))
    assert boot.args == tuple(running.split()[1:])
    assert boot.boot_time == tuple(handoff.split())
    assert reboot_pending(running, boot) is False
    assert next_boot_gaps(boot, parse_cmdline("quiet splash"), POLICY) == ["lacks iommu=pt"]


RHEL8_GRUB_CFG = read_sample("rhel8.grub.cfg")
BLS_NEW = "/boot/loader/entries/4c1a-4.18.0-513.el8.x86_64.conf"
BLS_OLD = "/boot/loader/entries/4c1a-4.18.0-477.el8.x86_64.conf"


def bls_entry(version: str, options: str) -> str:
    return (
        f"title Red Hat Enterprise Linux ({version}) 8.9 (Ootpa)\nversion {version}\n"
        f"linux /vmlinuz-{version}\ninitrd /initramfs-{version}.img $tuned_initrd\n"
        f"options {options}\nid rhel-{version}\ngrub_users $grub_users\n"
        "grub_arg --unrestricted\ngrub_class kernel\n"
    )


def rhel8_files(env: dict[str, str] | None) -> dict[str, str]:
    files = {
        "/boot/grub2/grub.cfg": RHEL8_GRUB_CFG,
        BLS_NEW: bls_entry("4.18.0-513.el8.x86_64", "$kernelopts $tuned_params"),
        BLS_OLD: bls_entry("4.18.0-477.el8.x86_64", "root=/dev/mapper/rhel-root ro pci=noacpi"),
    }
    if env is not None:
        files["/boot/grub2/grubenv"] = grubenv(**env)
    return files


RUNNING_RHEL = (
    "BOOT_IMAGE=(hd0,gpt2)/vmlinuz-4.18.0-513.el8.x86_64 root=/dev/mapper/rhel-root ro "
    "crashkernel=auto rhgb quiet iommu=pt skew_tick=1"
)


def test_rhel8_kernelopts_and_tuned_params_come_from_grubenv(tmp_path: Path) -> None:
    env = {
        "saved_entry": "4c1a-4.18.0-513.el8.x86_64",
        "kernelopts": "root=/dev/mapper/rhel-root ro crashkernel=auto rhgb quiet iommu=pt",
        "tuned_params": "skew_tick=1",
    }
    boot = next_boot(boot_root(tmp_path, rhel8_files(env), RUNNING_RHEL))
    assert boot.source == BLS_NEW
    assert boot.kernel == "/vmlinuz-4.18.0-513.el8.x86_64"
    assert boot.args == tuple(RUNNING_RHEL.split()[1:])
    assert boot.boot_time == ()
    assert reboot_pending(RUNNING_RHEL, boot) is False


def test_rhel8_without_grubenv_kernelopts_uses_grub_cfg_fallback(tmp_path: Path) -> None:
    boot = next_boot(boot_root(tmp_path, rhel8_files({"tuned_params": ""}), RUNNING_RHEL))
    assert boot.source == BLS_NEW
    assert boot.args == ("root=/dev/mapper/rhel-root", "ro", "crashkernel=auto", "rhgb", "quiet")
    assert reboot_pending(RUNNING_RHEL, boot) is True


def test_rhel_saved_entry_picks_the_bls_entry(tmp_path: Path) -> None:
    env = {"saved_entry": "4c1a-4.18.0-477.el8.x86_64"}
    boot = next_boot(boot_root(tmp_path, rhel8_files(env), RUNNING_RHEL))
    assert boot.source == BLS_OLD
    assert boot.args == ("root=/dev/mapper/rhel-root", "ro", "pci=noacpi")


def test_rhel9_undefined_tuned_params_expand_to_nothing(tmp_path: Path) -> None:
    running = "BOOT_IMAGE=(hd0,gpt2)/vmlinuz-5.14.0 root=/dev/mapper/rl-root ro iommu=pt"
    files = {
        "/boot/loader/entries/m-5.14.0.conf": bls_entry(
            "5.14.0", "root=/dev/mapper/rl-root ro iommu=pt $tuned_params"
        ),
        "/boot/grub2/grubenv": grubenv(saved_entry="m-5.14.0"),
    }
    boot = next_boot(boot_root(tmp_path, files, running))
    assert boot.args == ("root=/dev/mapper/rl-root", "ro", "iommu=pt")
    assert reboot_pending(running, boot) is False


def test_no_boot_configuration_is_unknown(tmp_path: Path) -> None:
    boot = next_boot(boot_root(tmp_path, {}, RUNNING_DEBIAN))
    assert boot == NextBoot()
    assert reboot_pending(RUNNING_DEBIAN, boot) is None
    assert next_boot_gaps(boot, parse_cmdline("iommu=pt"), POLICY) == []


def test_grub_cfg_menu_is_parsed_with_ids_and_submenus() -> None:
    cfg = parse_grub_cfg(DEBIAN_GRUB_CFG.replace("@DEFAULT@", "0"))
    assert [e.entry_id for e in cfg.entries] == ["gnulinux-simple-1", "gnulinux-advanced-1"]
    assert cfg.entries[1].is_submenu
    assert [c.title for c in cfg.entries[1].children] == [
        "Debian GNU/Linux, with Linux 6.1.0-18-amd64",
        "Debian GNU/Linux, with Linux 6.1.0-17-amd64",
    ]
    assert cfg.defaults == ('"${next_entry}"', '"0"')


def test_next_boot_gaps_ignore_words_the_scripts_add() -> None:
    boot = NextBoot(args=("root=UUID=1", "ro", "iommu=pt", "quiet", "panic=-1"))
    assert next_boot_gaps(boot, parse_cmdline("quiet iommu=pt"), POLICY) == []
    stale = NextBoot(args=("root=UUID=1", "ro", "quiet", "pci=noacpi"))
    assert next_boot_gaps(stale, parse_cmdline("iommu=pt quiet"), POLICY) == [
        "lacks iommu=pt",
        "holds pci=noacpi",
    ]
