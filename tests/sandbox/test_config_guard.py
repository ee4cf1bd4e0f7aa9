"""A sandboxed server cannot rewrite the config file it was loaded from, nor its lock.

The attack: a server whose box may write its cwd, where the project's
``mcp.json`` sits (a name outside the protected entries, ``.mcp.json`` is
one), adds an unsandboxed server of its own making to the file; the next
start runs that one on the host. Or it rewrites the lock beside the file,
where its tools' pins are. ``load_servers`` records both files on each
server (``config_files``) and every sandbox keeps them read-only, whether
the file gave the sandbox or it was given later (the command line's flags,
``MCP(sandbox=...)``), and with ``write_deny=False``. The control: the same
server with nothing recorded rewrites the config.

Run as root and as nobody, on each backend, in an agent process of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ESCAPE_SERVER, PY, as_nobody

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
]

BACKENDS = ["bwrap", "landlock"]
# One agent: three sandboxed opens (interpreter, forkserver, servers) on a loaded machine.
AGENT_WAIT = 90.0

# argv: the folder (the servers' cwd), the escape server, the backend.
AGENT = r"""
import asyncio, dataclasses, json, os, sys
from pathlib import Path
from lovia_mcp import Sandbox
from lovia_mcp.opening.config_file.loader import load_servers
from lovia_mcp_worker.sandbox import bwrap, landlock

work, script, backend = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
if backend == "bwrap" and bwrap.userns_refused() is not None or backend == "landlock" and landlock.unavailable(Sandbox(backend="landlock")):
    print(json.dumps({"skip": f"{backend} cannot run here"}))
    sys.exit(0)
entry = {"command": sys.executable, "args": [script], "cwd": str(work), "env": {"HOME": str(work)}}
config = work / "mcp.json"
config.write_text(json.dumps({"mcpServers": {
    "infile": {**entry, "sandbox": {"backend": backend}},
    "later": entry,
}}))
lock = work / "mcp.lock.json"
lock.write_text(json.dumps({"lockfileVersion": 1, "servers": {}}))
notes = work / "notes.txt"
notes.write_text("notes\n")  # an existing entry: writable on both backends
before = config.read_text()
servers = {s.name: s for s in load_servers(config, pin="off")}
# A box given after loading, as the command line's flags give it; write_deny=False
# drops the protected entries, not the config file and its lock.
servers["later"] = dataclasses.replace(servers["later"], sandbox=Sandbox(backend=backend, write_deny=False))

async def writes(server):
    async with server.session() as conn:
        stats = await conn.stats()
        return stats.sandbox, [str(await conn.call_tool("write", {"path": str(p)})) for p in (config, lock, notes)]

out = {name: asyncio.run(writes(server)) for name, server in servers.items()}
out["kept"] = config.read_text() == before
out["recorded"] = list(servers["infile"].config_files)
# The control: nothing recorded, the same box.
out["control"] = asyncio.run(writes(dataclasses.replace(servers["infile"], config_files=())))
print(json.dumps(out))
"""


def _agent(backend: str, tmp_path: Path, nobody: bool) -> dict[str, object]:
    if nobody:
        proc = as_nobody(AGENT, ESCAPE_SERVER, backend)
    else:
        work = tmp_path / "work"
        work.mkdir()
        proc = subprocess.run(
            [PY, "-c", AGENT, str(work), ESCAPE_SERVER, backend], capture_output=True, text=True, timeout=AGENT_WAIT
        )
    print(proc.stdout, proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in seen:
        pytest.skip(str(seen["skip"]))
    return seen


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_a_sandboxed_server_cannot_rewrite_its_config_file_or_lock_however_they_are_named(
    backend: str, nobody: bool, tmp_path: Path
) -> None:
    seen = _agent(backend, tmp_path, nobody)
    for name in ("infile", "later"):
        box, (config, lock, notes) = seen[name]  # type: ignore[misc]
        assert box == backend, seen
        assert config.startswith("denied") and lock.startswith("denied"), (name, config, lock)
        assert notes.startswith("ok"), (name, notes)
    assert seen["kept"] is True
    assert [Path(p).name for p in seen["recorded"]] == ["mcp.json", "mcp.lock.json"]  # type: ignore[union-attr]
    # Without the record the same box lets the server rewrite its config: the attack.
    _, (config, lock, notes) = seen["control"]  # type: ignore[misc]
    assert config.startswith("ok") and lock.startswith("ok"), seen["control"]


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def test_a_gateways_sandboxed_server_cannot_rewrite_its_config_lock_token_file_or_audit_log(tmp_path: Path) -> None:
    import httpx
    from _gateway import Serve
    from lovia_mcp_worker.sandbox import registry
    from lovia_mcp_worker.sandbox.backend import SandboxError

    from lovia_mcp import Sandbox

    try:
        registry.pick(Sandbox())
    except SandboxError as exc:
        pytest.skip(f"no sandbox backend can run here: {exc}")
    folder = tmp_path / "g"
    folder.mkdir()
    (folder / "mcp.lock.json").write_text(json.dumps({"lockfileVersion": 1, "servers": {}}))
    (folder / "notes.txt").write_text("notes\n")
    entry = {
        "command": PY,
        "args": [ESCAPE_SERVER],
        "cwd": str(folder),
        "env": {"HOME": str(folder)},
        "sandbox": {"backend": "auto"},
        "pin": "off",
    }
    g = Serve(folder, {"escape": entry}, "--audit-log", str(folder / "audit.log"))
    try:
        files = ["mcp.json", "mcp.lock.json", "tokens", "audit.log", "notes.txt"]
        said = {}
        for name in files:
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "escape__write", "arguments": {"path": str(folder / name)}, "_meta": MODERN_META},
            }
            r = httpx.post(
                g.base + "/mcp",
                json=body,
                headers={
                    **g.headers,
                    "accept": "application/json, text/event-stream",
                    "mcp-protocol-version": "2026-07-28",
                    "mcp-method": "tools/call",
                    "mcp-name": "escape__write",
                },
                timeout=30.0,
            )
            assert r.status_code == 200, r.text
            said[name] = r.json()["result"]["content"][0]["text"]
    finally:
        code, alive = g.stop()
    print(said)
    assert code == 0 and alive == [], g.stderr()[-3000:]
    assert all(said[name].startswith("denied") for name in files[:-1]), said
    assert said["notes.txt"].startswith("ok"), said
