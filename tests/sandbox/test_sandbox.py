"""The sandbox: a hostile server's escapes work without it and fail inside it.

Each test runs the same attempt on both sides (``sandbox=None`` and
``sandbox=Sandbox()``), so it proves the escape is real and that the
sandbox, not the test, stops it. ``tests/servers/escape_server.py`` is the
hostile server; a raw server checks that limits, timeouts, tree kills,
stats, stderr and restarts still work inside.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from helpers import PY, ROOT, EscapePlace, raw_args, run
from lovia.exceptions import UserError
from lovia_mcp_worker.sandbox import bwrap as sandbox_mod

from lovia_mcp import MCP, Limits, MCPError, MCPServerStdio, Sandbox

pytestmark = pytest.mark.skipif(sandbox_mod.BWRAP is None, reason="bubblewrap is not available (Linux only)")


def both(place: EscapePlace, tool: str, args: dict[str, object]) -> tuple[str, str]:
    async def main() -> tuple[str, str]:
        out = []
        for box in (None, Sandbox()):
            async with place.server(box).session() as conn:
                out.append(str(await asyncio.wait_for(conn.call_tool(tool, args), 10)))
        return out[0], out[1]

    return run(main())


def test_a_secret_store_is_readable_without_the_sandbox_and_empty_inside_it(place: EscapePlace) -> None:
    for path in (place.home / ".ssh" / "id_rsa", place.home / ".netrc"):
        bare, boxed = both(place, "read", {"path": str(path)})
        print(path.name, "|", bare, "|", boxed)
        assert bare.startswith("ok") and "SECRET" in bare
        assert "SECRET" not in boxed


def test_writing_outside_cwd_works_without_the_sandbox_and_fails_on_a_read_only_root(place: EscapePlace) -> None:
    target = place.outside / "escaped.txt"
    bare, boxed = both(place, "write", {"path": str(target)})
    print(bare, "|", boxed)
    assert bare.startswith("ok")
    target.unlink()
    assert boxed.startswith("denied") and "Read-only file system" in boxed
    assert not target.exists()


def test_cwd_stays_writable_inside_the_sandbox(place: EscapePlace) -> None:
    bare, boxed = both(place, "write", {"path": str(place.work / "note.txt")})
    assert bare.startswith("ok") and boxed.startswith("ok")
    assert (place.work / "note.txt").read_text() == "escaped\n"


def test_a_host_listener_is_reachable_without_the_sandbox_and_not_inside_it(place: EscapePlace, listener: int) -> None:
    bare, boxed = both(place, "connect", {"host": "127.0.0.1", "port": listener})
    print(bare, "|", boxed)
    assert bare == "ok hello"
    assert boxed.startswith("denied")


def test_a_network_allowlist_lets_allowed_names_through_the_proxy_and_nothing_else(
    place: EscapePlace, web: int, listener: int
) -> None:
    # "localhost" is allowed, and its address listed: the proxy, outside the sandbox, reaches the host's loopback.
    box = Sandbox(network=["localhost", "127.0.0.1"])

    async def main() -> tuple[str, str, str]:
        async with place.server(box).session() as conn:
            allowed = str(await conn.call_tool("proxy_get", {"url": f"http://localhost:{web}/"}))
            denied = str(await conn.call_tool("proxy_get", {"url": "http://denied.example.test/"}))
            raw = str(await conn.call_tool("connect", {"host": "127.0.0.1", "port": listener}))
            return allowed, denied, raw

    allowed, denied, raw = run(main())
    print(allowed, "|", denied, "|", raw)
    assert allowed == "ok 200 hello from the host"
    assert denied.startswith("ok 403") and "denied.example.test" in denied
    assert raw.startswith("denied"), "a raw socket to a host port must not get out"


def test_a_malformed_network_allowlist_is_refused_in_the_config_with_a_hint(place: EscapePlace) -> None:
    for entry, why in (("https://api.github.com", "scheme"), ("10.0.0.1/8", "host bits set")):
        with pytest.raises(UserError) as info:
            place.server(Sandbox(network=["api.github.com", entry]))
        assert f"sandbox network entry {entry!r} is invalid" in str(info.value) and why in str(info.value)
        assert "'10.0.0.0/8'" in (info.value.hint or "")


def test_processes_outside_the_tree_are_visible_and_signalable_without_the_sandbox_only(place: EscapePlace) -> None:
    me = os.getpid()
    bare, boxed = both(place, "signal", {"pid": me})
    assert bare.startswith("ok") and boxed.startswith("denied") and "ProcessLookupError" in boxed
    bare, boxed = both(place, "environ", {"pid": me})
    assert bare.startswith("ok") and boxed.startswith("denied")
    bare, boxed = both(place, "procs", {})
    seen_bare, seen_boxed = int(bare.split()[1]), int(boxed.split()[1])
    print(f"processes visible: {seen_bare} without, {seen_boxed} inside")
    assert seen_bare > 5 and seen_boxed <= 3


def test_tmp_is_private_inside_the_sandbox(place: EscapePlace) -> None:
    name = f"lovia-mcp-escape-{os.getpid()}"
    host_file = Path("/tmp") / name
    try:
        bare, boxed = both(place, "tmp_write", {"name": name})
        assert bare.startswith("ok") and host_file.exists()
        host_file.unlink()
        assert boxed.startswith("ok")
        assert not host_file.exists(), "the sandbox's /tmp write reached the host's /tmp"
    finally:
        host_file.unlink(missing_ok=True)


def test_writable_and_hidden_paths_and_the_vscode_sandbox_block(place: EscapePlace) -> None:
    extra = place.outside / "data"
    extra.mkdir()
    (place.outside / "private.txt").write_text("PRIVATE\n")
    vscode = {
        "filesystem": {"allowWrite": [str(extra)], "denyRead": [str(place.outside / "private.txt")]},
        "network": {"allowedDomains": []},
    }

    async def main() -> None:
        async with place.server(vscode).session() as conn:  # type: ignore[arg-type]
            assert str(await conn.call_tool("write", {"path": str(extra / "ok.txt")})).startswith("ok")
            assert "PRIVATE" not in str(await conn.call_tool("read", {"path": str(place.outside / "private.txt")}))
            # denyRead adds to the default secret stores, it does not replace them.
            assert "SECRET" not in str(await conn.call_tool("read", {"path": str(place.home / ".ssh" / "id_rsa")}))
            assert str(await conn.call_tool("write", {"path": str(place.outside / "no.txt")})).startswith("denied")

    run(main())
    assert (extra / "ok.txt").exists() and not (place.outside / "no.txt").exists()


@pytest.mark.unit
def test_bad_sandbox_values_are_refused_with_a_hint() -> None:
    for bad in ({"filesystem": {"allowWrit": ["."]}}, {"bogus": 1}, "yes", Sandbox(writable="/srv")):  # type: ignore[arg-type]
        with pytest.raises(UserError) as info:
            MCPServerStdio(command="x", sandbox=bad)  # type: ignore[arg-type]
        assert info.value.hint, bad


def test_a_writable_path_that_does_not_exist_fails_at_open_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing"

    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), sandbox=Sandbox(writable=[str(missing)]))
        with pytest.raises(MCPError) as info:
            await server.open()
        assert info.value.kind == "open" and str(missing) in str(info.value)

    run(main())


def test_timeouts_tree_kills_restarts_stats_and_stderr_work_inside_the_sandbox() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", sandbox=Sandbox(), timeout=1, kill_grace=0.2)
        async with server.session() as conn:
            first = conn.server_pid
            started = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(conn.call_tool("hang", timeout=1), 1)
            assert str(await asyncio.wait_for(conn.call_tool("echo", {"text": "after"}), 15)) == "after"
            print(
                f"hung sandboxed server replaced; next call served {time.monotonic() - started:.2f} s after the start"
            )
            second = conn.server_pid
            assert second != first
            with pytest.raises(MCPError) as info:
                await asyncio.wait_for(conn.call_tool("stderr_then_exit", {"lines": 3, "code": 7}), 10)
            assert "stderr line 2" in info.value.stderr_tail
            # Retried on a fresh server by auto_reconnect? No: the tool exits
            # every time; the retry failed the same way.
            stats = await conn.stats()
            assert stats.restarts >= 2 and stats.timeouts == 1
            assert str(await conn.call_tool("echo", {"text": "alive"})) == "alive"

    run(main())


def test_the_memory_limit_holds_inside_the_sandbox() -> None:
    async def main() -> None:
        server = MCPServerStdio(
            command=PY,
            args=raw_args(),
            name="raw",
            sandbox=Sandbox(),
            auto_reconnect=False,
            limits=Limits(memory_mb=80),
        )
        async with server.session() as conn:
            with pytest.raises(MCPError) as info:
                await asyncio.wait_for(conn.call_tool("alloc", {"mb": 400}), 20)
            assert info.value.kind == "limit" and "memory" in str(info.value)
            assert str(await conn.call_tool("echo", {"text": "ok"})) == "ok"

    run(main())


def test_the_plugin_sandbox_applies_to_stdio_servers_without_their_own(place: EscapePlace) -> None:
    plugin = MCP(place.server(None), MCPServerStdio(command="x", sandbox=Sandbox(network=True)), sandbox=True)
    boxes = [s.sandbox for s in plugin.servers]  # type: ignore[attr-defined]
    assert boxes == [Sandbox(), Sandbox(network=True)]


@pytest.mark.unit
def test_a_sandbox_setup_failure_is_read_back_with_the_user_namespace_hint() -> None:
    why = sandbox_mod.setup_error(
        1,
        [
            "bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces."
        ],
    )
    assert why is not None and "could not be set up" in why and "user namespaces" in why
    assert sandbox_mod.setup_error(1, ["bwrap: execvp nope: No such file or directory"]) == "No such file or directory"
    assert sandbox_mod.setup_error(1, ["the server's own last line"]) is None


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become an ordinary user"
)
def test_the_sandbox_command_line_works_for_an_ordinary_user(monkeypatch: pytest.MonkeyPatch) -> None:
    # The agent's interpreter may live where an ordinary user cannot run it
    # (here: under /root), so this runs the very bwrap command line the
    # worker builds, as nobody, around a shell.
    work = ROOT / ".cache" / f"nobody-{os.getpid()}"  # pytest's tmp dirs are root's alone
    work.mkdir(parents=True)
    os.chown(work, 65534, 65534)
    monkeypatch.setenv("HOME", str(work))  # the agent's home is the ordinary user's
    try:
        _run_as_nobody(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_as_nobody(work: Path) -> None:
    probe = f"ls /proc | grep -c '^[0-9]'; touch {work}/inside; touch {ROOT}/nobody.txt 2>/dev/null || echo denied"
    fd = sandbox_mod.filter_fd(Sandbox())
    argv = sandbox_mod.command(
        Sandbox(), ["/bin/sh", "-c", probe], cwd=str(work), env={"HOME": str(work)}, seccomp_fd=fd
    )
    try:
        proc = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=work,
            pass_fds=(fd,),
        )
    finally:
        os.close(fd)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    count, denied = proc.stdout.split()
    assert int(count) <= 5 and denied == "denied"  # bwrap's init, sh, ls, grep; the host shows ~80
    assert (work / "inside").exists() and not (ROOT / "nobody.txt").exists()


def test_a_cwd_of_slash_is_refused_rather_than_making_the_whole_file_system_writable() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), cwd="/", sandbox=Sandbox())
        with pytest.raises(MCPError) as info:
            await server.open()
        assert info.value.kind == "open" and "whole file system writable" in str(info.value)

    run(main())


@pytest.mark.unit
def test_a_server_installed_under_tmp_stays_visible_read_only_through_the_private_tmp(tmp_path: Path) -> None:
    # CI and many users keep checkouts and virtual environments under /tmp.
    script = tmp_path / "srv.py"
    script.write_text("")
    top = "/tmp/" + str(tmp_path).split("/")[2]
    assert sandbox_mod.tmp_roots([str(script), "/usr/bin/env", "relative"]) == [top]
    argv = sandbox_mod.command(Sandbox(), [PY, str(script)], cwd=None, env={}, seccomp_fd=99)
    after_tmp = argv[argv.index("--tmpfs") :]
    binds = [tuple(after_tmp[i + 1 : i + 3]) for i, a in enumerate(after_tmp) if a == "--ro-bind"]
    assert (top, top) in binds
