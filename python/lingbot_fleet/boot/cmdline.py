"""Kernel command-line parameters: tokenizer, policy and comparison.

Stdlib-only: this module also runs on nodes (shipped as
``ansible.module_utils.lingbot_fleet.boot.cmdline``).

Terms used everywhere:

* a *parameter* is one whitespace-separated word of the kernel command line,
  ``name`` or ``name=value``; the value may itself contain ``=`` and commas
  (``pci=realloc=off``) and double quotes (``dyndbg="file x.c +p"``);
* a *policy* says which parameters must be present (with a value, or as a bare
  flag) and which must be absent (a name, or one ``name=value``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# Parameters whose value is a comma-separated list of options that the kernel applies
# one by one. For these, "absent pci=noacpi" removes only the "noacpi" option from
# "pci=noacpi,realloc", and "present iommu=pt" is satisfied by "iommu=pt,..." too.
COMMA_LIST_PARAMS = frozenset({"pci", "iommu", "intel_iommu", "amd_iommu"})

_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")
_FORBIDDEN_VALUE_CHARS = frozenset(" \t\r\n\"'$`\\;#")


class PolicyError(ValueError):
    """A kernel command-line policy that cannot be applied as written."""


@dataclass(frozen=True)
class KernelParam:
    """One parameter: ``name`` alone (value None) or ``name=value``."""

    name: str
    value: str | None = None

    @property
    def key(self) -> str:
        """The name as the kernel compares it: dashes and underscores are equal."""
        return normalize_name(self.name)

    @property
    def options(self) -> tuple[str, ...]:
        """The comma-separated options of a list parameter (else the whole value)."""
        if self.value is None:
            return ()
        if self.key in COMMA_LIST_PARAMS:
            return tuple(option for option in self.value.split(",") if option)
        return (self.value,)

    def render(self) -> str:
        return self.name if self.value is None else f"{self.name}={self.value}"

    def __str__(self) -> str:
        return self.render()


def normalize_name(name: str) -> str:
    return name.replace("-", "_")


def split_words(cmdline: str) -> list[str]:
    """Split a command line into words the way the kernel does.

    Whitespace separates words except inside double quotes; the quotes stay part of
    the word (``a="x y"`` is one word). An unterminated quote runs to the end.
    """
    words: list[str] = []
    current: list[str] = []
    in_quotes = False
    for char in cmdline:
        if char == '"':
            in_quotes = not in_quotes
            current.append(char)
        elif char.isspace() and not in_quotes:
            if current:
                words.append("".join(current))
                current = []
        else:
            current.append(char)
    if current:
        words.append("".join(current))
    return words


def parse_word(word: str) -> KernelParam:
    name, sep, value = word.partition("=")
    return KernelParam(name=name, value=value if sep else None)


def parse_cmdline(cmdline: str) -> list[KernelParam]:
    """Parameters of a command line, in order, repeats kept; stops at ``--``.

    Words after ``--`` belong to init, not to the kernel.
    """
    params: list[KernelParam] = []
    for word in split_words(cmdline):
        if word == "--":
            break
        params.append(parse_word(word))
    return params


def render_cmdline(params: Iterable[KernelParam]) -> str:
    return " ".join(param.render() for param in params)


@dataclass(frozen=True)
class CmdlinePolicy:
    """What the command line must hold (``present``) and must not hold (``absent``).

    ``present`` maps a name to its required value, None for a bare flag.
    ``absent`` holds names (every occurrence is unwanted) or ``name=value`` (only
    that value, or that option of a comma-list parameter, is unwanted).
    """

    present: tuple[KernelParam, ...] = ()
    absent: tuple[KernelParam, ...] = ()


def validate_param(param: KernelParam, where: str) -> None:
    if not _NAME_RE.match(param.name):
        raise PolicyError(
            f"{where}: malformed kernel parameter name {param.name!r}; a name is letters, "
            "digits, '_', '-' and '.', starting with a letter, digit or '_'. Fix the name "
            "in the policy."
        )
    if param.value is None:
        return
    if param.value == "":
        raise PolicyError(
            f"{where}: kernel parameter {param.name!r} has an empty value; write the bare "
            f"name ({param.name}) for a flag, or give a value."
        )
    bad = sorted(
        {
            c
            for c in param.value
            if c in _FORBIDDEN_VALUE_CHARS or c.isspace() or not c.isprintable()
        }
    )
    if bad:
        raise PolicyError(
            f"{where}: value of kernel parameter {param.name!r} ({param.value!r}) contains "
            f"{', '.join(repr(c) for c in bad)}; values must not contain whitespace, quotes, "
            "'$', '`', '\\\\', ';' or '#'. Fix the value in the policy."
        )


def _parse_absent_entry(entry: str) -> KernelParam:
    entry = entry.strip()
    param = parse_word(entry)
    validate_param(param, "absent")
    return param


def build_policy(
    present: Mapping[str, str | None] | None, absent: Sequence[str] | None
) -> CmdlinePolicy:
    """Validate a policy from inventory data and return it.

    Raises PolicyError naming the parameter and the fix for a malformed parameter, a
    parameter asked to be both present and absent, or a name given twice.
    """
    if present is not None and not isinstance(present, Mapping):
        raise PolicyError(
            f"present is {present!r}, not a mapping; give the parameters as name: value "
            "(a null value for a bare flag), e.g. {iommu: pt, quiet: null}"
        )
    if absent is not None and (isinstance(absent, str) or not isinstance(absent, Sequence)):
        raise PolicyError(
            f"absent is {absent!r}, not a list; give the parameters to remove as a list, "
            "e.g. [pci=noacpi]"
        )
    present_params: list[KernelParam] = []
    seen_keys: dict[str, str] = {}
    for name, raw_value in (present or {}).items():
        if isinstance(raw_value, bool) or not isinstance(raw_value, str | int | None):
            raise PolicyError(
                f"present: kernel parameter {name!r} has the value {raw_value!r}, not a "
                "string (YAML reads on, off, yes and no as booleans); quote it, e.g. "
                f'{name}: "on"'
            )
        value = None if raw_value is None else str(raw_value)
        if value is not None and value.strip() != value:
            raise PolicyError(
                f"present: value of kernel parameter {name!r} ({value!r}) has surrounding "
                "whitespace; remove it."
            )
        param = KernelParam(name=str(name), value=value)
        validate_param(param, "present")
        if param.key in seen_keys:
            raise PolicyError(
                f"present: kernel parameter {name!r} is given twice (also as "
                f"{seen_keys[param.key]!r}); keep one."
            )
        seen_keys[param.key] = param.name
        present_params.append(param)
    for position, entry in enumerate(absent or []):
        if not isinstance(entry, str):
            raise PolicyError(
                f"absent[{position}] is {entry!r}, not a string; give each parameter to "
                "remove as name or name=value"
            )
    absent_params = [_parse_absent_entry(entry) for entry in (absent or [])]
    for unwanted in absent_params:
        for wanted in present_params:
            if unwanted.key == wanted.key and _absent_covers(unwanted, wanted):
                raise PolicyError(
                    f"kernel parameter {unwanted.render()!r} is asked to be absent while "
                    f"{wanted.render()!r} is asked to be present; remove it from one of "
                    "the two lists."
                )
    return CmdlinePolicy(present=tuple(present_params), absent=tuple(absent_params))


def _absent_covers(unwanted: KernelParam, wanted: KernelParam) -> bool:
    """Whether removing ``unwanted`` would remove (part of) ``wanted``."""
    if unwanted.value is None:
        return True
    if wanted.value is None:
        return False
    if unwanted.key in COMMA_LIST_PARAMS:
        return bool(set(unwanted.options) & set(wanted.options))
    return unwanted.value == wanted.value


def strip_unwanted(param: KernelParam, absent: Iterable[KernelParam]) -> KernelParam | None:
    """``param`` with every unwanted part removed: None when nothing of it remains.

    ``absent pci=noacpi`` turns ``pci=noacpi,realloc`` into ``pci=realloc`` and drops
    ``pci=noacpi``; ``absent pci`` drops every ``pci=...``.
    """
    current: KernelParam | None = param
    for unwanted in absent:
        if current is None:
            return None
        if unwanted.key != current.key:
            continue
        if unwanted.value is None or current.value == unwanted.value:
            return None
        if current.value is None or current.key not in COMMA_LIST_PARAMS:
            continue
        remove = set(unwanted.options)
        kept = [option for option in current.value.split(",") if option not in remove]
        if len(kept) == len(current.value.split(",")):
            continue
        if not [option for option in kept if option]:
            return None
        current = KernelParam(name=current.name, value=",".join(kept))
    return current


def is_unwanted(param: KernelParam, absent: Iterable[KernelParam]) -> bool:
    return strip_unwanted(param, absent) != param


def satisfies(params: Sequence[KernelParam], wanted: KernelParam) -> bool:
    """Whether ``params`` hold ``wanted`` in effect.

    A plain parameter counts as its last occurrence (the kernel's last one wins). A
    comma-list parameter is satisfied when each wanted option appears in some
    occurrence.
    """
    same = [param for param in params if param.key == wanted.key]
    if not same:
        return False
    if wanted.key in COMMA_LIST_PARAMS and wanted.value is not None:
        have = {option for param in same for option in param.options}
        return set(wanted.options) <= have
    return same[-1].value == wanted.value


@dataclass(frozen=True)
class PolicyReport:
    """How a command line stands against a policy."""

    missing: tuple[KernelParam, ...]
    unwanted: tuple[KernelParam, ...]

    @property
    def compliant(self) -> bool:
        return not self.missing and not self.unwanted


def check_policy(params: Sequence[KernelParam], policy: CmdlinePolicy) -> PolicyReport:
    """Compare a parsed command line (e.g. /proc/cmdline) with a policy."""
    missing = tuple(wanted for wanted in policy.present if not satisfies(params, wanted))
    unwanted = tuple(param for param in params if is_unwanted(param, policy.absent))
    return PolicyReport(missing=missing, unwanted=unwanted)


def follow_policy(cmdline: str, policy: CmdlinePolicy) -> str:
    """A command line (``/etc/kernel/cmdline``, ``kernelopts``) made to follow ``policy``.

    Unwanted parameters are dropped (or lose their unwanted options), a present parameter
    that is not a comma list loses the occurrences with another value, and the missing
    present parameters are appended. Every other word is kept as written, in its order.
    """
    plain = {p.key: p for p in policy.present if p.key not in COMMA_LIST_PARAMS}
    kept: list[str] = []
    params: list[KernelParam] = []
    for word in split_words(cmdline):
        param = parse_word(word)
        stripped = strip_unwanted(param, policy.absent)
        wanted = plain.get(param.key)
        if stripped is None or (wanted is not None and stripped.value != wanted.value):
            continue
        kept.append(word if stripped == param else stripped.render())
        params.append(stripped)
    kept += [wanted.render() for wanted in policy.present if not satisfies(params, wanted)]
    return " ".join(kept)


def iommu_vendor_switch(cpu_vendor_id: str) -> KernelParam:
    """The IOMMU switch for a CPU vendor as /proc/cpuinfo names it (vendor_id)."""
    if cpu_vendor_id == "GenuineIntel":
        return KernelParam("intel_iommu", "on")
    if cpu_vendor_id in ("AuthenticAMD", "HygonGenuine"):
        return KernelParam("amd_iommu", "on")
    raise PolicyError(
        f"unknown CPU vendor {cpu_vendor_id!r} in /proc/cpuinfo; the IOMMU switch is "
        "known for GenuineIntel and AuthenticAMD. Turn the vendor switch off and set "
        "the parameter in the present list instead."
    )


def cpu_vendor_from_cpuinfo(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "vendor_id":
            return value.strip()
    raise PolicyError(
        "no vendor_id line in /proc/cpuinfo; turn the IOMMU vendor switch off and set "
        "intel_iommu=on or amd_iommu=on in the present list instead."
    )


# --- comparing two command lines ---------------------------------------------------------

BOOT_IMAGE_PREFIX = "BOOT_IMAGE="


def effective_words(words: Iterable[str]) -> tuple[str, ...]:
    """The words of a command line in a form that compares equal when the kernel gets
    the same from two command lines.

    ``BOOT_IMAGE=`` is left out (grub adds it from the image path, which it may spell with
    a device). The kernel hands each parameter its occurrences in order, so only the order
    of one name's occurrences counts (the last value wins, ``console=`` order matters):
    parameters are sorted by name, keeping that order, and a word repeated keeps its last
    place. Words after ``--`` belong to init and keep theirs.
    """
    kernel: list[str] = []
    init: list[str] = []
    target = kernel
    for word in words:
        if word == "--" and target is kernel:
            target = init
            continue
        target.append(word)
    kernel = [word for word in kernel if not word.startswith(BOOT_IMAGE_PREFIX)]
    last = {word: index for index, word in enumerate(kernel)}
    kept = [word for index, word in enumerate(kernel) if last[word] == index]
    kept.sort(key=lambda word: parse_word(word).key)
    return tuple(kept + (["--", *init] if init else []))


def same_effect(first: Iterable[str], second: Iterable[str]) -> bool:
    """Whether two command lines (as words) give the kernel the same parameters."""
    return effective_words(first) == effective_words(second)
