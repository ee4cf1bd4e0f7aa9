"""Find a JSON-RPC message's top-level ``id`` without parsing the message.

Two places need the id of a line that cannot be decoded whole: a reply over
``max_result_bytes`` (dropped as it streams past, never held), and a reply
msgspec rejects (nested too deeply, a bad escape). Either must still answer
the request it belongs to, so the id has to be the *top-level* one, wherever
the server put it: the TypeScript SDK writes ``{"result": ..., "jsonrpc":
"2.0", "id": 3}``, and a result may hold an ``"id"`` of its own earlier in
the line.

:class:`IdScanner` is fed the line in pieces, keeps only a few bytes of
state (nesting depth, whether it is inside a string), and skips string
bodies and nested values with regular expressions, so a 32 MB line costs
milliseconds, not a Python step per byte. It is not a validator: it stops
at the first top-level ``id`` it finds, or as soon as the input cannot be a
JSON object.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

# Inside a string: everything up to the closing quote, escapes included.
_STRING_BODY: Final = re.compile(rb'(?:[^"\\]++|\\.)*+', re.S)
# Inside a nested value: the next byte that changes depth or opens a string.
_STRUCTURAL: Final = re.compile(rb'["{}\[\]]')
_SPACE: Final = re.compile(rb"[ \t\r\n]*+")
# A scalar value at the top level runs to the next comma, brace or space.
_SCALAR_END: Final = re.compile(rb"[,}\] \t\r\n]")
# Longest top-level key kept (only "id" matters) and longest id value kept.
_KEY_MAX: Final = 8
_ID_MAX: Final = 256

# Scanner phases.
_START, _KEY, _KEY_STRING, _COLON, _VALUE, _ID_VALUE, _AFTER, _NESTED, _STRING = range(9)

_MISSING: Final = object()


class IdScanner:
    """Streams over one line; :attr:`found` / :attr:`hopeless` say when to stop feeding.

    ``id`` is the top-level id once :attr:`found` (an ``int``, ``str`` or
    ``None`` for ``"id": null``). :attr:`hopeless` means no top-level id can
    follow: the input is not an object, or (:attr:`ended`) the object closed
    without one.
    """

    __slots__ = (
        "id",
        "found",
        "hopeless",
        "ended",
        "_phase",
        "_depth",
        "_key",
        "_is_id",
        "_value",
        "_escape",
        "_string_return",
    )

    def __init__(self) -> None:
        self.id: int | str | None = None
        self.found = False
        self.hopeless = False
        self.ended = False  # hopeless because the object closed (a well-formed message without an id)
        self._phase = _START
        self._depth = 0  # nesting inside a top-level value
        self._key = b""
        self._is_id = False
        self._value = b""
        self._escape = False  # a string's backslash was the last byte fed
        self._string_return = _AFTER  # the phase after the current string

    @property
    def done(self) -> bool:
        return self.found or self.hopeless

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        # Scanned in place (regular expressions take any buffer): a copy of a
        # cap-sized line would double the worker's memory at the worst moment.
        buf: Any = data
        pos, end = 0, len(buf)
        while pos < end and not self.done:
            pos = self._step(buf, pos, end)

    def _step(self, buf: Any, pos: int, end: int) -> int:
        phase = self._phase
        if phase in (_STRING, _KEY_STRING):
            return self._in_string(buf, pos, end)
        if phase == _NESTED:
            m = _STRUCTURAL.search(buf, pos)
            if m is None:
                return end
            c = buf[m.start()]
            pos = m.end()
            if c == 0x22:  # '"'
                self._enter_string(_NESTED)
            elif c in (0x7B, 0x5B):  # '{' '['
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    self._phase = _AFTER
            return pos
        if phase == _ID_VALUE:
            m = _SCALAR_END.search(buf, pos)
            stop = end if m is None else m.start()
            self._value += bytes(buf[pos : min(stop, pos + _ID_MAX + 1)])
            if len(self._value) > _ID_MAX:
                self.hopeless = True
            elif m is not None:
                self._finish_scalar_id()
            return stop
        pos = _SPACE.match(buf, pos).end()  # type: ignore[union-attr]
        if pos >= end:
            return end
        c = buf[pos]
        if phase == _START:
            if c != 0x7B:  # '{'
                self.hopeless = True
            self._phase = _KEY
            return pos + 1
        if phase == _KEY:
            if c == 0x22:
                self._key = b""
                self._phase = _KEY_STRING
                return pos + 1
            self.hopeless = True  # '}' (closed without an id) or not JSON
            self.ended = c == 0x7D
            return pos
        if phase == _COLON:
            if c != 0x3A:  # ':'
                self.hopeless = True
            self._phase = _VALUE
            return pos + 1
        if phase == _VALUE:
            if self._is_id:
                if c == 0x22:
                    self._value = b""
                    self._enter_string(_AFTER)
                    return pos + 1
                self._value = b""
                self._phase = _ID_VALUE
                return pos
            if c == 0x22:
                self._enter_string(_AFTER)
                return pos + 1
            if c in (0x7B, 0x5B):
                self._depth = 1
                self._phase = _NESTED
                return pos + 1
            m = _SCALAR_END.search(buf, pos)
            if m is None:
                return end  # a scalar split across pieces: its end comes next
            self._phase = _AFTER
            return m.start()
        # _AFTER: a comma (next key) or the object's end.
        if c == 0x2C:  # ','
            self._phase = _KEY
            return pos + 1
        self.hopeless = True  # '}' without an id, or not JSON
        self.ended = c == 0x7D
        return pos

    def _enter_string(self, then: int) -> None:
        self._string_return = then
        self._phase = _STRING

    def _in_string(self, buf: Any, pos: int, end: int) -> int:
        start = pos
        if self._escape:
            self._escape = False
            pos += 1  # the escaped byte (never a closing quote)
            if pos > end:
                return end
        m = _STRING_BODY.match(buf, pos)
        assert m is not None  # the pattern matches the empty string
        stop = m.end()
        capture = self._phase == _KEY_STRING or (self._is_id and self._string_return == _AFTER and self._depth == 0)
        if stop < end and buf[stop] == 0x5C:  # a backslash as the last byte
            self._escape = True
            if capture:
                self._keep(buf[start:end])
            return end
        if stop >= end:
            if capture:
                self._keep(buf[start:end])
            return end
        # buf[stop] is the closing quote.
        if capture:
            self._keep(buf[start:stop])
        if self._phase == _KEY_STRING:
            self._is_id = self._key == b"id"
            self._phase = _COLON
        elif capture:
            self._finish_string_id()
        else:
            self._phase = self._string_return
        return stop + 1

    def _keep(self, piece: Any) -> None:
        if self._phase == _KEY_STRING:
            self._key = (self._key + bytes(piece[: _KEY_MAX + 1]))[: _KEY_MAX + 1]
        else:
            self._value += bytes(piece[: _ID_MAX + 1])
            if len(self._value) > _ID_MAX:
                self.hopeless = True

    def _finish_string_id(self) -> None:
        try:
            value = msgspec.json.decode(b'"' + self._value + b'"')
        except (msgspec.DecodeError, UnicodeDecodeError):
            self.hopeless = True
            return
        self.id = value if isinstance(value, str) else None
        self.found = True

    def _finish_scalar_id(self) -> None:
        try:
            value = msgspec.json.decode(self._value)
        except msgspec.DecodeError:
            self.hopeless = True
            return
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            self.id = value
            self.found = True
        else:
            self.hopeless = True


def top_level_id(line: bytes | bytearray | memoryview) -> object:
    """The top-level ``id`` of a whole line, or :data:`MISSING` when it has none."""
    scanner = IdScanner()
    scanner.feed(line)
    return scanner.id if scanner.found else _MISSING


MISSING: Final = _MISSING

# A \uD800-\uDBFF escape not followed by a low one, or a \uDC00-\uDFFF escape not
# preceded by a high one; the lookbehind makes sure the backslash is not itself escaped.
_LONE_SURROGATE: Final = re.compile(
    rb"(?<!\\)((?:\\\\)*)(?:\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2})"
)


def repair_surrogates(line: bytes) -> bytes:
    """Replace lone UTF-16 surrogate escapes with ``\\ufffd``.

    Python's ``json`` accepts ``"\\ud800"`` and makes a string no UTF-8
    encoder can write; msgspec refuses the whole message. Servers that cut a
    string between the two halves of an emoji send exactly that, so the
    escape is replaced the way a lenient decoder would, and the rest of the
    reply survives.
    """
    if b"\\u" not in line:
        return line
    return _LONE_SURROGATE.sub(rb"\1\\ufffd", line)


__all__ = ["MISSING", "IdScanner", "repair_surrogates", "top_level_id"]
