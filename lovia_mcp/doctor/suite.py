"""The probe suite: plant targets outside the box, run :mod:`.probes` inside each backend's real box.

Lifecycle: :class:`Targets` plants, outside any box, what the probes aim at:
a secret in a secret store (``~/.ssh`` of a home of its own, which every
backend hides), a folder outside the server's cwd to write into, a listener
on the loopback, a unix socket, and another process whose environment holds
a secret. :func:`run_backend` then opens the probe server
(``python probes.py``) exactly as an agent opens a sandboxed server
(``MCPServerStdio(sandbox=Sandbox(backend=NAME, network=False))``, a worker
process, the backend's real plan) and calls each probe in it.
:meth:`Targets.close` stops the listeners and the process and removes what
was planted.

Each probe ends ``held``, ``escaped`` or ``skipped``, with its reason.
``skipped`` is for what this machine cannot try (a socket path too long
for a unix socket) and for a backend that is not available here.

Caveats: the targets are made in the user's cache folder (not ``/tmp``,
which a bwrap box replaces by a private one: a target there would be
missing rather than refused); the probes run with the doctor's own user
and means, so as root they try root's escapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import lovia_mcp_worker.sandbox.registry as registry
from lovia.exceptions import LoviaError
from lovia_mcp_worker.wire.confinement import Sandbox

from ..config._isolation import Isolation
from ..opening.servers import MCPServerStdio
from . import probes

Outcome = Literal["held", "escaped", "skipped"]

# Bound on opening the probe server in a box: a worker, the box, a Python
# start; about a second unloaded, generous for a loaded 2-core machine.
OPEN_WAIT: Final = 60.0
# Bound on one probe: each makes a few system calls, forks at most one child
# and connects to a local listener that answers at once.
PROBE_WAIT: Final = 30.0
# Bound on the planted process's exit once its stdin closes (it exits at once).
PLANTED_EXIT_WAIT: Final = 5.0
# Bound on a planted listener's thread after its socket is closed.
LISTENER_JOIN_WAIT: Final = 5.0
# A unix socket's path must fit in sockaddr_un.sun_path (108 bytes, with its NUL).
UNIX_PATH_MAX: Final = 107

# What each probe tries, in the order they run and are reported.
DESCRIPTIONS: Final = {
    "secret": "read a secret planted outside the box, in a secret store (~/.ssh)",
    "write_outside": "write outside the server's cwd and writable paths",
    "loopback": "connect to a listener on the host's loopback with network=False",
    "unix_socket": "connect to a unix socket planted on the host",
    "other_environ": "read another process's environment (/proc/PID/environ)",
    "mount": "mount a file system",
    "namespace": "make a new user or network namespace",
    "ptrace": "use ptrace",
}
assert set(DESCRIPTIONS) == set(probes.PROBES), "every probe is described, every description has a probe"


@dataclass
class ProbeResult:
    outcome: Outcome
    reason: str
    broken: bool = False  # skipped because the probe itself failed: nothing was shown either way


@dataclass
class BackendReport:
    """One backend: available here or why not, and each probe's result inside its box."""

    name: str
    available: bool
    reason: str | None
    probes: dict[str, ProbeResult] = field(default_factory=dict)
    error: str | None = None  # available, yet its box did not start

    @property
    def held(self) -> bool:
        """Available, started, and nothing escaped (a probe that broke counts against it)."""
        return (
            self.available
            and self.error is None
            and all(r.outcome != "escaped" and not r.broken for r in self.probes.values())
        )

    def as_json(self) -> dict[str, object]:
        return {
            "available": self.available,
            "reason": self.reason,
            "error": self.error,
            "probes": {name: r.outcome for name, r in self.probes.items()},
            "reasons": {name: r.reason for name, r in self.probes.items()},
        }


def _cache_dir() -> Path:
    """Where the targets go: the user's cache folder, outside /tmp (see the module's caveats)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(base) / "lovia-mcp"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return Path(tempfile.gettempdir())
    return path


class _Listener:
    """A stream listener that sends ``marker`` to whoever connects, on a thread, until closed."""

    def __init__(self, sock: socket.socket, marker: bytes) -> None:
        self.sock = sock
        self.thread = threading.Thread(target=self._serve, args=(marker,), name="doctor-listener", daemon=True)
        self.thread.start()

    def _serve(self, marker: bytes) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with conn:
                with contextlib.suppress(OSError):
                    conn.sendall(marker)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(LISTENER_JOIN_WAIT)


class Targets:
    """What the probes aim at, planted outside the box; :meth:`close` removes all of it."""

    def __init__(self) -> None:
        self.marker = f"LOVIA-MCP-DOCTOR-{secrets.token_hex(8)}"
        self.root = Path(tempfile.mkdtemp(prefix="doctor-", dir=_cache_dir()))
        self.home = self.root / "home"
        self.work = self.root / "work"
        self.outside = self.root / "outside"
        for folder in (self.home / ".ssh", self.work, self.outside):
            folder.mkdir(parents=True)
        self.secret = self.home / ".ssh" / "id_doctor"
        self.secret.write_text(f"{self.marker}\n")
        self.secret.chmod(0o600)
        self._listeners: list[_Listener] = []
        self._process: subprocess.Popen[bytes] | None = None
        self._socket_dir: str | None = None
        self.port = 0
        self.unix_path: str | None = None
        self.skips: dict[str, str] = {}
        try:
            tcp = socket.create_server(("127.0.0.1", 0))
            self.port = tcp.getsockname()[1]
            self._listeners.append(_Listener(tcp, self.marker.encode()))
            self._plant_unix_socket()
            self._process = subprocess.Popen(
                [sys.executable, "-c", "import sys; sys.stdin.buffer.read()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                env={"PATH": os.environ.get("PATH", ""), "LOVIA_MCP_DOCTOR_SECRET": self.marker},
            )
        except BaseException:
            self.close()
            raise

    def _plant_unix_socket(self) -> None:
        path = str(self.root / "host.sock")
        if len(os.fsencode(path)) > UNIX_PATH_MAX:
            # A deep cache folder: a short one of its own in the temporary folder instead.
            self._socket_dir = tempfile.mkdtemp(prefix="lovia-mcp-doctor-")
            path = os.path.join(self._socket_dir, "host.sock")
        if len(os.fsencode(path)) > UNIX_PATH_MAX:
            self.skips["unix_socket"] = f"the socket's path would be longer than {UNIX_PATH_MAX} bytes: {path}"
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            sock.listen()
        except OSError as exc:
            sock.close()
            self.skips["unix_socket"] = f"could not plant a unix socket at {path}: {exc.strerror or exc}"
            return
        self.unix_path = path
        self._listeners.append(_Listener(sock, self.marker.encode()))

    def args(self, name: str) -> dict[str, object]:
        """The coordinates ``name`` aims at."""
        assert self._process is not None
        coordinates: dict[str, dict[str, object]] = {
            "secret": {"path": str(self.secret), "marker": self.marker},
            "write_outside": {"path": str(self.outside / "written")},
            "loopback": {"port": self.port, "marker": self.marker, "pid": os.getpid()},
            "unix_socket": {"path": self.unix_path, "marker": self.marker},
            "other_environ": {"pid": self._process.pid, "marker": self.marker},
            "mount": {"path": str(self.work / "mnt")},
        }
        return coordinates.get(name, {})

    def server(self, backend: str, isolation: Isolation | None) -> MCPServerStdio:
        """The probe server in ``backend``'s box, with the network closed, as an agent would open it."""
        return MCPServerStdio(
            command=sys.executable,
            args=[probes.__file__],
            name=f"doctor-{backend}",
            cwd=str(self.work),
            env={"HOME": str(self.home), "LOVIA_MCP_HOST_MNT": os.readlink("/proc/self/ns/mnt")},
            sandbox=Sandbox(network=False, backend=backend),  # type: ignore[arg-type]  # a registered one too
            isolation=isolation,
            auto_reconnect=False,
            open_timeout=OPEN_WAIT,
        )

    def close(self) -> None:
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        if self._process is not None:
            with contextlib.suppress(OSError):
                assert self._process.stdin is not None
                self._process.stdin.close()
            try:
                self._process.wait(PLANTED_EXIT_WAIT)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        shutil.rmtree(self.root, ignore_errors=True)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)


def backend_names() -> list[str]:
    """Every backend the registry holds, in the order ``auto`` tries them."""
    return [name for name in registry.names() if name != registry.AUTO]


def _outcome(answer: str) -> ProbeResult:
    kind, _, reason = answer.partition(": ")
    if kind == "held":
        return ProbeResult("held", reason)
    if kind == "escaped":
        return ProbeResult("escaped", reason)
    # The probe itself broke: nothing was shown either way; the report says so and fails.
    return ProbeResult("skipped", f"the probe broke: {answer}", broken=True)


async def run_backend(name: str, targets: Targets, *, isolation: Isolation | None = None) -> BackendReport:
    """``name``'s availability here and, where available, every probe run inside its box."""
    backend = registry.get(name)
    why = backend.unavailable(Sandbox(network=False, backend=name))  # type: ignore[arg-type]
    report = BackendReport(name=name, available=why is None, reason=why)
    if why is not None:
        report.probes = {p: ProbeResult("skipped", f"the {name} backend is not available here") for p in DESCRIPTIONS}
        return report
    server = targets.server(name, isolation)
    try:
        async with server.session() as conn:
            used = (await conn.stats()).sandbox
            if used != name:
                report.error = f"the server ran in the {used!r} box, not {name!r}"
                return report
            for probe in DESCRIPTIONS:
                if probe in targets.skips:
                    report.probes[probe] = ProbeResult("skipped", targets.skips[probe])
                    continue
                result = await asyncio.wait_for(
                    conn.call_tool("probe", {"name": probe, "args": targets.args(probe)}), PROBE_WAIT
                )
                text = "".join(getattr(block, "text", "") for block in result.content)
                report.probes[probe] = _outcome(text)
    except LoviaError as exc:
        hint = getattr(exc, "hint", None)
        report.error = f"the box did not start: {exc}" + (f" ({hint})" if hint else "")
    except (asyncio.TimeoutError, OSError) as exc:
        report.error = f"the probes did not finish: {type(exc).__name__}: {exc}"
    if report.error is not None:
        for probe in DESCRIPTIONS:
            report.probes.setdefault(probe, ProbeResult("skipped", report.error))
    return report


__all__ = [
    "DESCRIPTIONS",
    "OPEN_WAIT",
    "PROBE_WAIT",
    "BackendReport",
    "Outcome",
    "ProbeResult",
    "Targets",
    "backend_names",
    "run_backend",
]
