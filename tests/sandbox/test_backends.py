"""Backend selection: ``Sandbox(backend="auto" | "bwrap" | "landlock")``.

A machine that refuses user namespaces is simulated as Docker's default
profile does it: a seccomp filter on the *agent* process
(``tests/servers/refused_agent.py``), inherited by its forkserver, workers
and servers, refuses ``unshare``/``clone`` with CLONE_NEWUSER. There ``auto``
must pick Landlock and the probes must still fail, ``bwrap`` must fail with a
reason and a hint, and with Landlock refused too, every sandboxed open fails:
never an unsandboxed server.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PY, ROOT, SERVERS, raw_args, run
from helpers import as_nobody
from lovia.exceptions import MCPError, UserError
from lovia_mcp_worker.containment import machine
from lovia_mcp_worker.sandbox import bwrap, landlock, registry
from lovia_mcp_worker.sandbox.backend import LaunchPlan, SandboxError
from lovia_mcp_worker.wire.messages import ServerSpec

from lovia_mcp import MCPServerStdio, Sandbox
from lovia_mcp.cli._args import build_parser

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")

AGENT = str(SERVERS / "refused_agent.py")
# Bound on one simulated agent run: a forkserver, a worker, one server, four
# calls; about a second unloaded, generous for a loaded 2-core CI.
AGENT_RUN_TIMEOUT = 60


class Where:
    def __init__(self, tmp: Path) -> None:
        self.work = ROOT / ".cache" / f"refused-{os.getpid()}-{tmp.name}" / "work"
        self.work.mkdir(parents=True)
        self.secret = self.work.parent / "secret.txt"
        self.secret.write_text("SECRET\n")


@pytest.fixture
def where(tmp_path: Path) -> Iterator[Where]:
    w = Where(tmp_path)
    yield w
    shutil.rmtree(w.work.parent, ignore_errors=True)


def agent(backend_name: str, where: Where, port: int, *flags: str) -> dict[str, object]:
    proc = subprocess.run(
        [PY, AGENT, backend_name, str(where.work), str(where.secret), str(port), *flags],
        capture_output=True,
        text=True,
        timeout=AGENT_RUN_TIMEOUT,
        cwd=ROOT,
    )
    print(proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.skipif(landlock.ABI < landlock.NETWORK_ABI, reason="needs Landlock ABI 4")
def test_where_user_namespaces_are_refused_auto_picks_landlock_and_the_probes_still_fail(
    where: Where, listener: int
) -> None:
    out = agent("auto", where, listener)
    assert "outputs" in out, out
    secret, connect, signal, write, *probes = out["outputs"]  # type: ignore[misc]
    assert secret.startswith("denied") and connect.startswith("denied")
    assert signal.startswith("denied") and write.startswith("denied")
    assert len(probes) == 12 and all(p.startswith("denied") for p in probes), probes
    assert not (where.work.parent / "escaped.txt").exists()
    assert any("sandbox: landlock" in line for line in out["logs"]), out["logs"]  # type: ignore[attr-defined]


def test_where_user_namespaces_are_refused_backend_bwrap_fails_with_the_reason_and_a_hint(
    where: Where, listener: int
) -> None:
    out = agent("bwrap", where, listener)
    print(out)
    assert "error" in out, "bwrap must not run, let alone unsandboxed"
    assert "user namespaces are refused" in str(out["error"]) or "bubblewrap" in str(out["error"])
    assert "landlock" in str(out["hint"]).lower()


def test_without_user_namespaces_and_without_landlock_a_sandboxed_open_fails_loudly(
    where: Where, listener: int
) -> None:
    out = agent("auto", where, listener, "--no-landlock")
    print(out)
    assert "error" in out, "a sandboxed server must never run unsandboxed"
    assert "no sandbox can be built here" in str(out["error"]) and "Landlock" in str(out["error"])
    assert out["hint"]


@pytest.mark.skipif(bwrap.BWRAP is None, reason="bubblewrap is not available")
def test_auto_uses_namespaces_where_they_can_be_made_and_stats_say_so() -> None:
    if bwrap.userns_refused() is not None:
        pytest.skip("user namespaces are refused on this machine")

    async def main() -> None:
        async with MCPServerStdio(command=PY, args=raw_args(), sandbox=Sandbox()).session() as conn:
            assert (await conn.stats()).sandbox == "bwrap"
        async with MCPServerStdio(command=PY, args=raw_args()).session() as conn:
            assert (await conn.stats()).sandbox is None

    run(main())


def test_a_bad_backend_name_is_refused_with_a_hint() -> None:
    for bad in (Sandbox(backend="docker"), {"backend": "firejail"}):  # type: ignore[arg-type]
        with pytest.raises(UserError) as info:
            MCPServerStdio(command="x", sandbox=bad)  # type: ignore[arg-type]
        assert "backend" in str(info.value) and info.value.hint


def test_the_vscode_block_carries_backend_deny_write_and_denied_domains(tmp_path: Path) -> None:
    block = {
        "backend": "landlock",
        "filesystem": {"denyWrite": ["conf"]},
        "network": {"allowedDomains": ["api.github.com", "pypi.org"], "deniedDomains": ["pypi.org"]},
    }
    server = MCPServerStdio(command="x", sandbox=block)  # type: ignore[arg-type]
    box = server.sandbox
    assert isinstance(box, Sandbox)
    assert box.backend == "landlock" and box.read_only == ["conf"] and box.network == ["api.github.com"]
    with pytest.raises(UserError) as info:
        MCPServerStdio(
            command="x", sandbox={"network": {"allowedDomains": ["*.github.com"], "deniedDomains": ["gist.github.com"]}}
        )
    assert "gist.github.com" in str(info.value) and info.value.hint


def test_an_old_landlock_abi_is_refused_for_a_closed_network_and_accepted_for_the_hosts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Linux 5.13 to 6.6 speak Landlock ABI 1 to 3: no TCP rules, so it could not keep the network closed.
    monkeypatch.setattr(landlock, "ABI", 3)
    why = landlock.unavailable(Sandbox())
    assert why is not None and "ABI 3" in why and "6.7" in why
    assert landlock.unavailable(Sandbox(network=True)) is None
    monkeypatch.setattr(landlock, "ABI", 0)
    assert "no Landlock" in str(landlock.unavailable(Sandbox(network=True)))


def test_landlock_without_scoping_warns_that_signals_are_not_scoped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    if landlock.ABI < landlock.NETWORK_ABI:
        pytest.skip("needs Landlock ABI 4")
    monkeypatch.setattr(landlock, "ABI", 5)  # Linux 6.10: TCP rules, no scoping
    plan = landlock.prepare(Sandbox(), [PY], cwd=str(tmp_path), env={}, proxy_port=None)
    plan.close()
    landlock.cleanup()
    assert any("cannot scope signals" in r.getMessage() for r in caplog.records)


APPARMOR_LIKE = r"""
import os, struct, sys
from lovia_mcp_worker.sandbox import bwrap, seccomp
# Like Ubuntu's AppArmor restriction: a user namespace may be made, but
# nothing needing a capability inside it (here: a mount namespace) works.
nr = seccomp.SYSCALLS[os.uname().machine]["unshare"]
prog = b"".join(struct.pack("<HBBI", *i) for i in (
    (0x20, 0, 0, 0), (0x15, 0, 3, nr),                # A = nr; unshare?
    (0x20, 0, 0, 16), (0x45, 0, 1, 0x00020000),       # A = flags; CLONE_NEWNS?
    (0x06, 0, 0, 0x00050000 | 1),                     # EPERM
    (0x06, 0, 0, 0x7FFF0000),                         # allow
))
seccomp.install(prog)
print(bwrap.userns_refused())
"""


def test_a_user_namespace_without_capabilities_counts_as_refused() -> None:
    proc = subprocess.run([PY, "-c", APPARMOR_LIKE], capture_output=True, text=True, timeout=AGENT_RUN_TIMEOUT)
    print(proc.stdout, proc.stderr[-1000:])
    assert proc.returncode == 0, proc.stderr
    assert "gives no capabilities" in proc.stdout and "CLONE_NEWNS" in proc.stdout


@pytest.mark.skipif(bwrap.userns_refused() is not None, reason="user namespaces are refused here")
def test_a_process_whose_forks_come_out_with_threads_still_finds_that_user_namespaces_work(
    threads_at_fork: None,
) -> None:
    """The probe's child has a thread from an at-fork handler (OpenTelemetry's): it runs the probe as a fresh program."""
    assert bwrap._probe_userns() is None


# An ordinary user's process whose forks come out with a thread (as with an
# OpenTelemetry tracer provider, whose at-fork handler re-detects the
# process's resource on a short-lived thread) probes for user namespaces.
THREADED_FORKS_PROBE = r"""
import os, threading
forever = threading.Event()
os.register_at_fork(after_in_child=lambda: threading.Thread(target=forever.wait, daemon=True).start())
pid = os.fork()
if pid == 0:
    os._exit(len(os.listdir("/proc/self/task")))
print("threads in a fork:", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
from lovia_mcp_worker.sandbox import bwrap
print("refused:", bwrap._probe_userns())
"""


@pytest.mark.skipif(bwrap.userns_refused() is not None, reason="user namespaces are refused here")
def test_as_nobody_a_process_whose_forks_come_out_with_threads_still_finds_user_namespaces() -> None:
    proc = as_nobody(THREADED_FORKS_PROBE)
    print(proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "threads in a fork: 2" in proc.stdout
    assert "refused: None" in proc.stdout


# --- the backend interface: the registry, auto, and a backend added by a test ---


class FakeBackend:
    """A backend the registry does not know: it runs the server as given and records each plan."""

    name = "fake"
    guarantees = {"filesystem": "none (a test backend)"}

    def __init__(self) -> None:
        self.planned: list[list[str]] = []
        self.cleaned = False

    def unavailable(self, box: Sandbox) -> str | None:
        return None

    def hint(self) -> str:
        return "Register the fake backend."

    async def plan(self, spec: ServerSpec, box: Sandbox, argv: list[str], env: dict[str, str]) -> LaunchPlan:
        self.planned.append(argv)
        env["FAKE_BOX"] = "1"  # what a backend may do to the server's environment (its proxy variables)
        return LaunchPlan(self.name, argv)

    def setup_error(self, returncode: int, stderr_tail: list[str]) -> str | None:
        return None  # no wrapper: the server is exec'd as given

    def facts(self) -> dict[str, dict[str, object]]:
        return {"fake_box": {"boxes": False}}

    def describe(self, facts: typing.Mapping[str, object]) -> list[tuple[str, str]]:
        return [("fake box", f"boxes: {facts['fake_box']}")]

    def cleanup(self) -> None:
        self.cleaned = True


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBackend]:
    backend = FakeBackend()
    # Neither built-in backend is available: auto must go on to the registered one.
    monkeypatch.setattr(bwrap.BwrapBackend, "unavailable", lambda self, box: "refused by the test")
    monkeypatch.setattr(landlock.LandlockBackend, "unavailable", lambda self, box: "refused by the test")
    registry.register(backend)
    try:
        yield backend
    finally:
        registry.unregister(backend.name)


def test_a_registered_backend_is_picked_by_auto_and_reported_by_stats(fake: FakeBackend) -> None:
    assert "fake" in registry.names()

    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), sandbox=Sandbox(), isolation="none")
        async with server.session() as conn:
            assert (await conn.stats()).sandbox == "fake"
            await conn.call_tool("echo", {"text": "x"})

    run(main())
    assert len(fake.planned) == 1 and fake.planned[0][0] == PY, fake.planned


def test_the_cli_offers_a_registered_backend(fake: FakeBackend) -> None:
    ns = build_parser().parse_args(["tools", "--sandbox-backend", "fake"])
    assert ns.sandbox_backend == "fake"
    registry.unregister("fake")
    with pytest.raises(SystemExit):  # argparse refuses a name the registry does not hold
        build_parser().parse_args(["tools", "--sandbox-backend", "fake"])


def test_where_no_registered_backend_is_available_auto_names_each_reason(
    fake: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakeBackend, "unavailable", lambda self, box: "the fake is off")
    with pytest.raises(SandboxError) as info:
        registry.pick(Sandbox())
    text = str(info.value)
    assert "no sandbox can be built here" in text and "fake: the fake is off" in text, text
    assert "bwrap: refused by the test" in text and "landlock: refused by the test" in text
    assert info.value.hint


def test_a_registered_backend_reports_its_own_kernel_facts_beside_the_builtin_ones(fake: FakeBackend) -> None:
    kernel = machine.facts()
    assert kernel["fake_box"] == {"boxes": False}
    # The built-in backends' facts come from the backends themselves, under the keys the doctor documents.
    assert kernel["user_namespaces"] == bwrap.user_namespaces() and kernel["landlock"] == landlock.kernel_facts()
    assert set(kernel) == {"release", "machine", "euid", "user_namespaces", "bwrap", "landlock", "fake_box", "seccomp"}
    assert machine.facts(["fake"])["fake_box"] == {"boxes": False} and "landlock" not in machine.facts(["fake"])
    registry.cleanup()
    assert fake.cleaned


def test_two_backends_that_report_the_same_kernel_fact_are_refused_naming_the_second(
    fake: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakeBackend, "facts", lambda self: {"landlock": {"abi": 99}})
    with pytest.raises(ValueError, match="the fake sandbox backend reports the kernel fact 'landlock'"):
        machine.facts()


# A backend module by its import path, or imported from the sandbox package.
BACKEND_MODULE = re.compile(r"sandbox\.(bwrap|landlock)\b|sandbox import[^\n]*\b(bwrap|landlock)\b")


def test_no_module_outside_the_sandbox_package_names_a_backend_module() -> None:
    # The registry is the one way to a backend (its facts, exec error, cleanup), so a new one is one module.
    sandbox = ROOT / "worker" / "lovia_mcp_worker" / "sandbox"
    for path in [*(ROOT / "lovia_mcp").rglob("*.py"), *(ROOT / "worker").rglob("*.py")]:
        if sandbox not in path.parents:
            assert not BACKEND_MODULE.search(path.read_text()), path


# A sequence of the builtin names, or a table keyed by them (one entry after
# the other); a dict that happens to hold a "bwrap" fact is neither.
BACKEND_LIST = re.compile(r'"(bwrap|landlock)",\s*"(bwrap|landlock)"')
BACKEND_TABLE = re.compile(r'"(bwrap|landlock)":[^\n]*\n\s*"(bwrap|landlock)":')


def test_every_list_of_backend_names_agrees_with_the_registry() -> None:
    wire = typing.get_args(typing.get_type_hints(Sandbox)["backend"])
    assert wire == registry.names() == ("auto", *registry.BUILTIN), (wire, registry.names())
    for name in registry.names():
        assert build_parser().parse_args(["tools", "--sandbox-backend", name]).sandbox_backend == name
        assert isinstance(MCPServerStdio(command="x", sandbox={"backend": name}).sandbox, Sandbox)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["tools", "--sandbox-backend", "firejail"])
    for name in registry.BUILTIN:
        backend = registry.get(name)
        assert backend.name == name and backend.guarantees
    # The names are listed once, on the wire (BuiltinBackend): the registry
    # derives its own from there, so a new backend is one module and one name.
    for path in [*(ROOT / "lovia_mcp").rglob("*.py"), *(ROOT / "worker").rglob("*.py")]:
        text = path.read_text()
        listed = bool(BACKEND_LIST.search(text)) or bool(BACKEND_TABLE.search(text))
        assert listed == (path.name == "confinement.py"), path


@pytest.mark.parametrize("backend", [None, "bwrap", "landlock"])
def test_a_command_the_box_cannot_execute_fails_with_the_same_exec_error_as_unboxed(
    backend: str | None, tmp_path: Path
) -> None:
    # bwrap executes the command itself and says why it could not on stderr; the backend reads
    # that back (Backend.setup_error), so the caller's error is the unboxed one.
    if backend == "bwrap" and bwrap.userns_refused() is not None:
        pytest.skip("user namespaces are refused here")
    if backend == "landlock" and landlock.unavailable(Sandbox(backend="landlock")):
        pytest.skip("Landlock is not available here")
    script = tmp_path / "server"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    box = None if backend is None else Sandbox(backend=backend)
    server = MCPServerStdio(command=str(script), name="x", cwd=tmp_path, sandbox=box)

    async def main() -> None:
        async with server.session():
            pass

    with pytest.raises(MCPError) as failed:
        run(main())
    print(failed.value)
    assert f"could not start '{script}': No such file or directory" in str(failed.value)
