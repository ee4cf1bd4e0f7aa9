"""The demo's sandbox chapter: the same server, run bare and in ``Sandbox()``, tries to escape.

The demo server's ``read_file`` and ``phone_home`` tools do what a
compromised dependency would: read a secret file, open a connection to a
service on the host. One agent run mounts the server twice, ``bare``
(no sandbox) and ``boxed`` (``Sandbox()``: no network, the file system
read-only but for its cwd, secret stores hidden), and the scripted model
calls both tools on each. Bare, both work; boxed, the OS refuses both.

Where no sandbox can be built (not Linux, no user namespaces and no
Landlock), the chapter says why and is skipped, not failed.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from lovia import Agent, Runner
from lovia.events import RunFailed, ToolCallCompleted
from lovia.exceptions import MCPError
from lovia.testing import ScriptedProvider, call, text

from ..config.server import Sandbox
from ..opening.plugin import MCP
from ..opening.servers import MCPServerStdio

SECRET: Final = "demo-secret-token-1234"
GREETING: Final = b"hello from a service on the host\n"
FINAL: Final = "The sandboxed copy could neither read the secret nor phone home."


async def _greet(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(GREETING)
    await writer.drain()
    writer.close()


async def chapter(server_script: Path, check: Callable[..., bool]) -> list[int]:
    """Run the chapter; returns the pids of the workers it started (for the leftovers check)."""
    if not sys.platform.startswith("linux"):
        print("(skipped: the sandbox is Linux-only)")
        return []
    home = Path(tempfile.mkdtemp(prefix="lovia-mcp-demo-"))
    work = Path(tempfile.mkdtemp(prefix="lovia-mcp-demo-work-"))
    listener = await asyncio.start_server(_greet, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        secret = home / "secret.txt"
        secret.write_text(SECRET + "\n")
        servers = [
            MCPServerStdio(
                command=sys.executable,
                args=[str(server_script)],
                name=name,
                cwd=str(work),
                sandbox=box,
                auto_reconnect=False,
            )
            for name, box in (("bare", None), ("boxed", Sandbox()))
        ]
        plugin = MCP(*servers, isolation="process")
        script = [
            call(f"{name}__{tool}", args, call_id=f"{name}-{tool}")
            for name in ("bare", "boxed")
            for tool, args in (
                ("read_file", {"path": str(secret)}),
                ("phone_home", {"host": "127.0.0.1", "port": port}),
            )
        ]
        agent: Agent[Any] = Agent(name="sandbox-demo", model=ScriptedProvider([*script, text(FINAL)]), plugins=[plugin])
        print(f"A secret file: {secret}")
        print(f"A service on the host: 127.0.0.1:{port}")
        outputs: dict[str, str] = {}
        workers: list[int] = []
        try:
            async for ev in Runner.stream(agent, "Read the secret and phone home."):
                if isinstance(ev, ToolCallCompleted):
                    outputs[ev.call.id] = ev.output
                    shown = re.sub(r"Error executing tool \w+: ", "", ev.output.strip())
                    print(f"   {ev.call.name}(...) -> {shown[:100]}")
                    if ev.call.id == "boxed-read_file":
                        for conn in plugin.connections():
                            if conn.worker_pid is not None:
                                workers.append(conn.worker_pid)
                            if conn.server.name == "boxed":
                                print(f"   (boxed runs in the {(await conn.stats()).sandbox} sandbox)")
                elif isinstance(ev, RunFailed):
                    raise ev.error
        except MCPError as exc:
            print(f"(skipped: no sandbox here: {exc})")
            return workers
        check(SECRET in outputs.get("bare-read_file", ""), "bare, the server reads the secret")
        check(GREETING.decode().strip() in outputs.get("bare-phone_home", ""), "bare, it reaches the host's service")
        boxed_read, boxed_net = outputs.get("boxed-read_file", ""), outputs.get("boxed-phone_home", "")
        check(boxed_read.startswith("[tool error]") and SECRET not in boxed_read, "boxed, the secret stays unread")
        check(boxed_net.startswith("[tool error]") and "hello" not in boxed_net, "boxed, no connection gets out")
        return workers
    finally:
        listener.close()
        await listener.wait_closed()
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


__all__: list[str] = []
