#!/usr/bin/env python3
"""A raw JSON-RPC MCP server over stdio: starts in milliseconds, misbehaves on demand.

Standard library only. Tools (each a way a server can behave or misbehave):

- ``echo {text}``: returns text.
- ``add {a, b}``: returns a+b as text, with structuredContent {"sum": ...}.
- ``fail``: an ``isError`` result.
- ``big {size}``: a text result of ``size`` bytes.
- ``mixed``: text, image, audio, embedded text resource, blob resource, resource link.
- ``long {size, blocks, error, structured}``: ``blocks`` text blocks of ``size`` characters
  (numbered, so any cut shows where it fell; non-ASCII among them), an image
  and an embedded text resource between them; ``isError`` if ``error``; a
  ``structuredContent`` of ``structured`` characters.
- ``hang``: never answers, ignores cancellation and SIGTERM.
- ``exit {code}``: exits mid-call with ``code``.
- ``signal {name}``: kills itself with a signal mid-call (SIGKILL, SIGSEGV...).
- ``stderr_then_exit {lines, code}``: writes stderr lines, then exits.
- ``garbage``: writes non-JSON and invalid UTF-8 lines, then answers.
- ``flood {size}``: writes ``size`` bytes without a newline, then hangs.
- ``chatty {lines}``: writes many stderr lines, then answers.
- ``alloc {mb}``: allocates memory and holds it, then answers.
- ``spawn {n, orphan}``: starts ``n`` sleeping grandchildren (double-forked orphans
  if ``orphan``), reports their pids, and answers.
- ``burn {seconds}``: burns CPU, then answers.
- ``spike {mb, hold}``: touches ``mb`` MB, keeps it ``hold`` seconds (a
  workload, not a synchronisation), frees it, then answers.
- ``pid``: its own pid and environment as JSON.
- ``cwd``: its working directory.
- ``counter``: how many calls this process has served.
- ``ping_client``: sends the client a ``ping`` request whose id looks like one of
  lovia-mcp's own request ids (``"lm-1"``, ``"lm-2"``, ...), then answers.
- ``alloc_fast {mb, progress}``: allocates ``mb`` MB in 1 MB chunks in a tight
  loop, writing the MB count so far to the file ``progress`` after each one;
  then holds it and never answers.
- ``fork_storm {n, progress}``: forks up to ``n`` blocking children as fast as it
  can, writing the count forked so far to ``progress`` after each; a refused
  fork is retried (up to ``n`` refusals); then never answers.
- ``escape``: starts a sleeper that leaves the session (``setsid``) and is
  orphaned, ignoring SIGTERM; answers its pid.
- ``kill_parent``: SIGKILLs its parent (the worker), then hangs.
- ``answer_if_exists {path}``: answers its pid if ``path`` exists when the call
  arrives; otherwise never answers (ignoring SIGTERM).

Flags: ``--loose-schemas`` lists tools with null, {}, and broken schemas;
``--many N`` lists N extra tools; ``--no-handshake`` never answers initialize;
``--exit-on-start N`` exits with N at once (after a stderr line);
``--crash-after N`` exits with code 3 on the Nth tools/call;
``--crash-if-exists PATH`` exits with code 4 on tools/call while PATH exists;
``--prefix-tools P`` prefixes every tool name with P;
``--linger`` ignores SIGTERM and does not exit at stdin's EOF (a server slow
to die: its worker SIGKILLs it after the TERM grace).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from rawloop import error, result, send, serve, text

ARGS = sys.argv[1:]


def flag(name: str) -> str | None:
    if name in ARGS:
        i = ARGS.index(name)
        return ARGS[i + 1] if i + 1 < len(ARGS) and not ARGS[i + 1].startswith("--") else ""
    return None


SCHEMA = {"type": "object", "properties": {}}


def numbered(block: int, size: int) -> str:
    """``size`` characters, every ten of them saying where they are (one non-ASCII in each)."""
    line = "".join(f"{block}é{i:07d}\n" for i in range(size // 10 + 1))
    return line[:size]


def long_result(size: int, blocks: int, error: bool, structured: int) -> dict:
    content: list[dict] = []
    for b in range(blocks):
        content.append({"type": "text", "text": numbered(b, size)})
        if b == 0:
            content.append({"type": "image", "data": "aGVsbG8gd29ybGQ=", "mimeType": "image/png"})
            content.append({"type": "resource", "resource": {"uri": "file:///r.txt", "text": numbered(9, size // 2)}})
    out: dict = {"content": content, "isError": error}
    if structured:
        out["structuredContent"] = {"blob": "s" * structured}
    return out


def tool(name: str, desc: str, props: dict | None = None, schema: object = None) -> dict:
    prefix = flag("--prefix-tools") or ""
    entry = {"name": prefix + name, "description": desc}
    entry["inputSchema"] = schema if schema is not None else {"type": "object", "properties": props or {}}
    return entry


TOOLS = [
    tool("echo", "Echo the text back.", {"text": {"type": "string"}}),
    tool("add", "Add two numbers.", {"a": {"type": "number"}, "b": {"type": "number"}}),
    tool("fail", "Always answers with isError."),
    tool("big", "A large text result.", {"size": {"type": "integer"}}),
    tool("mixed", "Every kind of content block."),
    tool(
        "long",
        "Long numbered text blocks with others between them.",
        {
            "size": {"type": "integer"},
            "blocks": {"type": "integer"},
            "error": {"type": "boolean"},
            "structured": {"type": "integer"},
        },
    ),
    tool("hang", "Never answers."),
    tool("exit", "Exit mid-call.", {"code": {"type": "integer"}}),
    tool("signal", "Kill itself with a signal.", {"name": {"type": "string"}}),
    tool("stderr_then_exit", "Write stderr then exit.", {"lines": {"type": "integer"}, "code": {"type": "integer"}}),
    tool("garbage", "Write garbage lines, then answer."),
    tool("flood", "Write bytes without a newline, then hang.", {"size": {"type": "integer"}}),
    tool("chatty", "Write many stderr lines.", {"lines": {"type": "integer"}}),
    tool("alloc", "Allocate and hold memory.", {"mb": {"type": "integer"}}),
    tool("spawn", "Start sleeping grandchildren.", {"n": {"type": "integer"}, "orphan": {"type": "boolean"}}),
    tool("burn", "Burn CPU.", {"seconds": {"type": "number"}}),
    tool("spike", "Touch memory, free it, answer.", {"mb": {"type": "integer"}, "hold": {"type": "number"}}),
    tool("pid", "Pid and environment."),
    tool("cwd", "Working directory."),
    tool("counter", "Calls served by this process."),
    tool("ping_client", "Ping the client with a look-alike id, then answer."),
    tool("alloc_fast", "Allocate fast, never answer.", {"mb": {"type": "integer"}, "progress": {"type": "string"}}),
    tool("fork_storm", "Fork fast, never answer.", {"n": {"type": "integer"}, "progress": {"type": "string"}}),
    tool("escape", "Start a setsid orphan sleeper."),
    tool("kill_parent", "SIGKILL the parent process."),
    tool("answer_if_exists", "Answer only if the path exists.", {"path": {"type": "string"}}),
]
if flag("--loose-schemas") is not None:
    TOOLS += [
        {"name": "loose_null", "description": "null schema", "inputSchema": None},
        {"name": "loose_empty", "description": "empty schema", "inputSchema": {}},
        {"name": "loose_noprops", "description": "object without properties", "inputSchema": {"type": "object"}},
        {
            "name": "loose_broken",
            "description": "bad properties",
            "inputSchema": {"type": "object", "properties": [], "required": "x"},
        },
        {"name": "loose_missing", "description": "no inputSchema at all"},
    ]
many = flag("--many")
if many:
    TOOLS += [tool(f"extra_{i}", f"Extra tool number {i}.") for i in range(int(many))]

HELD: list[bytearray] = []
CALLS = 0


def spawn_children(n: int, orphan: bool) -> list[int]:
    pids = []
    for _ in range(n):
        if orphan:
            # The child forks a sleeper and exits: the sleeper is orphaned.
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                gpid = os.fork()
                if gpid == 0:
                    os.close(w)
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                    os.execvp("sleep", ["sleep", "300"])
                os.write(w, str(gpid).encode())
                os._exit(0)
            os.close(w)
            pids.append(int(os.read(r, 32)))
            os.close(r)
            os.waitpid(pid, 0)
        else:
            p = subprocess.Popen(["sleep", "300"], preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
            pids.append(p.pid)
    return pids


def call(rid: object, name: str, args: dict) -> None:
    global CALLS
    CALLS += 1
    crash_after = flag("--crash-after")
    if crash_after and CALLS >= int(crash_after):
        sys.stderr.write(f"crashing on call {CALLS}\n")
        sys.stderr.flush()
        os._exit(3)
    crash_file = flag("--crash-if-exists")
    if crash_file and os.path.exists(crash_file):
        sys.stderr.write("crash file present\n")
        sys.stderr.flush()
        os._exit(4)
    prefix = flag("--prefix-tools") or ""
    if prefix and name.startswith(prefix):
        name = name[len(prefix) :]
    if name == "echo":
        result(rid, text(str(args.get("text", ""))))
    elif name == "add":
        s = args.get("a", 0) + args.get("b", 0)
        result(rid, text(str(s), structuredContent={"sum": s}))
    elif name == "fail":
        result(rid, text("something went wrong", isError=True))
    elif name == "big":
        result(rid, text("x" * int(args.get("size", 1000))))
    elif name == "mixed":
        result(
            rid,
            {
                "content": [
                    {"type": "text", "text": "hello"},
                    {"type": "image", "data": "aGVsbG8gd29ybGQ=", "mimeType": "image/png"},
                    {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
                    {
                        "type": "resource",
                        "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "inline text"},
                    },
                    {
                        "type": "resource",
                        "resource": {
                            "uri": "file:///b.bin",
                            "mimeType": "application/octet-stream",
                            "blob": "AAAAAAAA",
                        },
                    },
                    {"type": "resource_link", "uri": "file:///c.txt", "name": "c.txt"},
                ]
            },
        )
    elif name == "long":
        result(
            rid,
            long_result(
                int(args.get("size", 1000)),
                int(args.get("blocks", 1)),
                bool(args.get("error")),
                int(args.get("structured", 0)),
            ),
        )
    elif name == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(3600)
    elif name == "exit":
        sys.stderr.write("about to exit\n")
        sys.stderr.flush()
        os._exit(int(args.get("code", 1)))
    elif name == "signal":
        sys.stderr.write("about to die by signal\n")
        sys.stderr.flush()
        os.kill(os.getpid(), getattr(signal, str(args.get("name", "SIGKILL"))))
        time.sleep(5)
    elif name == "stderr_then_exit":
        for i in range(int(args.get("lines", 3))):
            sys.stderr.write(f"stderr line {i}\n")
        sys.stderr.flush()
        os._exit(int(args.get("code", 2)))
    elif name == "garbage":
        sys.stdout.write("this is not json\n")
        sys.stdout.flush()
        sys.stdout.buffer.write(b"\xff\xfe invalid utf-8 \xc3\x28\n")
        sys.stdout.buffer.flush()
        sys.stdout.write('{"jsonrpc": "2.0", "method": 42}\n')
        sys.stdout.flush()
        result(rid, text("after garbage"))
    elif name == "flood":
        size = int(args.get("size", 100 * 1024 * 1024))
        block = b"y" * (1 << 20)
        left = size
        while left > 0:
            n = min(left, len(block))
            sys.stdout.buffer.write(block[:n])
            left -= n
        sys.stdout.buffer.flush()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(3600)
    elif name == "chatty":
        for i in range(int(args.get("lines", 10000))):
            sys.stderr.write(f"chatty line {i} " + "z" * 100 + "\n")
        sys.stderr.flush()
        result(rid, text("done chatting"))
    elif name == "alloc":
        mb = int(args.get("mb", 100))
        for _ in range(mb):
            HELD.append(bytearray(b"\1" * (1 << 20)))
        result(rid, text(f"holding {mb} MB"))
    elif name == "spawn":
        pids = spawn_children(int(args.get("n", 1)), bool(args.get("orphan", False)))
        result(rid, text(json.dumps(pids)))
    elif name == "burn":
        end = time.process_time() + float(args.get("seconds", 1))
        while time.process_time() < end:
            pass
        result(rid, text("burned"))
    elif name == "spike":
        mb = int(args.get("mb", 100))
        spike = [bytearray(b"\1" * (1 << 20)) for _ in range(mb)]
        time.sleep(float(args.get("hold", 0)))
        del spike
        result(rid, text(f"touched {mb} MB"))
    elif name == "pid":
        result(rid, text(json.dumps({"pid": os.getpid(), "env": dict(os.environ)})))
    elif name == "cwd":
        result(rid, text(os.getcwd()))
    elif name == "counter":
        result(rid, text(str(CALLS)))
    elif name == "ping_client":
        for i in range(1, 4):
            send({"jsonrpc": "2.0", "id": f"lm-{i}", "method": "ping"})
        result(rid, text("pinged"))
    elif name == "alloc_fast":
        fd = os.open(str(args["progress"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        for i in range(1, int(args.get("mb", 1024)) + 1):
            HELD.append(b"\1" * (1 << 20))
            os.pwrite(fd, b"%10d\n" % i, 0)
        block_forever()
    elif name == "fork_storm":
        fd = os.open(str(args["progress"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        forked = refused = 0
        while forked < int(args.get("n", 100)) and refused < int(args.get("n", 100)):
            try:
                pid = os.fork()
            except BlockingIOError:
                refused += 1
                continue
            if pid == 0:
                block_forever()
            forked += 1
            os.pwrite(fd, b"%10d\n" % forked, 0)
        block_forever()
    elif name == "escape":
        r, w = os.pipe()
        middle = os.fork()
        if middle == 0:
            os.close(r)
            os.setsid()
            sleeper = os.fork()
            if sleeper == 0:
                os.close(w)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                while True:
                    time.sleep(3600)
            os.write(w, str(sleeper).encode())
            os._exit(0)
        os.close(w)
        pid = int(os.read(r, 32))
        os.close(r)
        os.waitpid(middle, 0)
        result(rid, text(json.dumps({"pid": pid})))
    elif name == "kill_parent":
        os.kill(os.getppid(), signal.SIGKILL)
        block_forever()
    elif name == "answer_if_exists":
        if os.path.exists(str(args.get("path"))):
            result(rid, text(json.dumps({"pid": os.getpid()})))
        else:
            block_forever()
    else:
        error(rid, -32602, f"unknown tool {name}")


def block_forever() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(3600)


def main() -> None:
    if flag("--linger") is not None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    code = flag("--exit-on-start")
    if code:
        sys.stderr.write("refusing to start: bad configuration\n")
        sys.stderr.flush()
        sys.exit(int(code))
    serve("raw", TOOLS, call, handshake=flag("--no-handshake") is None)
    if flag("--linger") is not None:
        block_forever()


if __name__ == "__main__":
    main()
