"""``python -m lovia_mcp demo``: a lovia agent survives its MCP server crashing.

A real :class:`lovia.Agent`, driven offline by lovia's ``ScriptedProvider`` (no
network, no API key), uses the example server ``examples/demo_server.py`` (the
SDK's ``MCPServer`` over stdio) through ``MCP(..., isolation="process")``.
The script makes normal calls, gets an ``isError`` result, crashes the server
mid-call and carries on against a fresh one; then the demo checks that the
agent process never imported ``mcp`` and that no worker or server process is
left. A second chapter (:mod:`._boxed`) runs the same server bare and
in ``Sandbox()``, where it tries to read a secret file and to open a
connection: the box stops both. Every expectation is checked, not just shown: the exit code is 0 only
when all of them hold.

Narration goes to stdout; ``-v`` adds the ``lovia_mcp`` logs (the server's
stderr included) on stderr.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psutil
from lovia import Agent, Runner
from lovia.events import RunCompleted, RunFailed, ToolCallCompleted, ToolCallFailed, ToolCallStarted
from lovia.exceptions import LoviaError, MCPError
from lovia.testing import ScriptedProvider, call, text

from ..opening.plugin import MCP
from ..opening.servers import MCPServerStdio

DEMO_SERVER: Final = Path(__file__).resolve().parent.parent / "examples" / "demo_server.py"
SERVER_NAME: Final = "demo"
FINAL_ANSWER: Final = "Lisbon is sunny at 24 °C and Oslo is overcast at 9 °C; the server crash cost one call."
# Bound on the whole agent run. The demo takes a few seconds (two server
# starts, each importing the MCP SDK); this only stops a broken build from
# hanging a terminal or CI job.
RUN_TIMEOUT: Final = 60.0
# Bound on waiting for processes to finish exiting once the run has closed
# its connection (the close itself already waits for them).
EXIT_WAIT: Final = 5.0

_PID = re.compile(r"\bpid (\d+)\b")


@dataclass(frozen=True)
class Step:
    """One scripted model turn: a tool call, what it shows, what must hold."""

    title: str
    tool: str
    args: dict[str, Any]
    expect: str


STEPS: Final = (
    Step("A normal call", "forecast", {"city": "Lisbon"}, "a forecast for Lisbon"),
    Step("Which process answers?", "server_info", {}, "the server's pid"),
    Step("A tool error (isError)", "forecast", {"city": "Atlantis"}, "rendered '[tool error] ...', not raised"),
    Step("The server crashes mid-call", "crash", {"reason": "demo"}, "an MCPError the model can read"),
    Step("The next call", "server_info", {}, "a fresh server with a new pid"),
    Step("Business as usual", "forecast", {"city": "Oslo"}, "a forecast for Oslo"),
)


@dataclass
class _Seen:
    """What the run showed, for the checks at the end."""

    outputs: dict[str, str] = field(default_factory=dict)
    errors: dict[str, bool] = field(default_factory=dict)
    exceptions: dict[str, BaseException] = field(default_factory=dict)
    worker_pids: set[int] = field(default_factory=set)
    server_pids: list[int] = field(default_factory=list)
    final: str | None = None


class _Checks:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def __call__(self, ok: bool, what: str, detail: str = "") -> bool:
        mark = "ok  " if ok else "FAIL"
        print(f"     [{mark}] {what}" + (f" ({detail})" if detail else ""))
        if not ok:
            self.failed.append(what)
        return ok


def _indent(s: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in s.splitlines() or [""])


def _call_id(i: int) -> str:
    return f"step{i}"


async def _run(check: _Checks) -> _Seen:
    seen = _Seen()
    server = MCPServerStdio(
        command=sys.executable,
        args=[str(DEMO_SERVER)],
        name=SERVER_NAME,
        # The crash tool crashes every time: the one automatic retry on a
        # fresh server would only crash a second one. (It is the advice for
        # tools that must not run twice anyway.)
        auto_reconnect=False,
    )
    plugin = MCP(server, isolation="process")
    script = [call(f"{SERVER_NAME}__{s.tool}", s.args, call_id=_call_id(i)) for i, s in enumerate(STEPS, 1)]
    model = ScriptedProvider([*script, text(FINAL_ANSWER)])
    agent: Agent[Any] = Agent(
        name="weather-bot",
        instructions="Answer weather questions with the demo MCP server's tools.",
        model=model,
        plugins=[plugin],
    )
    steps = {_call_id(i): (i, s) for i, s in enumerate(STEPS, 1)}

    print(f"Agent process: pid {os.getpid()} (lovia + lovia_mcp)")
    print(f"MCP server:    {Path(sys.executable).name} {DEMO_SERVER.name}  (the SDK's MCPServer over stdio)")
    print("Isolation:     process (the server and the MCP SDK run in a worker process)")
    print()

    listed = False
    async for ev in Runner.stream(agent, "What's the weather like in Lisbon and Oslo?"):
        if not listed:
            conns = plugin.connections()
            if conns:
                listed = True
                conn = conns[0]
                names = ", ".join(t.name for t in conn.tools())
                print(f"Tools the model sees: {names}")
                print(f"Worker process: pid {conn.worker_pid}")
                print()
        if isinstance(ev, ToolCallStarted) and ev.call.id in steps:
            i, step = steps[ev.call.id]
            print(f"{i}. {step.title} (expect {step.expect})")
            print(f"   model  -> {ev.call.name}({ev.call.arguments})")
        elif isinstance(ev, ToolCallFailed) and ev.call is not None and ev.call.id in steps:
            seen.exceptions[ev.call.id] = ev.error
        elif isinstance(ev, ToolCallCompleted) and ev.call.id in steps:
            i, step = steps[ev.call.id]
            seen.outputs[ev.call.id] = ev.output
            seen.errors[ev.call.id] = ev.is_error
            exc = seen.exceptions.get(ev.call.id)
            raised = f" (raised {type(exc).__name__})" if exc is not None else ""
            print(f"   result <- the model reads{raised}:")
            print(_indent(ev.output, "             "))
            for conn in plugin.connections():
                if conn.worker_pid is not None:
                    seen.worker_pids.add(conn.worker_pid)
                if step.tool == "server_info" and seen.server_pids:
                    stats = await conn.stats()
                    why = f" (last: {stats.last_restart_reason})" if stats.last_restart_reason else ""
                    print(
                        f"   worker {stats.worker_pid}: server pid {stats.server_pid}, "
                        f"{stats.restarts} restart(s){why}, {stats.calls} call(s), {stats.errors} error(s)"
                    )
            _check_step(check, seen, ev.call.id, step)
            print()
        elif isinstance(ev, RunCompleted):
            seen.final = str(ev.result.output)
        elif isinstance(ev, RunFailed):
            raise ev.error
    return seen


def _check_step(check: _Checks, seen: _Seen, call_id: str, step: Step) -> None:
    out = seen.outputs[call_id]
    failed = seen.errors[call_id]
    if step.tool == "forecast" and step.args["city"] != "Atlantis":
        check(not failed and out.startswith(f"{step.args['city']}:"), "the forecast came back as text")
    elif step.tool == "forecast":
        check(out.startswith("[tool error] ") and "Atlantis" in out, "isError rendered as '[tool error] ...'")
        check(call_id not in seen.exceptions, "nothing raised: the model can correct itself")
    elif step.tool == "crash":
        exc = seen.exceptions.get(call_id)
        check(
            failed and isinstance(exc, MCPError),
            "the call failed with an MCPError",
            f"raised {type(exc).__name__}" if exc is not None else "nothing raised",
        )
        check(
            "exited with code 1" in out and "crashing on purpose" in out,
            "the model sees the exit code and the server's last stderr lines",
        )
    elif step.tool == "server_info":
        m = _PID.search(out)
        pid = int(m.group(1)) if m else None
        if pid is None:
            check(False, "the server reported its pid", out)
            return
        check(pid != os.getpid() and pid not in seen.worker_pids, "the server is a process of its own", f"pid {pid}")
        if seen.server_pids:
            old = seen.server_pids[-1]
            check(pid != old and "1 call(s) served" in out, "a fresh server answered", f"pid {old} -> {pid}")
        seen.server_pids.append(pid)


def _shared_helpers() -> dict[int, str]:
    """The forkserver and its idle workers: one forkserver per agent process, by design."""
    from ..client.forkserver import forkserver_pid, helper_pids

    server = forkserver_pid()
    return {pid: "forkserver" if pid == server else "idle worker" for pid in helper_pids()}


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _leftovers(seen: _Seen) -> list[str]:
    """Processes of the demo still alive: known pids, and any descendant but the shared helpers."""
    deadline = time.monotonic() + EXIT_WAIT
    while True:
        # Asked each time: the forkserver refills its pool of idle workers
        # once the run has ended, and announces each as it forks it.
        helpers = _shared_helpers()
        procs: dict[int, str] = {}
        for pid in (*seen.worker_pids, *seen.server_pids):
            if _alive(pid):
                procs[pid] = "worker" if pid in seen.worker_pids else "server"
        try:
            descendants = psutil.Process().children(recursive=True)
        except psutil.Error:
            descendants = []
        for p in descendants:
            if p.pid not in helpers and p.pid not in procs and _alive(p.pid):
                procs[p.pid] = "descendant"
        if not procs or time.monotonic() >= deadline:
            return [f"{kind} pid {pid}" for pid, kind in sorted(procs.items())]
        time.sleep(0.05)  # polling another process's exit: there is nothing to wait on


async def _demo(check: _Checks) -> None:
    seen = await asyncio.wait_for(_run(check), RUN_TIMEOUT)
    print(f"Final answer: {seen.final}")
    check(seen.final == FINAL_ANSWER, "the run completed with the model's answer")
    print()
    print("After the run")
    check(all(_call_id(i) in seen.outputs for i in range(1, len(STEPS) + 1)), "every scripted call ran")
    check(
        len(seen.worker_pids) == 1,
        "one worker process served the whole run, crash included",
        f"worker pids {sorted(seen.worker_pids)}",
    )
    check(
        "mcp" not in sys.modules,
        "the agent process never imported mcp",
        "'mcp' in sys.modules is " + str("mcp" in sys.modules),
    )
    left = _leftovers(seen)
    helpers = ", ".join(f"{what} {pid}" for pid, what in sorted(_shared_helpers().items()))
    shared = f"only the shared {helpers} remain, and end with this process" if helpers else ""
    check(not left, "no worker or server process is left behind", ", ".join(left) if left else shared)
    print()
    print("Chapter 2: the same server turns hostile; one copy runs bare, one in Sandbox()")
    from ._boxed import chapter

    workers = await asyncio.wait_for(chapter(DEMO_SERVER, check), RUN_TIMEOUT)
    left = _leftovers(_Seen(worker_pids=set(workers)))
    check(not left, "no sandboxed worker or server is left behind", ", ".join(left))


def main(argv: list[str] | None = None) -> int:
    """Run the demo; 0 when every expectation held, 1 otherwise."""
    _ = argv
    log = logging.getLogger("lovia_mcp")
    if not log.handlers:
        # The narration is the output; the library's warnings (the crash is
        # one) would otherwise reach stderr through logging's last resort.
        log.addHandler(logging.NullHandler())
    print("lovia-mcp demo: a lovia agent (scripted model, offline) uses an MCP server")
    print("that runs in its own worker process, and survives the server crashing.")
    print()
    check = _Checks()
    started = time.monotonic()
    try:
        asyncio.run(_demo(check))
    except BrokenPipeError:
        raise  # stdout's reader went away: the caller's to handle, not a demo failure
    except (LoviaError, asyncio.TimeoutError, OSError) as exc:
        what = f"timed out after {RUN_TIMEOUT:g} s" if isinstance(exc, asyncio.TimeoutError) else str(exc)
        print(f"\ndemo failed: {what}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a message, never a traceback (-vv shows it)
        if logging.getLogger("lovia_mcp").isEnabledFor(logging.DEBUG):
            traceback.print_exc()
        print(f"\ndemo failed: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print()
    elapsed = time.monotonic() - started
    if check.failed:
        print(f"demo FAILED ({len(check.failed)} expectation(s) not met, {elapsed:.1f} s): {'; '.join(check.failed)}")
        return 1
    print(f"demo passed: every expectation held ({elapsed:.1f} s).")
    return 0


__all__ = ["DEMO_SERVER", "main"]
