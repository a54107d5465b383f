"""Text that is safe to print: every string vcpulab shows (a table cell, an error line, a
progress label) passes through :func:`printable`, so a value from a spec, a store or the
command line can neither act on the terminal nor fail to encode.

- Control characters (C0 but newline and tab, DEL, C1) and the bidirectional overrides and
  isolates are shown escaped (``\\x1b``, ``\\u202e``): printed raw, they would move the cursor,
  recolour the terminal or reorder the line.
- Lone surrogates, which Python uses for the bytes of a file name or argument that are not
  UTF-8 (``'st\\udcffore'`` for ``b'st\\xffore'``), are shown as the byte they stand for
  (``\\xff``): printed raw, they raise UnicodeEncodeError.
- Rich markup in data (``[red]``, ``[/x]``) is shown as written: the consoles of
  :func:`console` do not parse markup.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from typing import IO, Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.text import Text

# What printable() escapes; newline and tab are kept (multi-line messages, tables).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the byte that was not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object) -> str:
    """``str(value)`` with the characters that must not reach a terminal escaped."""
    text = str(value)
    return _UNPRINTABLE.sub(_escape, text) if _UNPRINTABLE.search(text) else text


def one_line(message: object) -> str:
    """``message`` as one printable line: its lines joined with "; ", tabs and control
    characters escaped (``\\x00``, ``\\x1b``, ``\\u202e``, ``\\xff`` for a byte that is not UTF-8)."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return printable("; ".join(lines)).replace("\t", "\\x09") or "unknown error"


class SafeConsole(Console):
    """A rich Console that never interprets markup and escapes what :func:`printable` escapes,
    in every string and Text it renders (table cells and titles included)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        kwargs.setdefault("emoji", False)
        super().__init__(**kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        kwargs["markup"] = False
        kwargs["emoji"] = False
        return super().render_str(printable(text), **kwargs)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Any:
        if isinstance(renderable, Text) and _UNPRINTABLE.search(renderable.plain):
            # Built from data with something unprintable in it: its escaped form (the styles of
            # its parts go; the whole Text's style stays).
            renderable = Text(
                printable(renderable.plain),
                style=renderable.style,
                justify=renderable.justify,
                overflow=renderable.overflow,
                no_wrap=renderable.no_wrap,
                end=renderable.end,
            )
        segments: Any = super().render(renderable, options)
        return segments


def console(stderr: bool = False, file: IO[str] | None = None, **kwargs: Any) -> SafeConsole:
    """A :class:`SafeConsole` on stdout (or stderr); when that is not a terminal, wide enough
    not to squeeze tables."""
    stream = file or (sys.stderr if stderr else sys.stdout)
    wide = stream is not None and not stream.isatty()
    if wide and "COLUMNS" not in os.environ:
        kwargs.setdefault("width", 200)
    return SafeConsole(stderr=stderr, file=file, **kwargs)


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite (NaN, ±inf) as None, in lists and dicts too."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def json_text(value: Any, **kwargs: Any) -> str:
    """``value`` as JSON that any reader takes and any stream can encode: a float that is not
    finite is ``null`` (``NaN`` and ``Infinity`` are not JSON), a lone surrogate (a byte that
    was not UTF-8) is its ``\\udcXX`` escape, other text is written as it is
    (``ensure_ascii=False``). ``kwargs`` as for :func:`json.dumps` (``indent``, ``default``)."""
    text = json.dumps(_finite(value), ensure_ascii=False, allow_nan=False, **kwargs)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
