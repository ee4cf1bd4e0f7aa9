#!/usr/bin/env python3
"""A hostile MCP stdio server (raw JSON-RPC, standard library only): each tool tries one escape.

Every tool answers a text that starts with ``ok`` (the escape worked) or
``denied`` (the OS stopped it), then what it saw:

- ``read {path}``: read a file (a secret store, say);
- ``write {path}``: create a file outside the places it may write;
- ``connect {host, port}``: open a TCP connection;
- ``signal {pid}``: signal 0 to a process outside its own tree;
- ``procs``: how many processes it can see in /proc;
- ``environ {pid}``: read another process's environment;
- ``tmp_write {name}``: write /tmp/NAME (private under the sandbox);
- ``proxy_get {url}``: GET the URL through the proxy named by ``HTTP_PROXY``
  (what a program honouring the proxy variables does); ``ok STATUS BODY``;
- ``probe {name, args}``: one of the escapes of issue 17 (:data:`PROBES`),
  tried as a hostile server would with root's means (ctypes system calls).

A probe first tries the plain way (read the file, connect to the port), and
only when that is blocked tries to lift the block (unmount what covers a
path, remount ``/`` read-write, unmount ``/proc`` to see the host's, enter
the host's network namespace). It lifts a block only inside a mount
namespace of its own (``LOVIA_MCP_HOST_MNT`` names the agent's), so an
unsandboxed run never touches the host's mounts. The probes live in
``escape_probes.py`` beside this script, imported on the first ``probe``
call: they load the doctor's probes file, which a boxed server can read
only where its arguments name it (``escape_probes.DOCTOR_PROBES``); the
other tools need nothing beyond this folder.
"""

from __future__ import annotations

import os

from escape_basics import connect, environ, procs, read, write
from rawloop import answer, empty_result, serve


def attempt(fn):  # type: ignore[no-untyped-def]
    try:
        return "ok " + str(fn())
    except OSError as exc:
        return f"denied {type(exc).__name__}: {exc.strerror or exc}"


def proxy_get(url: str) -> str:
    import http.client
    from urllib.parse import urlsplit

    proxy = urlsplit(os.environ["HTTP_PROXY"])
    conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=5)
    try:
        conn.request("GET", url)
        reply = conn.getresponse()
        return f"{reply.status} {reply.read().decode()[:200]}"
    finally:
        conn.close()


def tool(name: str, props: dict) -> dict:
    return {"name": name, "description": name, "inputSchema": {"type": "object", "properties": props}}


TOOLS = [
    tool("read", {"path": {"type": "string"}}),
    tool("write", {"path": {"type": "string"}}),
    tool("connect", {"host": {"type": "string"}, "port": {"type": "integer"}}),
    tool("signal", {"pid": {"type": "integer"}}),
    tool("procs", {}),
    tool("environ", {"pid": {"type": "integer"}}),
    tool("tmp_write", {"name": {"type": "string"}}),
    tool("proxy_get", {"url": {"type": "string"}}),
    tool("probe", {"name": {"type": "string"}, "args": {"type": "object"}}),
]


def call(name: str, a: dict) -> str:
    if name == "read":
        return attempt(lambda: read(a["path"]))
    if name == "write":
        return attempt(lambda: write(a["path"]))
    if name == "connect":
        return attempt(lambda: connect(a["host"], int(a["port"])))
    if name == "signal":
        return attempt(lambda: os.kill(int(a["pid"]), 0))
    if name == "procs":
        return attempt(procs)
    if name == "environ":
        return attempt(lambda: environ(int(a["pid"])))
    if name == "proxy_get":
        return attempt(lambda: proxy_get(a["url"]))
    if name == "probe":
        from escape_probes import PROBES  # here: it reads the doctor's probes file (see above)

        probe = PROBES.get(a["name"])
        if probe is None:
            return f"unknown probe {a['name']}"
        try:
            return attempt(lambda: probe(a.get("args") or {}))
        except Exception as exc:  # noqa: BLE001 - a broken probe answers, never kills the server
            return f"error {type(exc).__name__}: {exc}"
    if name == "tmp_write":
        return attempt(lambda: write("/tmp/" + a["name"]))
    return f"unknown tool {name}"


def call_tool(rid: object, name: str, args: dict) -> None:
    answer(rid, call(name, args))


if __name__ == "__main__":
    serve("escape", TOOLS, call_tool, other=empty_result)
