"""The Landlock + seccomp backend: each escape works without it and fails inside it.

Every probe runs twice, on the same hostile server (``tests/servers/escape_server.py``):
``sandbox=None`` shows the escape is real (as root here, where that matters),
``Sandbox(backend="landlock")`` shows the box stops it. Where Landlock cannot
stop something (listing other processes), the test asserts the documented
outcome. The shared code paths and the third-party servers are in
``test_landlock_servers.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import ESCAPE_SERVER, PY, EscapePlace, run
from lovia_mcp_worker.sandbox import landlock

from lovia_mcp import MCPServerStdio, Sandbox

pytestmark = pytest.mark.skipif(
    landlock.ABI < landlock.NETWORK_ABI, reason="needs Landlock ABI 4 (Linux 6.7+) for the network rules"
)

LL = Sandbox(backend="landlock")
# Bound on one probe call: milliseconds normally (a connect probe waits up to
# its own 5 s); the rest is margin for a loaded 2-core machine.
CALL_WAIT = 10.0


def probe(place: EscapePlace, calls: list[tuple[str, dict[str, object]]], box: Sandbox | None = LL) -> list[str]:
    """Each call's answer, bare (sandbox=None) then boxed, interleaved: [bare0, boxed0, bare1, ...]."""

    async def main() -> list[str]:
        answers: dict[int, list[str]] = {}
        for side, sb in enumerate((None, box)):
            async with place.server(sb).session() as conn:
                answers[side] = [str(await asyncio.wait_for(conn.call_tool(t, a), CALL_WAIT)) for t, a in calls]
        return [x for pair in zip(answers[0], answers[1]) for x in pair]

    out = run(main())
    for (t, a), bare, boxed in zip(calls, out[::2], out[1::2]):
        print(f"{t} {a}: bare={bare[:60]!r} landlock={boxed[:60]!r}")
    return out


def test_files_outside_the_read_allowlist_and_secret_stores_are_unreadable_on_landlock(place: EscapePlace) -> None:
    bare_secret, boxed_secret, bare_out, boxed_out, bare_sys, boxed_sys = probe(
        place,
        [
            ("read", {"path": str(place.home / ".ssh" / "id_rsa")}),
            ("read", {"path": str(place.outside / "notes.txt")}),
            ("read", {"path": "/etc/hostname"}),
        ],
    )
    assert "SECRET" in bare_secret and boxed_secret.startswith("denied") and "SECRET" not in boxed_secret
    assert "OUTSIDE" in bare_out and boxed_out.startswith("denied")
    assert bare_sys.startswith("ok") and boxed_sys.startswith("ok"), "system files stay readable"


def test_writes_go_only_to_cwd_and_a_private_tmpdir_on_landlock(place: EscapePlace) -> None:
    target = place.outside / "escaped.txt"
    answers = probe(place, [("write", {"path": str(target)}), ("write", {"path": str(place.work / "note.txt")})])
    bare_out, boxed_out, bare_cwd, boxed_cwd = answers
    assert bare_out.startswith("ok") and boxed_out.startswith("denied")
    assert bare_cwd.startswith("ok") and boxed_cwd.startswith("ok")
    target.unlink(missing_ok=True)

    async def tmp() -> tuple[str, str, str]:
        async with place.server(LL).session() as conn:
            # The server's TMPDIR is private and writable; /tmp itself is not.
            assert conn.server_pid is not None
            with open(f"/proc/{conn.server_pid}/environ", "rb") as f:
                env = dict(v.split("=", 1) for v in f.read().decode().split("\0") if "=" in v)
            private = str(await conn.call_tool("write", {"path": env["TMPDIR"] + "/x"}))
            host_tmp = str(await conn.call_tool("tmp_write", {"name": f"ll-{os.getpid()}"}))
            return env["TMPDIR"], private, host_tmp

    tmpdir, private, host_tmp = run(tmp())
    print(tmpdir, private, host_tmp)
    assert tmpdir.startswith("/tmp/lovia-mcp-ll-") and private.startswith("ok")
    assert host_tmp.startswith("denied") and not Path(f"/tmp/ll-{os.getpid()}").exists()
    assert not os.path.exists(tmpdir), "the worker removes the private TMPDIR when it exits"


def test_a_host_listener_is_reachable_without_the_sandbox_and_not_on_landlock(
    place: EscapePlace, listener: int
) -> None:
    bare, boxed = probe(place, [("connect", {"host": "127.0.0.1", "port": listener})])
    assert bare == "ok hello" and boxed.startswith("denied")


def test_a_network_allowlist_on_landlock_goes_through_the_proxy_port_only(
    place: EscapePlace, web: int, listener: int
) -> None:
    box = Sandbox(backend="landlock", network=["localhost", "127.0.0.1"])

    async def main() -> tuple[str, str, str, str]:
        async with place.server(box).session() as conn:
            allowed = str(await conn.call_tool("proxy_get", {"url": f"http://localhost:{web}/"}))
            denied = str(await conn.call_tool("proxy_get", {"url": "http://denied.example.test/"}))
            raw = str(await conn.call_tool("connect", {"host": "127.0.0.1", "port": listener}))
            direct = str(await conn.call_tool("connect", {"host": "127.0.0.1", "port": web}))
            return allowed, denied, raw, direct

    allowed, denied, raw, direct = run(main())
    print(allowed, "|", denied, "|", raw, "|", direct)
    assert allowed == "ok 200 hello from the host"
    assert denied.startswith("ok 403") and "denied.example.test" in denied
    assert raw.startswith("denied") and direct.startswith("denied"), "only the proxy's port may be reached"


def test_other_processes_are_listed_but_not_signalled_or_read_on_landlock(place: EscapePlace) -> None:
    me = os.getpid()
    bare_sig, boxed_sig, bare_env, boxed_env, bare_procs, boxed_procs = probe(
        place,
        [
            ("signal", {"pid": me}),
            ("environ", {"pid": me}),
            ("procs", {}),
        ],
    )
    assert bare_sig.startswith("ok") and boxed_sig.startswith("denied")
    assert bare_env.startswith("ok") and boxed_env.startswith("denied")
    # The documented limit: no private pid space, so other processes are listed.
    seen_bare, seen_boxed = int(bare_procs.split()[1]), int(boxed_procs.split()[1])
    print(f"processes visible: {seen_bare} without, {seen_boxed} on landlock")
    assert seen_boxed > 5


def test_proc_sys_and_sys_stay_read_only_on_landlock(place: EscapePlace) -> None:
    # Knobs that refuse the text "escaped" at write(): the open is what is
    # probed (it succeeds bare, as root), and nothing on this machine changes
    # even if the box failed.
    knobs = ["/proc/sys/kernel/pid_max", "/sys/kernel/mm/transparent_hugepage/enabled"]
    answers = probe(place, [("write", {"path": k}) for k in knobs if os.path.exists(k)])
    for bare, boxed in zip(answers[::2], answers[1::2]):
        if os.geteuid() == 0:
            assert "Invalid argument" in bare, "the open succeeded bare; only the value was refused"
        assert boxed.startswith("denied PermissionError"), boxed


def test_a_hidden_path_inside_cwd_is_carved_out_and_its_siblings_stay_usable(place: EscapePlace) -> None:
    (place.work / "keys").mkdir()
    (place.work / "keys" / "token").write_text("SECRET TOKEN\n")
    (place.work / "data.txt").write_text("DATA\n")
    box = Sandbox(backend="landlock", hidden=[str(place.work / "keys")])

    async def main() -> list[str]:
        async with place.server(box).session() as conn:
            return [
                str(await conn.call_tool(t, a))
                for t, a in (
                    ("read", {"path": str(place.work / "keys" / "token")}),
                    ("read", {"path": str(place.work / "data.txt")}),
                    ("write", {"path": str(place.work / "data.txt")}),
                )
            ]

    secret, data, write = run(main())
    print(secret, "|", data, "|", write)
    assert secret.startswith("denied") and data == "ok DATA\n" and write.startswith("ok")


@pytest.mark.parametrize("carved_for", ["a protected entry", "a hidden path"])
def test_a_symlink_in_a_carved_folder_grants_nothing_where_it_points(place: EscapePlace, carved_for: str) -> None:
    """Landlock grants a carved folder's entries one by one; an entry that is a symlink is skipped.

    The links are what a server of an earlier generation could plant in its
    writable cwd: followed while carving, they would carry cwd's write grant
    to a file and a folder anywhere on disk, outside every allowed path.
    """
    if carved_for == "a protected entry":
        (place.work / ".bashrc").write_text("# rc\n")
        box = LL
    else:
        (place.work / "keys").mkdir()
        box = Sandbox(backend="landlock", hidden=[str(place.work / "keys")])
    target = place.outside / "target.txt"
    target.write_text("UNTOUCHED\n")
    folder = place.outside / "folder"
    folder.mkdir()
    (place.work / "to-file").symlink_to(target)
    (place.work / "to-folder").symlink_to(folder)
    (place.work / "plain.txt").write_text("")
    paths = [target, place.work / "to-file", folder / "planted", place.work / "to-folder" / "planted"]

    async def main() -> list[str]:
        async with place.server(box).session() as conn:
            return [
                str(await asyncio.wait_for(conn.call_tool("write", {"path": str(p)}), CALL_WAIT))
                for p in [*paths, place.work / "plain.txt"]
            ]

    *escapes, plain = run(main())
    print(carved_for, escapes, plain)
    assert all(a.startswith("denied") for a in escapes), escapes
    assert target.read_text() == "UNTOUCHED\n" and not any(folder.iterdir())
    assert plain.startswith("ok"), "the carved folder's other entries stay writable"


def _git_checkout(work: Path) -> list[Path]:
    (work / ".git" / "hooks").mkdir(parents=True)
    (work / ".git" / "config").write_text("[core]\n")
    (work / ".vscode").mkdir()
    (work / ".bashrc").write_text("# rc\n")
    (work / ".mcp.json").write_text("{}\n")
    (work / ".mcp.lock.json").write_text("{}\n")
    (work / ".gitmodules").write_text("")
    (work / ".claude").mkdir()
    (work / ".claude" / "settings.json").write_text("{}\n")
    (work / ".cursor").mkdir()
    (work / "src").mkdir()
    return [
        work / ".git" / "hooks" / "pre-commit",
        work / ".git" / "config",
        work / ".vscode" / "tasks.json",
        work / ".bashrc",
        work / ".mcp.json",
        work / ".mcp.lock.json",
        work / ".gitmodules",
        work / ".claude" / "settings.json",
        work / ".cursor" / "mcp.json",
    ]


@pytest.mark.parametrize("backend", ["landlock", "bwrap"])
def test_git_hooks_shell_rc_and_editor_configs_stay_read_only_in_a_writable_cwd(
    place: EscapePlace, backend: str
) -> None:
    from lovia_mcp_worker.sandbox import bwrap

    if backend == "bwrap" and bwrap.BWRAP is None:
        pytest.skip("bubblewrap is not available")
    protected = _git_checkout(place.work)
    (place.work / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    # Existing entries beside the protected ones stay writable (on Landlock,
    # .git's top gets no new files: the documented cost of carving).
    ordinary = [place.work / "src" / "main.py", place.work / ".git" / "HEAD"]

    async def main(box: Sandbox) -> list[str]:
        async with place.server(box).session() as conn:
            return [str(await conn.call_tool("write", {"path": str(p)})) for p in protected + ordinary]

    kept = run(main(Sandbox(backend=backend)))  # type: ignore[arg-type]
    print(kept)
    assert all(a.startswith("denied") for a in kept[: len(protected)]), kept
    assert all(a.startswith("ok") for a in kept[len(protected) :]), kept
    assert (place.work / ".bashrc").read_text() == "# rc\n"
    opted_out = run(main(Sandbox(backend=backend, write_deny=False)))  # type: ignore[arg-type]
    assert all(a.startswith("ok") for a in opted_out), opted_out


def test_read_only_paths_stay_read_only_inside_a_writable_cwd_on_landlock(place: EscapePlace) -> None:
    (place.work / "frozen").mkdir()
    (place.work / "y").write_text("")  # cwd is carved: its existing entries stay writable
    box = Sandbox(backend="landlock", read_only=[str(place.work / "frozen")])

    async def main() -> tuple[str, str]:
        async with place.server(box).session() as conn:
            return (
                str(await conn.call_tool("write", {"path": str(place.work / "frozen" / "x")})),
                str(await conn.call_tool("write", {"path": str(place.work / "y")})),
            )

    frozen, free = run(main())
    assert frozen.startswith("denied") and free.startswith("ok")


# Bound on one lovia-mcp command: about a second (interpreter, worker, server).
CLI_TIMEOUT = 25.0


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "lovia_mcp", *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "120"},
    )


def test_the_cli_sandbox_flags_box_the_server_and_writable_opens_a_path(place: EscapePlace) -> None:
    secret = json.dumps({"path": str(place.outside / "notes.txt")})
    target = json.dumps({"path": str(place.outside / "out" / "w.txt")})
    (place.outside / "out").mkdir()
    server = ["--", PY, ESCAPE_SERVER]
    config = place.work / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"escape": {"command": PY, "args": [ESCAPE_SERVER]}}}))
    with ThreadPoolExecutor(5) as pool:
        bare, boxed, writable, url, check = pool.map(
            lambda a: _cli(*a, cwd=place.work),
            [
                ["call", "read", secret, *server],
                ["call", "read", secret, "--sandbox", "--sandbox-backend", "landlock", *server],
                [
                    "call",
                    "write",
                    target,
                    "--writable",
                    str(place.outside / "out"),
                    "--sandbox-backend",
                    "landlock",
                    *server,
                ],
                ["tools", "--url", "http://127.0.0.1:9/mcp", "--network", "example.com"],
                ["check", "--config", str(config), "--sandbox-backend", "landlock", "-v"],
            ],
        )
    for r in (bare, boxed, writable, url, check):
        print(r.returncode, r.stdout.strip()[:100], r.stderr.strip()[-300:])
    assert bare.returncode == 0 and "OUTSIDE" in bare.stdout
    assert boxed.returncode == 0 and boxed.stdout.startswith("denied")
    assert writable.returncode == 0 and writable.stdout.startswith("ok")
    assert url.returncode == 2 and "--sandbox" in url.stderr and "Traceback" not in url.stderr
    # With --config, the flags box each command entry; -v shows the open's log line.
    assert check.returncode == 0 and "sandbox: landlock" in check.stderr


def test_readable_paths_open_to_reading_only_on_landlock(place: EscapePlace) -> None:
    async def main(box: Sandbox) -> tuple[str, str]:
        async with place.server(box).session() as conn:
            return (
                str(await conn.call_tool("read", {"path": str(place.outside / "notes.txt")})),
                str(await conn.call_tool("write", {"path": str(place.outside / "new.txt")})),
            )

    read, write = run(main(Sandbox(backend="landlock", readable=[str(place.outside)])))
    assert read == "ok OUTSIDE\n" and write.startswith("denied")
    read, _ = run(main(LL))
    assert read.startswith("denied")


def test_a_folder_in_the_arguments_is_not_granted_but_a_script_is(place: EscapePlace) -> None:
    # "/" or a data root handed to a server must not open the file system:
    # only a script's own folder is granted, so that it can run.
    async def main() -> str:
        server = MCPServerStdio(
            command=PY, args=[ESCAPE_SERVER, "/", str(place.outside)], cwd=str(place.work), sandbox=LL
        )
        async with server.session() as conn:
            return str(await conn.call_tool("read", {"path": str(place.outside / "notes.txt")}))

    assert run(main()).startswith("denied")


def test_the_landlock_server_has_no_capabilities_no_new_privs_and_a_seccomp_filter(place: EscapePlace) -> None:
    def status(pid: int) -> dict[str, str]:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)

    async def main(box: Sandbox | None) -> dict[str, str]:
        async with place.server(box).session() as conn:
            assert conn.server_pid is not None
            return status(conn.server_pid)

    bare, boxed = run(main(None)), run(main(LL))
    fields = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
    print({k: (bare.get(k), boxed.get(k)) for k in fields})
    if os.geteuid() == 0:
        assert int(bare["CapEff"], 16) != 0, "root's server has capabilities without the sandbox"
    assert all(int(boxed[k], 16) == 0 for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"))
    assert boxed["NoNewPrivs"] == "1" and boxed["Seccomp"] == "2"


def test_a_readable_home_keeps_home_and_its_secret_stores_stay_hidden(place: EscapePlace) -> None:
    (place.home / "notes.txt").write_text("NOTES\n")
    box = Sandbox(backend="landlock", readable=[str(place.home)])

    async def main() -> tuple[str, str, str]:
        async with place.server(box).session() as conn:
            assert conn.server_pid is not None
            with open(f"/proc/{conn.server_pid}/environ", "rb") as f:
                home = next(v for v in f.read().decode().split("\0") if v.startswith("HOME="))
            return (
                home,
                str(await conn.call_tool("read", {"path": str(place.home / "notes.txt")})),
                str(await conn.call_tool("read", {"path": str(place.home / ".ssh" / "id_rsa")})),
            )

    home, notes, secret = run(main())
    assert home == f"HOME={place.home}" and notes == "ok NOTES\n"
    assert secret.startswith("denied") and "SECRET" not in secret
