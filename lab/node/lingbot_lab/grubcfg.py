"""The node's boot loader configuration: /etc/default/grub, grub.cfg, BLS entries, grubenv.

Every function takes `root`, the path prefix of the node's file system ("" or "/" in the
node, a temp dir in host tests; see LINGBOT_LAB_ROOT).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lingbot_lab.hwstate import tokenize_cmdline
from lingbot_lab.profile import DEFAULT_ROOT_UUID

DEFAULT_GRUB = "etc/default/grub"
DEFAULT_GRUB_DROPINS = "etc/default/grub.d"
GRUB_CFG = "boot/grub/grub.cfg"
BLS_ENTRIES = "boot/loader/entries"
GRUBENV_PATHS = ("boot/grub2/grubenv", "boot/grub/grubenv")
# RHEL 8 on UEFI: grubenv lives on the EFI system partition, /boot/grub2/grubenv links to it.
EFI_GRUBENV = "boot/efi/EFI/redhat/grubenv"
EFI_GRUBENV_LINK = "../efi/EFI/redhat/grubenv"
# RHEL 9: the arguments kernel-install gives every new kernel's BLS entry.
KERNEL_CMDLINE = "etc/kernel/cmdline"
KERNELOPTS_REFERENCES = ("$kernelopts", "${kernelopts}")
GRUB_REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
GRUBENV_BYTES = 1024
MACHINE_ID = "etc/machine-id"
DEFAULT_MACHINE_ID = "4c1a9e7d2b3f4a6c8e0d1f2a3b4c5d6e"
GRUB_VARIABLES = (
    "GRUB_DEFAULT",
    "GRUB_TIMEOUT",
    "GRUB_DISTRIBUTOR",
    "GRUB_CMDLINE_LINUX",
    "GRUB_CMDLINE_LINUX_DEFAULT",
    "GRUB_DISABLE_RECOVERY",
    "GRUB_DISABLE_SUBMENU",
    "GRUB_TIMEOUT_STYLE",
)
# Sources the settings exactly as grub-mkconfig does, then prints them NUL-separated.
SOURCE_SETTINGS_SCRIPT = """set -a
lingbot_lab_root="$1"
shift
if test -f "${lingbot_lab_root}/etc/default/grub" ; then
  . "${lingbot_lab_root}/etc/default/grub"
fi
for lingbot_lab_x in "${lingbot_lab_root}"/etc/default/grub.d/*.cfg ; do
  if [ -e "${lingbot_lab_x}" ]; then
    . "${lingbot_lab_x}"
  fi
done
for lingbot_lab_name in "$@" ; do
  eval "lingbot_lab_value=\\"\\${${lingbot_lab_name}}\\""
  printf '%s=%s\\0' "${lingbot_lab_name}" "${lingbot_lab_value}"
done
"""


class GrubConfigError(RuntimeError):
    """The grub settings could not be read (the message is the shell's, as update-grub's)."""


@dataclass(frozen=True)
class BlsEntry:
    entry_id: str  # file name without .conf
    fields: dict[str, str]

    @property
    def kernel(self) -> str:
        linux = self.fields.get("linux", "")
        return linux if linux.startswith("/boot/") else f"/boot{linux}"

    @property
    def options(self) -> str:
        return self.fields.get("options", "")


def root_path(root: str | Path, relative: str) -> Path:
    return Path(str(root) or "/") / relative


def version_key(version: str) -> list[tuple[int, int | str]]:
    """Natural version order: '5.14.0-362.8.1' < '5.14.0-362.24.1'."""
    return [
        (0, int(chunk)) if chunk.isdigit() else (1, chunk)
        for chunk in re.findall(r"\d+|[^\d]+", version)
    ]


def read_grub_settings(root: str | Path) -> dict[str, str]:
    """Source /etc/default/grub and grub.d/*.cfg with /bin/sh like grub-mkconfig."""
    completed = subprocess.run(
        [
            "/bin/sh",
            "-c",
            SOURCE_SETTINGS_SCRIPT,
            "/usr/sbin/grub-mkconfig",
            str(root).rstrip("/"),
            *GRUB_VARIABLES,
        ],
        capture_output=True,
        check=False,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"},
    )
    if completed.returncode != 0:
        message = completed.stderr.decode("utf-8", "replace").strip()
        raise GrubConfigError(message or f"/bin/sh exited with status {completed.returncode}")
    settings: dict[str, str] = {}
    for record in completed.stdout.decode("utf-8", "replace").split("\0"):
        if record:
            name, _, value = record.partition("=")
            settings[name] = value
    return settings


def linux_versions(root: str | Path) -> list[str]:
    """Kernel versions with a /boot/vmlinuz-<version>, newest first (like 10_linux)."""
    boot = root_path(root, "boot")
    versions = [path.name[len("vmlinuz-") :] for path in boot.glob("vmlinuz-*")]
    return sorted(versions, key=version_key, reverse=True)


def _is_true(value: str) -> bool:
    return value in ("true", "y")


def _menuentry(
    title: str,
    *,
    entry_class: str,
    entry_id: str,
    version: str,
    root_uuid: str,
    args: str,
    indent: str,
) -> list[str]:
    lines = [
        f"menuentry '{title}' {entry_class}--class gnu-linux --class gnu --class os"
        f" $menuentry_id_option '{entry_id}' {{",
        "\tload_video",
        "\tinsmod gzio",
        "\tinsmod part_gpt",
        "\tinsmod ext2",
        f"\tsearch --no-floppy --fs-uuid --set=root {root_uuid}",
        f"\techo\t'Loading Linux {version} ...'",
        f"\tlinux\t/boot/vmlinuz-{version} root=UUID={root_uuid} ro {args}",
        "\techo\t'Loading initial ramdisk ...'",
        f"\tinitrd\t/boot/initrd.img-{version}",
        "}",
    ]
    return [indent + line for line in lines]


def render_grub_cfg(settings: dict[str, str], versions: list[str], root_uuid: str) -> str:
    """grub.cfg as grub-mkconfig's 00_header and 10_linux write it."""
    distributor = settings.get("GRUB_DISTRIBUTOR", "")
    os_name = f"{distributor} GNU/Linux" if distributor else "GNU/Linux"
    entry_class = f"--class {distributor.split(' ')[0].lower()} " if distributor else ""
    default_args = (
        f"{settings.get('GRUB_CMDLINE_LINUX', '')} {settings.get('GRUB_CMDLINE_LINUX_DEFAULT', '')}"
    )
    recovery_args = f"single {settings.get('GRUB_CMDLINE_LINUX', '')}"
    lines = [
        "#",
        "# DO NOT EDIT THIS FILE",
        "#",
        "# It is automatically generated by grub-mkconfig using templates",
        "# from /etc/grub.d and settings from /etc/default/grub",
        "#",
        "",
        "### BEGIN /etc/grub.d/00_header ###",
        "if [ -s $prefix/grubenv ]; then",
        "  load_env",
        "fi",
        f'set default="{settings.get("GRUB_DEFAULT", "0") or "0"}"',
        'if [ x"${feature_menuentry_id}" = xy ]; then',
        '  menuentry_id_option="--id"',
        "else",
        '  menuentry_id_option=""',
        "fi",
        f"set timeout={settings.get('GRUB_TIMEOUT', '5') or '5'}",
        "### END /etc/grub.d/00_header ###",
        "",
        "### BEGIN /etc/grub.d/10_linux ###",
    ]
    for position, version in enumerate(versions):
        if position == 0:
            lines += _menuentry(
                os_name,
                entry_class=entry_class,
                entry_id=f"gnulinux-simple-{root_uuid}",
                version=version,
                root_uuid=root_uuid,
                args=default_args,
                indent="",
            )
            if not _is_true(settings.get("GRUB_DISABLE_SUBMENU", "")):
                lines.append(
                    f"submenu 'Advanced options for {os_name}' $menuentry_id_option"
                    f" 'gnulinux-advanced-{root_uuid}' {{"
                )
        indent = "" if _is_true(settings.get("GRUB_DISABLE_SUBMENU", "")) else "\t"
        lines += _menuentry(
            f"{os_name}, with Linux {version}",
            entry_class=entry_class,
            entry_id=f"gnulinux-{version}-advanced-{root_uuid}",
            version=version,
            root_uuid=root_uuid,
            args=default_args,
            indent=indent,
        )
        if not _is_true(settings.get("GRUB_DISABLE_RECOVERY", "")):
            lines += _menuentry(
                f"{os_name}, with Linux {version} (recovery mode)",
                entry_class=entry_class,
                entry_id=f"gnulinux-{version}-recovery-{root_uuid}",
                version=version,
                root_uuid=root_uuid,
                args=recovery_args,
                indent=indent,
            )
    if versions and not _is_true(settings.get("GRUB_DISABLE_SUBMENU", "")):
        lines.append("}")
    lines += ["", "### END /etc/grub.d/10_linux ###", ""]
    return "\n".join(lines)


# Ubuntu's 10_linux: the video mode a kernel gets is chosen at boot; with gfxpayload=keep
# (no recordfail in grubenv) the `gfxmode` function sets vt_handoff=vt.handoff=7, which
# every linux line whose GRUB_CMDLINE_LINUX_DEFAULT has `splash` ends with.
UBUNTU_GFXMODE = [
    "function gfxmode {",
    '\tset gfxpayload="${1}"',
    '\tif [ "${1}" = "keep" ]; then',
    "\t\tset vt_handoff=vt.handoff=7",
    "\telse",
    "\t\tset vt_handoff=",
    "\tfi",
    "}",
    'if [ "${recordfail}" != 1 ]; then',
    "  set linux_gfx_mode=keep",
    "else",
    "  set linux_gfx_mode=text",
    "fi",
    "export linux_gfx_mode",
]
UBUNTU_RECOVERY_ARGS = "recovery nomodeset dis_ucode_ldr"
VT_HANDOFF = "vt.handoff=7"


def _ubuntu_menuentry(
    title: str,
    *,
    entry_class: str,
    entry_id: str,
    version: str,
    root_uuid: str,
    args: str,
    kind: str,
    indent: str,
) -> list[str]:
    """One entry as Ubuntu's 10_linux writes it (quiet boot: a simple entry echoes
    nothing; a recovery entry keeps text mode)."""
    lines = [
        f"menuentry '{title}' --class {entry_class} --class gnu-linux --class gnu --class os"
        f" $menuentry_id_option '{entry_id}' {{",
        "\trecordfail",
        "\tload_video",
        *([] if kind == "recovery" else ["\tgfxmode $linux_gfx_mode"]),
        "\tinsmod gzio",
        "\tif [ x$grub_platform = xxen ]; then insmod xzio; insmod lzopio; fi",
        "\tinsmod part_gpt",
        "\tinsmod ext2",
        f"\tsearch --no-floppy --fs-uuid --set=root {root_uuid}",
        *([] if kind == "simple" else [f"\techo\t'Loading Linux {version} ...'"]),
        f"\tlinux\t/boot/vmlinuz-{version} root=UUID={root_uuid} ro {args}",
        *([] if kind == "simple" else ["\techo\t'Loading initial ramdisk ...'"]),
        f"\tinitrd\t/boot/initrd.img-{version}",
        "}",
    ]
    return [indent + line for line in lines]


def render_ubuntu_grub_cfg(settings: dict[str, str], versions: list[str], root_uuid: str) -> str:
    """grub.cfg as Ubuntu 24.04's 00_header and 10_linux write it: the default is
    grubenv's one-time next_entry, else GRUB_DEFAULT; `$vt_handoff` ends each normal
    linux line when GRUB_CMDLINE_LINUX_DEFAULT has `splash`."""
    distributor = settings.get("GRUB_DISTRIBUTOR", "") or "Ubuntu"
    os_name = distributor if distributor in ("Ubuntu", "Kubuntu") else f"{distributor} GNU/Linux"
    cmdline_default = settings.get("GRUB_CMDLINE_LINUX_DEFAULT", "")
    if "splash" in cmdline_default.split():
        cmdline_default = f"{cmdline_default} $vt_handoff"
    default_args = f"{settings.get('GRUB_CMDLINE_LINUX', '')} {cmdline_default}"
    recovery_args = f"{UBUNTU_RECOVERY_ARGS} {settings.get('GRUB_CMDLINE_LINUX', '')}"
    timeout = settings.get("GRUB_TIMEOUT", "5") or "5"
    timeout_style = settings.get("GRUB_TIMEOUT_STYLE", "") or "menu"
    lines = [
        "#",
        "# DO NOT EDIT THIS FILE",
        "#",
        "# It is automatically generated by grub-mkconfig using templates",
        "# from /etc/grub.d and settings from /etc/default/grub",
        "#",
        "",
        "### BEGIN /etc/grub.d/00_header ###",
        "if [ -s $prefix/grubenv ]; then",
        "  set have_grubenv=true",
        "  load_env",
        "fi",
        'if [ "${next_entry}" ] ; then',
        '   set default="${next_entry}"',
        "   set next_entry=",
        "   save_env next_entry",
        "   set boot_once=true",
        "else",
        f'   set default="{settings.get("GRUB_DEFAULT", "0") or "0"}"',
        "fi",
        "",
        'if [ x"${feature_menuentry_id}" = xy ]; then',
        '  menuentry_id_option="--id"',
        "else",
        '  menuentry_id_option=""',
        "fi",
        "",
        "export menuentry_id_option",
        "",
        "function recordfail {",
        "  set recordfail=1",
        '  if [ -n "${have_grubenv}" ]; then if [ -z "${boot_once}" ]; then save_env recordfail;'
        " fi; fi",
        "}",
        'if [ "${recordfail}" = 1 ] ; then',
        "  set timeout=30",
        "else",
        "  if [ x$feature_timeout_style = xy ] ; then",
        f"    set timeout_style={timeout_style}",
        f"    set timeout={timeout}",
        "  fi",
        "fi",
        "### END /etc/grub.d/00_header ###",
        "",
        "### BEGIN /etc/grub.d/10_linux ###",
        *UBUNTU_GFXMODE,
    ]
    submenu = not _is_true(settings.get("GRUB_DISABLE_SUBMENU", ""))
    indent = "\t" if submenu else ""
    entry = {"root_uuid": root_uuid, "entry_class": distributor.split(" ")[0].lower()}
    for position, version in enumerate(versions):
        if position == 0:
            lines += _ubuntu_menuentry(
                os_name,
                entry_id=f"gnulinux-simple-{root_uuid}",
                version=version,
                args=default_args,
                kind="simple",
                indent="",
                **entry,
            )
            if submenu:
                lines.append(
                    f"submenu 'Advanced options for {os_name}' $menuentry_id_option"
                    f" 'gnulinux-advanced-{root_uuid}' {{"
                )
        lines += _ubuntu_menuentry(
            f"{os_name}, with Linux {version}",
            entry_id=f"gnulinux-{version}-advanced-{root_uuid}",
            version=version,
            args=default_args,
            kind="advanced",
            indent=indent,
            **entry,
        )
        if not _is_true(settings.get("GRUB_DISABLE_RECOVERY", "")):
            lines += _ubuntu_menuentry(
                f"{os_name}, with Linux {version} (recovery mode)",
                entry_id=f"gnulinux-{version}-recovery-{root_uuid}",
                version=version,
                args=recovery_args,
                kind="recovery",
                indent=indent,
                **entry,
            )
    if versions and submenu:
        lines.append("}")
    lines += ["", "### END /etc/grub.d/10_linux ###", ""]
    return "\n".join(lines)


def write_atomically(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode("utf-8") if isinstance(content, str) else content
    descriptor, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
    os.chmod(temp_name, 0o644)
    os.replace(temp_name, path)


def first_linux_line(grub_cfg: str) -> list[str] | None:
    """Tokens of the first `linux` command (kernel path first), or None."""
    for line in grub_cfg.splitlines():
        tokens = tokenize_cmdline(line)
        if tokens and tokens[0] in ("linux", "linuxefi"):
            return tokens[1:]
    return None


def grub_variable(name: str, grub_cfg: str, grubenv: dict[str, str]) -> str:
    """What a variable in a linux line is when grub runs it: grubenv's (load_env), else
    Ubuntu's vt_handoff as the gfxmode function sets it (gfxpayload=keep unless
    recordfail=1), else nothing."""
    if name in grubenv:
        return grubenv[name]
    if name == "vt_handoff" and "function gfxmode {" in grub_cfg.splitlines():
        return "" if grubenv.get("recordfail") == "1" else VT_HANDOFF
    return ""


def expand_linux_args(words: list[str], grub_cfg: str, grubenv: dict[str, str]) -> list[str]:
    """The words a linux line gives the kernel: $NAME and ${NAME} expanded, empty words
    dropped."""

    def value(match: re.Match[str]) -> str:
        return grub_variable(match.group(1) or match.group(2), grub_cfg, grubenv)

    expanded = (GRUB_REFERENCE.sub(value, word) for word in words)
    return [word for text in expanded for word in tokenize_cmdline(text)]


def read_grubenv(root: str | Path) -> dict[str, str]:
    for relative in GRUBENV_PATHS:
        path = root_path(root, relative)
        if path.is_file():
            values: dict[str, str] = {}
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if line and not line.startswith("#") and "=" in line:
                    key, _, value = line.partition("=")
                    values[key] = value
            return values
    return {}


def grubenv_file(root: str | Path, relative: str) -> Path:
    """The file a grubenv path stands for: RHEL's grub2-editenv writes through a link to
    its target (the link stays)."""
    path = root_path(root, relative)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def write_grubenv(root: str | Path, relative: str, values: dict[str, str]) -> None:
    """A grub environment block: fixed 1024 bytes padded with '#'."""
    body = "# GRUB Environment Block\n" + "".join(f"{k}={v}\n" for k, v in values.items())
    if len(body) > GRUBENV_BYTES:
        raise ValueError(f"{relative}: environment block over {GRUBENV_BYTES} bytes")
    write_atomically(grubenv_file(root, relative), body + "#" * (GRUBENV_BYTES - len(body)))


def existing_grubenv(root: str | Path) -> str:
    """The grubenv path grub2-editenv and grubby use (the first that exists)."""
    existing = [p for p in GRUBENV_PATHS if root_path(root, p).is_file()]
    return existing[0] if existing else GRUBENV_PATHS[0]


def read_bls_entries(root: str | Path) -> list[BlsEntry]:
    """BLS entries in grubby's index order (newest version first)."""
    entries: list[BlsEntry] = []
    for path in root_path(root, BLS_ENTRIES).glob("*.conf"):
        fields: dict[str, str] = {}
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                key, _, value = stripped.partition(" ")
                fields[key] = value.strip()
        entries.append(BlsEntry(path.name[: -len(".conf")], fields))
    return sorted(
        entries, key=lambda e: (version_key(e.fields.get("version", "")), e.entry_id), reverse=True
    )


def default_bls_index(root: str | Path, entries: list[BlsEntry]) -> int:
    saved = read_grubenv(root).get("saved_entry", "")
    for index, entry in enumerate(entries):
        if entry.entry_id == saved:
            return index
    return 0


def takes_kernelopts(entry: BlsEntry) -> bool:
    """Whether the entry's options use grubenv's kernelopts (RHEL 8)."""
    return any(word in KERNELOPTS_REFERENCES for word in tokenize_cmdline(entry.options))


def bls_options(root: str | Path, entry: BlsEntry) -> str:
    """The entry's options with $kernelopts expanded from grubenv (RHEL 8 style), as grub
    and grubby --info expand them."""
    kernelopts = read_grubenv(root).get("kernelopts", "")
    words = [
        kernelopts if word in KERNELOPTS_REFERENCES else word
        for word in tokenize_cmdline(entry.options)
    ]
    return " ".join(word for word in words if word)


def write_bls_entry(root: str | Path, entry: BlsEntry) -> None:
    path = root_path(root, BLS_ENTRIES) / f"{entry.entry_id}.conf"
    write_atomically(path, "".join(f"{key} {value}\n" for key, value in entry.fields.items()))


def profile_cmdline(profile: dict[str, Any]) -> str:
    boot = profile["boot"]
    args = f"{boot['grub_cmdline_linux']} {boot['grub_cmdline_linux_default']}"
    return f"root=UUID={boot['root_uuid']} ro {args}"


def boot_cmdline(root: str | Path, profile: dict[str, Any]) -> str:
    """The running kernel's /proc/cmdline for the default boot entry (CONTRACT.md step 1)."""
    entries = read_bls_entries(root)
    if entries:
        entry = entries[default_bls_index(root, entries)]
        tokens = [f"BOOT_IMAGE={entry.kernel}", *tokenize_cmdline(bls_options(root, entry))]
        return " ".join(tokens)
    grub_cfg = root_path(root, GRUB_CFG)
    text = grub_cfg.read_text(encoding="utf-8") if grub_cfg.is_file() else ""
    linux = first_linux_line(text)
    if linux:
        args = expand_linux_args(linux[1:], text, read_grubenv(root))
        return " ".join([f"BOOT_IMAGE={linux[0]}", *args])
    kernel = f"/boot/vmlinuz-{profile['boot']['kernel_version']}"
    return " ".join([f"BOOT_IMAGE={kernel}", *tokenize_cmdline(profile_cmdline(profile))])


def shell_double_quoted(value: str) -> str:
    escaped = re.sub(r'(["\\$`])', r"\\\1", value)
    return f'"{escaped}"'


def render_default_grub(profile: dict[str, Any]) -> str:
    """/etc/default/grub as the distribution installs it, with the profile's cmdline."""
    boot = profile["boot"]
    if profile["os_family"] == "RedHat":
        head = [
            "GRUB_TIMEOUT=5",
            "GRUB_DISTRIBUTOR=\"$(sed 's, release .*$,,g' /etc/system-release 2>/dev/null)\"",
            "GRUB_DEFAULT=saved",
            "GRUB_DISABLE_SUBMENU=true",
            'GRUB_TERMINAL_OUTPUT="console"',
        ]
        tail = ['GRUB_DISABLE_RECOVERY="true"', "GRUB_ENABLE_BLSCFG=true"]
        cmdline_linux = f"{boot['grub_cmdline_linux']} {boot['grub_cmdline_linux_default']}"
        body = [f"GRUB_CMDLINE_LINUX={shell_double_quoted(cmdline_linux.strip())}"]
        return "\n".join([*head, *body, *tail]) + "\n"
    if boot["distribution"] == "ubuntu":
        return "\n".join(
            [
                "# If you change this file or any /etc/default/grub.d/*.cfg file,",
                "# run 'update-grub' afterwards to update /boot/grub/grub.cfg.",
                "# For full documentation of the options in these files, see:",
                "#   info -f grub -n 'Simple configuration'",
                "",
                "GRUB_DEFAULT=0",
                "GRUB_TIMEOUT_STYLE=hidden",
                "GRUB_TIMEOUT=0",
                "GRUB_DISTRIBUTOR=`( . /etc/os-release; echo ${NAME:-Ubuntu} ) 2>/dev/null"
                " || echo Ubuntu`",
                f"GRUB_CMDLINE_LINUX_DEFAULT={shell_double_quoted(boot['grub_cmdline_linux_default'])}",
                f"GRUB_CMDLINE_LINUX={shell_double_quoted(boot['grub_cmdline_linux'])}",
                "",
            ]
        )
    return "\n".join(
        [
            "# If you change this file, run 'update-grub' afterwards to update",
            "# /boot/grub/grub.cfg.",
            "# For full documentation of the options in this file, see:",
            "#   info -f grub -n 'Simple configuration'",
            "",
            "GRUB_DEFAULT=0",
            "GRUB_TIMEOUT=5",
            "GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`",
            f"GRUB_CMDLINE_LINUX_DEFAULT={shell_double_quoted(boot['grub_cmdline_linux_default'])}",
            f"GRUB_CMDLINE_LINUX={shell_double_quoted(boot['grub_cmdline_linux'])}",
            "",
        ]
    )


def machine_id(root: str | Path) -> str:
    path = root_path(root, MACHINE_ID)
    text = path.read_text(encoding="ascii").strip() if path.is_file() else ""
    return text or DEFAULT_MACHINE_ID


def root_uuid(root: str | Path, profile: dict[str, Any] | None) -> str:
    return profile["boot"]["root_uuid"] if profile else DEFAULT_ROOT_UUID


def generate_grub_cfg(root: str | Path, profile: dict[str, Any] | None) -> tuple[str, list[str]]:
    """(grub.cfg text, kernel versions found); raises GrubConfigError like grub-mkconfig."""
    settings = read_grub_settings(root)
    versions = linux_versions(root)
    ubuntu = profile is not None and profile["boot"]["distribution"] == "ubuntu"
    render = render_ubuntu_grub_cfg if ubuntu else render_grub_cfg
    return render(settings, versions, root_uuid(root, profile)), versions


def install_boot_config(root: str | Path, profile: dict[str, Any]) -> list[str]:
    """What the OS installer leaves: kernel files, /etc/default/grub, grub.cfg or BLS entry.

    Returns the files written (relative to root).
    """
    version = profile["boot"]["kernel_version"]
    written: list[str] = []
    for relative in (f"boot/vmlinuz-{version}", f"boot/initrd.img-{version}"):
        path = root_path(root, relative)
        if not path.exists():
            write_atomically(path, b"")
            written.append(relative)
    write_atomically(root_path(root, DEFAULT_GRUB), render_default_grub(profile))
    written.append(DEFAULT_GRUB)
    if profile["os_family"] == "RedHat":
        written += install_bls(root, profile)
    else:
        text, _ = generate_grub_cfg(root, profile)
        write_atomically(root_path(root, GRUB_CFG), text)
        written.append(GRUB_CFG)
    return written


def redhat_release(profile: dict[str, Any]) -> int:
    """8 for an el8 kernel (RHEL 8's boot layout), else 9."""
    return 8 if ".el8" in profile["boot"]["kernel_version"] else 9


def install_bls(root: str | Path, profile: dict[str, Any]) -> list[str]:
    """The BLS entry and grubenv the RHEL installer leaves (relative paths written).

    RHEL 8 (UEFI): the entry says ``options $kernelopts`` and grubenv, on the EFI system
    partition with /boot/grub2/grubenv a relative link to it, holds kernelopts. RHEL 9:
    the entry has literal options, and /etc/kernel/cmdline holds them for new kernels.
    """
    version = profile["boot"]["kernel_version"]
    entry_id = f"{machine_id(root)}-{version}"
    cmdline = " ".join(tokenize_cmdline(profile_cmdline(profile)))
    rhel8 = redhat_release(profile) == 8
    entry = BlsEntry(
        entry_id,
        {
            "title": f"Red Hat Enterprise Linux ({version})",
            "version": version,
            "linux": f"/vmlinuz-{version}",
            "initrd": f"/initramfs-{version}.img",
            "options": "$kernelopts" if rhel8 else cmdline,
            "grub_users": "$grub_users",
            "grub_arg": "--unrestricted",
            "grub_class": "kernel",
        },
    )
    write_bls_entry(root, entry)
    written = [f"{BLS_ENTRIES}/{entry_id}.conf"]
    if rhel8:
        link = root_path(root, GRUBENV_PATHS[0])
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(EFI_GRUBENV_LINK)
        write_grubenv(root, EFI_GRUBENV, {"saved_entry": entry_id, "kernelopts": cmdline})
        return [*written, EFI_GRUBENV, GRUBENV_PATHS[0]]
    write_grubenv(root, GRUBENV_PATHS[0], {"saved_entry": entry_id})
    write_atomically(root_path(root, KERNEL_CMDLINE), cmdline + "\n")
    return [*written, GRUBENV_PATHS[0], KERNEL_CMDLINE]
