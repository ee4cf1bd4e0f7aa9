#!/usr/bin/env python3
"""A raw MCP server whose every word drives a terminal: what the ``lovia-mcp`` command must escape.

:data:`HOSTILE` sets the window title (OSC ... BEL), clears the screen (CSI
2J), goes back to the line's start and draws a fake prompt (``\\r``), colours
with a C1 CSI (U+009B), backspaces over text, sends DEL, resets the terminal
(ESC c) and reverses the text's direction (U+202E). It is in the tool's name,
description, title, parameter name, type, description and default, in the
results (text, an image's MIME type, a resource link's URI, structured
content), in the server's stderr lines and in its JSON-RPC error message.

Tools:

- ``HOSTILE``-named tool: listed only (its visible name is made safe).
- ``show``: one result of every kind, each carrying ``HOSTILE``.
- ``refuse``: a JSON-RPC error whose message is ``HOSTILE``.
- ``chatty``: two ``HOSTILE`` stderr lines, then an answer (``-v`` shows them).
- ``crash``: two ``HOSTILE`` stderr lines, then exits with code 3 mid-call.

``--die-at-start``: writes ``HOSTILE`` to stderr and exits before the
handshake (an open error with the stderr tail in its hint).
"""

from __future__ import annotations

import os
import sys

from rawloop import error, result, serve, tool

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[H\r$ sudo true \x9b31mred\x9b0m\x08\x08\x7f\x1bc\u202eevil"

if "--die-at-start" in sys.argv[1:]:
    sys.stderr.write(f"starting {HOSTILE}\n")
    sys.stderr.flush()
    os._exit(1)

TOOLS = [
    tool(
        f"vet{HOSTILE}",
        f"Lists {HOSTILE} only.",
        {
            f"q{HOSTILE}": {"type": f"string{HOSTILE}", "description": HOSTILE, "default": HOSTILE},
        },
        annotations={"title": HOSTILE},
    ),
    tool("show", f"Every kind of result, {HOSTILE} in each."),
    tool("refuse", "A JSON-RPC error."),
    tool("chatty", "Stderr lines, then an answer."),
    tool("crash", "Stderr lines, then exit 3."),
]


def stderr_lines() -> None:
    sys.stderr.write(f"first {HOSTILE}\nsecond {HOSTILE}\n")
    sys.stderr.flush()


def call(rid: object, name: str, args: dict[str, object]) -> None:
    if name == "show":
        result(
            rid,
            {
                "content": [
                    {"type": "text", "text": f"text {HOSTILE}\n\tsecond line"},
                    {"type": "image", "data": "aGk=", "mimeType": f"image/png{HOSTILE}"},
                    {"type": "resource_link", "uri": f"file:///{HOSTILE}", "name": HOSTILE},
                ],
                "structuredContent": {"k": HOSTILE},
            },
        )
    elif name == "refuse":
        error(rid, -32000, f"refused {HOSTILE}")
    elif name == "chatty":
        stderr_lines()
        result(rid, {"content": [{"type": "text", "text": "done"}]})
    elif name == "crash":
        stderr_lines()
        os._exit(3)
    else:
        error(rid, -32602, f"unknown tool {name}")


serve("ansi", TOOLS, call)
