"""grub defaults files: parse, evaluate, edit (lingbot_fleet.grub)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lingbot_fleet.cmdline import KernelParam, build_policy, render_cmdline
from lingbot_fleet.grub import (
    GrubEditError,
    GrubFile,
    GrubParseError,
    configured_params,
    parse_grub_file,
    plan_default_grub,
    plan_grub_d,
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
