"""vcpulab.text: the one sanitiser of what vcpulab prints."""

from __future__ import annotations

import io
import json

from rich.table import Table
from rich.text import Text

from vcpulab.text import SafeConsole, json_text, one_line, printable


def test_printable_escapes_what_would_act_on_a_terminal_or_fail_to_encode() -> None:
    assert printable("plain δη ✓") == "plain δη ✓"
    assert printable("e\x1b[31m\x07\x7f\x9b") == "e\\x1b[31m\\x07\\x7f\\x9b"
    assert printable("a\u202eb\u2066c") == "a\\u202eb\\u2066c"
    assert printable("st\udcffore") == "st\\xffore"  # a file name's byte that is not UTF-8
    assert printable("x\ud801") == "x\\ud801"
    assert printable("two\nlines\tand a tab") == "two\nlines\tand a tab"
    assert printable(printable("e\x1b")) == printable("e\x1b")  # idempotent


def test_one_line_joins_lines_and_escapes_tabs() -> None:
    assert one_line("first\n\n  second\tpart \n") == "first; second\\x09part"
    assert one_line("") == "unknown error"


def test_json_text_is_strict_json_any_stream_can_encode() -> None:
    text = json_text({"n": float("nan"), "i": [float("inf"), -float("inf"), 1.5], "s": "st\udcffore", "t": (1,)})
    text.encode("utf-8")  # no lone surrogate left

    def strict(constant: str) -> None:
        raise AssertionError(constant)

    assert json.loads(text, parse_constant=strict) == {"n": None, "i": [None, None, 1.5], "s": "st\udcffore", "t": [1]}
    assert json_text({"δ": "✓"}) == '{"δ": "✓"}'  # other text as it is


def _render(*objects: object) -> str:
    out = io.StringIO()
    console = SafeConsole(file=out, width=80, color_system=None)
    console.print(*objects)
    return out.getvalue()


def test_the_console_prints_markup_as_written_and_escapes_control_characters() -> None:
    assert _render("[red]x[/red] [/x]") == "[red]x[/red] [/x]\n"
    table = Table("workload")
    table.add_row("e\x1b[31mvil")
    table.add_row(Text("t\x1b[0m", style="bold"))
    table.add_row("[bold]b[/bold]")
    shown = _render(table)
    assert "\x1b" not in shown
    assert "e\\x1b[31mvil" in shown and "t\\x1b[0m" in shown and "[bold]b[/bold]" in shown
