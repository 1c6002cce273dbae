"""``/proc/cmdline``: the running kernel's parameters in order, BOOT_IMAGE apart."""

from __future__ import annotations

from ..cmdline import parse_word, split_words
from ._common import ParseError, require_text

KIND = "cmdline"
EXPECTED = "the content of /proc/cmdline (one line)"


def parse_cmdline(text: str) -> dict:
    lines = [line for line in require_text(text, KIND, EXPECTED) if line.strip()]
    if len(lines) > 1:
        raise ParseError(
            f"{KIND}: the input has {len(lines)} non-empty lines; /proc/cmdline holds one. "
            f"Expected {EXPECTED}."
        )
    words = split_words(lines[0])
    boot_image = None
    params: list[dict[str, str | None]] = []
    init_args: list[str] = []
    for position, word in enumerate(words):
        if word == "--":
            init_args = words[position + 1 :]
            break
        param = parse_word(word)
        if param.name == "BOOT_IMAGE" and boot_image is None:
            boot_image = param.value
            continue
        params.append({"name": param.name, "value": param.value})
    return {"boot_image": boot_image, "params": params, "init_args": init_args}
