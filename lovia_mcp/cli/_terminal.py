"""What a server chose, made safe to print on a terminal.

A tool's name, description and parameters, a call's result, the server's
stderr and the error messages it sends are the server's own words, and the
``lovia-mcp`` command is what a user runs to vet a server they do not trust
yet. Printed raw, a hostile server's words drive the terminal: ``ESC ] 0 ;
... BEL`` sets the window title, ``ESC [ 2 J`` clears the screen, ``\\r`` or
backspaces go back over a line and a fake prompt is drawn in its place. So
every character that moves the cursor or sets terminal state is printed as
a visible escape (``\\x1b``, ``\\r``, ``\\u009b``): the user sees that it was
there, and the terminal does nothing.

Escaped: the C0 controls (ESC, BEL, backspace, ``\\r``... but ``\\n``, and
``\\t`` in a block of text, which the layout wants), DEL, the C1 controls
U+0080 to U+009F (a UTF-8 terminal may take U+009B for CSI), the
bidirectional embeddings, overrides and isolates (U+202A to U+202E, U+2066
to U+2069: they reorder what is shown, so a description could read
otherwise than it is), and lone surrogates (no character at all; printed
raw, they fail the write).

JSON output (``--json``) stays valid JSON with the same values: the encoder
already escapes C0; the rest are written as ``\\uXXXX`` escapes.

Non-goals: telling printable from not in general (``str.isprintable`` would
escape the zero-width joiner inside emoji and every no-break space); text
the user typed (options, a config file) is escaped where it shares a line
with a server's, never specially.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final

# The C0 controls, DEL and the C1 controls.
_CONTROLS: Final = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
# Bidirectional embeddings, overrides and isolates (the "Trojan Source" set).
_BIDI: Final = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_SURROGATES: Final = range(0xD800, 0xE000)
# Escapes people read at a glance; any other control is \xNN.
_NAMED: Final = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def _shown(code: int) -> str:
    if code in _NAMED:
        return _NAMED[code]
    # \xNN for what is one byte on the wire (C0, DEL); a C1 control is a
    # code point sent as two UTF-8 bytes, so it reads as one: \u009b.
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


# One line (a table cell, a status line): every control escaped, \n and \t too.
_LINE: Final = {code: _shown(code) for code in (*_CONTROLS, *_BIDI, *_SURROGATES)}
# A block of text (a result, an error with its hint and stderr lines): lines and tabs kept.
_BLOCK: Final = {code: text for code, text in _LINE.items() if code not in (0x09, 0x0A)}
# JSON text from json.dumps(ensure_ascii=False): C0 is escaped already (and the
# newlines of its indentation are layout); the rest as JSON's own \uXXXX.
_JSON: Final = {code: f"\\u{code:04x}" for code in _LINE if code >= 0x7F}


def terminal_line(text: str) -> str:
    """``text`` for one line of a terminal: every control character shown as an escape."""
    return text.translate(_LINE)


def terminal_block(text: str) -> str:
    """``text`` for a terminal, its newlines and tabs kept and every other control shown as an escape."""
    return text.translate(_BLOCK)


def terminal_json(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON that a terminal shows as it is (no control character in it); one line without ``indent``."""
    return json.dumps(value, indent=indent, ensure_ascii=False).translate(_JSON)


class TerminalFormatter(logging.Formatter):
    """A log formatter whose lines (a server's stderr among them) are safe for a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal_block(super().format(record))


__all__ = ["TerminalFormatter", "terminal_block", "terminal_json", "terminal_line"]
