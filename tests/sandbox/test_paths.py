"""A sandbox path swapped for a symlink between two starts is refused, never followed (issue 34, attack 1).

The attack (``tests/servers/swap_server.py``): a server whose sandbox path
lies inside a folder it may write (``cwd=P``, ``writable=[P/a/out]``; a cwd
inside a writable path; a ``readable`` path inside cwd) renames a folder on
that path away, puts a symlink to a folder outside every granted path where
the path was, and crashes mid-call. The call is retried on the next
generation, which would write (or read) through the link. Each start opens
the paths as they were pinned when the server was opened, without following
a symlink, and refuses a changed one: the caller gets an ``MCPError`` naming
the path, and the outside folder is untouched.

Without the fix (paths granted as they resolve at each start; shown by
reverting it), the retried call answers ``wrote <outside>/escaped.txt`` on
both backends for the writable shapes: bwrap bound the link's target
read-write (a relative link; an absolute one makes bwrap fail to mount),
Landlock granted it. The outside folder is a *sibling* of cwd, so a
Landlock that granted writes to cwd's parent would fail
:func:`test_a_sandboxed_server_cannot_write_next_to_its_cwd` too.

Each backend runs as root here, in an agent where user namespaces are
refused (``backend="auto"`` then takes Landlock) and where ``openat2`` is
refused (the component walk then opens the paths), and as an ordinary user.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import PY, ROOT, SERVERS, nobody_python, run
from lovia_mcp_worker.sandbox import bwrap, landlock, pinned
from lovia_mcp_worker.sandbox.backend import SandboxError
from lovia_mcp_worker.wire.confinement import PathPin

from lovia_mcp import MCPError, MCPServerStdio, Sandbox

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")

SWAP_SERVER = str(SERVERS / "swap_server.py")
BACKENDS = (["bwrap"] if bwrap.BWRAP is not None and bwrap.userns_refused() is None else []) + (
    ["landlock"] if landlock.ABI >= landlock.NETWORK_ABI else []
)
# Bound on one call that crashes its server and is retried on a fresh one
# (two sandboxed starts, ~0.1 s each); the margin is for a loaded 2-core machine.
CALL_WAIT = 30.0
# Bound on a whole agent run in a child interpreter (imports, worker, two starts).
AGENT_WAIT = 60.0
NOBODY = 65534
SECRET = "OUTSIDE SECRET"


class Place:
    """``base/work`` (the server's cwd, holding ``a/out`` and ``r/in``) and ``base/outside``, its sibling."""

    def __init__(self, base: Path) -> None:
        self.work = base / "work"
        (self.work / "a" / "out").mkdir(parents=True)
        (self.work / "sub").mkdir()
        (self.work / "r" / "in").mkdir(parents=True)
        self.outside = base / "outside"
        self.outside.mkdir()
        (self.outside / "secret.txt").write_text(SECRET + "\n")

    def untouched(self) -> bool:
        return sorted(p.name for p in self.outside.iterdir()) == ["secret.txt"]


# shape -> (cwd, sandbox paths, the swap's path, the folder it moves, the link): relative to work.
SHAPES: dict[str, tuple[str, dict[str, list[str]], str, str, str]] = {
    # The issue's own: a relative link on bwrap, where an absolute one cannot be mounted.
    "writable_relative_link": (".", {"writable": ["a/out"]}, "a/out", "a", "../../outside"),
    "writable_absolute_link": (".", {"writable": ["a/out"]}, "a/out", "a", "{outside}"),
    "cwd_inside_writable": ("sub", {"writable": ["."]}, "sub", "sub", "../outside"),
    "readable": (".", {"readable": ["r/in"]}, "r/in", "r", "{outside}"),
}


def _swap_args(place: Place, shape: str, backend_name: str) -> tuple[MCPServerStdio, dict[str, object], Path]:
    cwd, paths, path, moved, link = SHAPES[shape]
    box = Sandbox(backend=backend_name, **{k: [str(place.work / p) for p in v] for k, v in paths.items()})  # type: ignore[arg-type]
    return (
        MCPServerStdio(command=PY, args=[SWAP_SERVER], name="swap", cwd=str(place.work / cwd), sandbox=box),
        {"path": str(place.work / path), "moved": str(place.work / moved), "link": link.format(outside=place.outside)},
        place.work / path,
    )


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("backend_name", BACKENDS)
def test_a_path_swapped_for_a_symlink_refuses_the_next_start_and_the_outside_stays_untouched(
    tmp_path: Path, backend_name: str, shape: str
) -> None:
    place = Place(tmp_path)
    server, args, swapped = _swap_args(place, shape, backend_name)

    async def main() -> tuple[str, MCPError | str]:
        async with server.session() as conn:
            used = (await conn.stats()).sandbox
            try:
                went = str(await asyncio.wait_for(conn.call_tool("swap", args), CALL_WAIT))
            except MCPError as exc:
                return str(used), exc
            return str(used), went

    used, outcome = run(main())
    print(backend_name, shape, "|", outcome, "|", getattr(outcome, "hint", ""))
    assert used == backend_name
    assert os.path.islink(swapped), "the first generation did not swap the path: the probe did not run"
    assert isinstance(outcome, MCPError), f"the next generation started and went through the link: {outcome}"
    assert pinned.PATH_CHANGED in str(outcome) and str(swapped) in str(outcome)
    assert "symlink" in str(outcome) and outcome.hint
    assert place.untouched(), sorted(p.name for p in place.outside.iterdir())


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_a_sandboxed_server_cannot_write_next_to_its_cwd(tmp_path: Path, backend_name: str) -> None:
    # The sibling and the parent of cwd: a Landlock rule on cwd's parent would open both.
    place = Place(tmp_path)
    server = MCPServerStdio(
        command=PY, args=[SWAP_SERVER], name="swap", cwd=str(place.work), sandbox=Sandbox(backend=backend_name)
    )  # type: ignore[arg-type]

    async def main() -> list[str]:
        async with server.session() as conn:
            return [
                str(await conn.call_tool("write", {"path": str(p)}))
                for p in (place.outside / "x.txt", tmp_path / "x.txt", place.work / "inside.txt")
            ]

    sibling, parent, inside = run(main())
    print(backend_name, sibling, parent, inside, sep=" | ")
    assert sibling.startswith("denied") and parent.startswith("denied")
    assert inside.startswith("ok")
    assert place.untouched() and not (tmp_path / "x.txt").exists()


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_the_pinned_paths_descriptors_never_reach_the_server(tmp_path: Path, backend_name: str) -> None:
    place = Place(tmp_path)
    server = MCPServerStdio(
        command=PY,
        args=[SWAP_SERVER],
        name="swap",
        cwd=str(place.work),
        sandbox=Sandbox(
            writable=[str(place.work / "a" / "out")], readable=[str(place.work / "r" / "in")], backend=backend_name
        ),
    )  # type: ignore[arg-type]

    async def main() -> str:
        async with server.session() as conn:
            return str(await conn.call_tool("fds"))

    fds = [int(fd) for fd in run(main()).split()]
    print(backend_name, fds)
    # 0-2, and the descriptor listdir opened to read /proc/self/fd.
    assert len([fd for fd in fds if fd > 2]) <= 1, fds


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_a_link_one_connection_left_redirects_no_later_connection_but_a_folder_made_again_is_accepted(
    tmp_path: Path, backend_name: str
) -> None:
    # Per-run connections re-open the same config: the path resolves as it did the first time.
    place = Place(tmp_path)
    out = place.work / "a" / "out"
    server = MCPServerStdio(
        command=PY,
        args=[SWAP_SERVER],
        name="swap",
        cwd=str(place.work),
        sandbox=Sandbox(writable=[str(out)], backend=backend_name),
    )  # type: ignore[arg-type]

    async def once() -> str:
        async with server.session() as conn:
            return str(await conn.call_tool("write", {"path": str(out / "note.txt")}))

    assert run(once()).startswith("ok")
    out.rename(place.work / "a" / "old")
    out.mkdir()  # the user made the folder again: a real folder at the same place
    assert run(once()).startswith("ok")
    shutil.rmtree(out)
    out.symlink_to(place.outside)  # what the earlier server could have left behind
    with pytest.raises(MCPError) as info:
        run(once())
    print(info.value, info.value.hint)
    assert pinned.PATH_CHANGED in str(info.value) and str(out) in str(info.value)
    assert place.untouched()


# --------------------------------------------------------------------------- #
# The same attack in a fresh agent: refused user namespaces, refused openat2, an ordinary user
# --------------------------------------------------------------------------- #
AGENT = r"""
import asyncio, json, os, struct, sys
from lovia_mcp import MCPError, MCPServerStdio, Sandbox
from lovia_mcp_worker.sandbox import seccomp
server_script, work, backend, link, refuse = sys.argv[1:6]
nr = seccomp.SYSCALLS[os.uname().machine]
if "userns" in refuse:  # Docker's default profile: bwrap cannot make its namespaces
    seccomp.install(seccomp.deny_new_user_namespaces())
if "openat2" in refuse:  # an older profile or kernel: openat2 is ENOSYS, the walk serves
    prog = b"".join(struct.pack("<HBBI", *i) for i in (
        (0x20, 0, 0, 0), (0x15, 0, 1, 437),
        (0x06, 0, 0, 0x00050000 | 38),  # ENOSYS
        (0x06, 0, 0, 0x7FFF0000),
    ))
    seccomp.install(prog)
async def main():
    out = os.path.join(work, "a", "out")
    server = MCPServerStdio(command=sys.executable, args=[server_script], cwd=work,
                            sandbox=Sandbox(writable=[out], backend=backend))
    async with server.session() as conn:
        used = (await conn.stats()).sandbox
        try:
            went = str(await conn.call_tool("swap", {"path": out, "moved": os.path.join(work, "a"), "link": link}))
        except MCPError as exc:
            went = "refused: " + str(exc)
    print(json.dumps({"backend": used, "outcome": went, "swapped": os.path.islink(out)}))
asyncio.run(main())
"""


def _agent(
    argv: list[str],
    work: Path,
    backend_name: str,
    link: str,
    refuse: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> dict[str, object]:
    proc = subprocess.run(
        [*argv, "-c", AGENT, SWAP_SERVER, str(work), backend_name, link, refuse],
        capture_output=True,
        text=True,
        timeout=AGENT_WAIT,
        env=env,
        cwd=cwd,
        check=False,
    )
    print(proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return seen


def _expect_refused(seen: dict[str, object], backend_name: str, place: Place) -> None:
    assert seen["backend"] == backend_name and seen["swapped"] is True, seen
    assert str(seen["outcome"]).startswith("refused: ") and pinned.PATH_CHANGED in str(seen["outcome"]), seen
    assert place.untouched()


@pytest.mark.skipif(landlock.ABI < landlock.NETWORK_ABI, reason="needs Landlock ABI 4 (Linux 6.7+)")
def test_where_user_namespaces_are_refused_auto_takes_landlock_and_refuses_the_swap(tmp_path: Path) -> None:
    place = Place(tmp_path)
    seen = _agent([PY], place.work, "auto", str(place.outside), "userns")
    _expect_refused(seen, "landlock", place)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_where_openat2_is_refused_the_component_walk_refuses_the_swap(tmp_path: Path, backend_name: str) -> None:
    place = Place(tmp_path)
    link = "../../outside" if backend_name == "bwrap" else str(place.outside)
    seen = _agent([PY], place.work, backend_name, link, "openat2")
    _expect_refused(seen, backend_name, place)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_as_an_ordinary_user_the_swap_is_refused(backend_name: str) -> None:
    """The agent, worker and server as nobody, with an interpreter nobody can read (not /root's)."""
    python, site = nobody_python()
    base = ROOT / ".cache" / f"paths-nobody-{os.getpid()}-{backend_name}"  # pytest's tmp dirs are root's alone
    try:
        place = Place(base)
        for p in [base, *base.rglob("*")]:
            os.chown(p, NOBODY, NOBODY)
        link = "../../outside" if backend_name == "bwrap" else str(place.outside)
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(place.work),
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "worker"), str(site)]),
        }
        seen = _agent(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python],
            place.work,
            backend_name,
            link,
            "",
            env=env,
            cwd=place.work,
        )
        _expect_refused(seen, backend_name, place)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------- #
# The pieces, without processes
# --------------------------------------------------------------------------- #
@pytest.mark.unit
@pytest.mark.parametrize("walk", [False, True], ids=["openat2", "walk"])
def test_a_path_is_opened_without_following_any_symlink_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, walk: bool
) -> None:
    if walk:
        monkeypatch.setattr(pinned, "_has_openat2", False)
    (tmp_path / "real" / "dir").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "tail").symlink_to(tmp_path / "real" / "dir")
    fd = pinned.open_unfollowed(str(tmp_path / "real" / "dir"))
    try:
        st = os.fstat(fd)
        assert (st.st_dev, st.st_ino) == (
            os.stat(tmp_path / "real" / "dir").st_dev,
            os.stat(tmp_path / "real" / "dir").st_ino,
        )
    finally:
        os.close(fd)
    for through in (tmp_path / "link" / "dir", tmp_path / "real" / "tail"):  # a link on the way, a link at the end
        with pytest.raises(OSError) as info:
            pinned.open_unfollowed(str(through))
        assert info.value.errno == 40, info.value  # ELOOP
    with pytest.raises(FileNotFoundError):
        pinned.open_unfollowed(str(tmp_path / "missing"))


@pytest.mark.unit
def test_the_agent_pins_cwd_writable_and_readable_once_and_keeps_the_first_resolution(tmp_path: Path) -> None:
    from lovia_mcp.config import _sandbox

    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real")
    box = _sandbox.resolved(Sandbox(writable=["via"], readable=["gone"]), str(tmp_path))
    st = os.stat(tmp_path / "real")
    # A symlink in the configured path itself is resolved once, here: fine.
    assert box.pins[str(tmp_path / "via")] == PathPin(str(tmp_path / "real"), st.st_dev, st.st_ino)
    assert box.pins[str(tmp_path / "gone")] == PathPin(str(tmp_path / "gone"))  # nothing there: 0, 0
    assert box.pins[str(tmp_path)].ino == os.stat(tmp_path).st_ino
    (tmp_path / "via").unlink()
    (tmp_path / "other").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "other")  # re-pointed later: the first resolution stands
    again = _sandbox.resolved(Sandbox(writable=["via"]), str(tmp_path))
    assert again.pins[str(tmp_path / "via")].real == str(tmp_path / "real")
    given = _sandbox.coerce(Sandbox(pins={str(tmp_path / "via"): PathPin("/")}))
    assert given is not None and given.pins == {}  # pins are the agent's to make, never the user's


@pytest.mark.unit
def test_the_worker_refuses_a_changed_or_missing_path_with_a_hint_and_leaves_out_a_missing_readable(
    tmp_path: Path,
) -> None:
    from lovia_mcp.config import _sandbox

    for name in ("cwd", "w", "r"):
        (tmp_path / name).mkdir()
    cwd = str(tmp_path / "cwd")
    box = _sandbox.resolved(Sandbox(writable=[str(tmp_path / "w")], readable=["../r", "../nothing"]), cwd)
    held = pinned.hold(box, cwd)
    try:
        assert set(held.paths) == {cwd, str(tmp_path / "w"), str(tmp_path / "r")}
        assert all(os.fstat(fd).st_ino == os.stat(real).st_ino for real, fd in held.paths.values())
    finally:
        held.close()
    (tmp_path / "r").rename(tmp_path / "r2")
    (tmp_path / "r").mkdir()  # another folder at the same place
    with pytest.raises(SandboxError) as info:
        pinned.hold(box, cwd)
    assert str(info.value) == f"{pinned.PATH_CHANGED}: {tmp_path / 'r'} (another file is there now)"
    assert info.value.hint
    missing = _sandbox.resolved(Sandbox(writable=["nope"]), cwd)
    with pytest.raises(SandboxError) as info:
        pinned.hold(missing, cwd)
    assert "does not exist" in str(info.value) and "nope" in str(info.value)


@pytest.mark.unit
def test_a_spec_without_pins_is_pinned_by_the_first_start_in_the_worker(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    box = Sandbox(writable=[str(tmp_path / "w")])
    pinned.hold(box, None).close()  # pins it, as the worker's first start does
    (tmp_path / "w").rename(tmp_path / "w2")
    (tmp_path / "w").symlink_to(tmp_path / "w2")
    with pytest.raises(SandboxError) as info:
        pinned.hold(box, None)
    assert "a symlink is in it now" in str(info.value)


@pytest.mark.unit
@pytest.mark.skipif(bwrap.BWRAP is None, reason="bubblewrap is not available")
def test_bwrap_binds_the_held_descriptors_at_the_resolved_paths_and_a_nested_writable_path_once() -> None:
    held = {"/srv/link": ("/srv/p", 7), "/srv/p/a/out": ("/srv/p/a/out", 8), "/data": ("/data", 9)}
    argv = bwrap.command(
        Sandbox(writable=["/srv/p/a/out", "/data"], write_deny=False),
        ["/bin/true"],
        cwd="/srv/link",
        env={},
        seccomp_fd=3,
        held=held,
    )
    binds = [argv[i : i + 3] for i, a in enumerate(argv) if a in ("--bind", "--bind-fd")]
    assert binds == [["--bind-fd", "7", "/srv/p"], ["--bind-fd", "9", "/data"]]
    assert argv[argv.index("--chdir") + 1] == "/srv/p"
