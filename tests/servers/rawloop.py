"""The plain stdio JSON-RPC loop the raw test servers share: standard library only.

A raw server is a script started as ``python tests/servers/x.py``, so this
folder is ``sys.path[0]`` and ``import rawloop`` finds this file; a sandboxed
server can read it too, since the sandboxes grant a script's own folder.

What is shared is only what every raw server does the same way: one JSON
object per line each way, the ``initialize`` answer, ``tools/list``,
``ping``, an error for a method it does not know, and the helpers that write
an answer. Each server passes :func:`serve` its tools and its ``call``, which
keeps the server's point (a call that wedges, floods, crashes or answers
oddly); a server whose loop itself is the point (``hostile_server.py``: id
types, key order, requests read back mid-call) keeps its own.

Writes are whole lines under a lock, so a server that serves calls on
threads never interleaves two messages. Reads are bytes (``json`` decodes
UTF-8 itself), so a non-ASCII tool name arrives whatever the locale.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable

# Annotations say ``object`` where ``typing.Any`` would do: importing typing
# would add about 2 ms to every raw server's start (they start in ~20 ms).
JSON = dict[str, object]

_out = threading.Lock()
# Raw UTF-8 instead of \u escapes on the way out (serve(utf8=True)).
_utf8 = [False]


def send(obj: JSON) -> None:
    data = json.dumps(obj, ensure_ascii=not _utf8[0]) + "\n"
    with _out:
        sys.stdout.buffer.write(data.encode())
        sys.stdout.buffer.flush()


def result(rid: object, res: JSON) -> None:
    send({"jsonrpc": "2.0", "id": rid, "result": res})


def error(rid: object, code: int, message: str) -> None:
    send({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})


def text(s: str, **extra: object) -> JSON:
    """A tools/call result of one text block (``isError=True``, ``structuredContent=...`` go in ``extra``)."""
    return {"content": [{"type": "text", "text": s}], **extra}


def answer(rid: object, s: str) -> None:
    result(rid, text(s))


def tool(name: str, description: str, props: JSON | None = None, **extra: object) -> JSON:
    return {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": props or {}},
        **extra,
    }


def method_not_found(rid: object, method: str, params: JSON) -> None:
    error(rid, -32601, "method not found")


def empty_result(rid: object, method: str, params: JSON) -> None:
    """For ``other=``: a server that answers any request it does not know with ``{}``."""
    result(rid, {})


def serve(
    name: str,
    tools: list[JSON] | Callable[[], list[JSON]],
    call: Callable[..., None],
    *,
    capabilities: JSON | None = None,
    meta: bool = False,
    threaded: bool = False,
    notified: Callable[[str, JSON], None] | None = None,
    other: Callable[[object, str, JSON], None] = method_not_found,
    handshake: bool = True,
    utf8: bool = False,
) -> None:
    """Serve stdin until it ends; every tools/call goes to ``call(rid, name, args)``.

    - ``tools``: the list, or a function that returns it now (a list that changes);
    - ``meta``: ``call`` also gets the call's ``_meta`` (a dict) as a fourth argument;
    - ``threaded``: each call on a thread of its own (calls sent together run together);
    - ``notified(method, params)``: a message without an id (initialized, cancelled);
    - ``other(rid, method, params)``: a request it does not know (default: -32601);
    - ``handshake=False``: never answers ``initialize`` (a server that never starts);
    - ``utf8``: non-ASCII goes out as raw UTF-8 bytes, not ``\\u`` escapes.
    """
    _utf8[0] = utf8
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        params = msg.get("params") or {}
        if not isinstance(method, str):
            continue  # a response nobody here asked for
        if "id" not in msg:
            if notified is not None:
                notified(method, params)
        elif method == "initialize":
            if handshake:
                result(
                    rid,
                    {
                        "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                        "capabilities": capabilities if capabilities is not None else {"tools": {}},
                        "serverInfo": {"name": name, "version": "1"},
                    },
                )
        elif method == "tools/list":
            result(rid, {"tools": tools() if callable(tools) else tools})
        elif method == "tools/call":
            work = [rid, params.get("name", ""), params.get("arguments") or {}]
            if meta:
                work.append(params.get("_meta") or {})
            if threaded:
                threading.Thread(target=call, args=work, daemon=True).start()
            else:
                call(*work)
        elif method == "ping":
            result(rid, {})
        else:
            other(rid, method, params)


__all__ = ["answer", "empty_result", "error", "method_not_found", "result", "send", "serve", "text", "tool"]
