"""How a boxed server reaches its proxy: the proxy variables, the bridge's command lines, the deny-all route.

The bridge is ``_netbridge.py``, a script run inside the box. With an
allowlist it forwards to the worker's proxy (:mod:`.netroute`). With the
network off (bwrap), :func:`route_closed` gives the box a deny-all listener
instead: a socket the worker makes inside the box's own network namespace
(bwrap tells it the box's pid through ``--json-status-fd``) and serves from
its own event loop. It answers every request with a 403 and reports its
request line to the reporter the launch was made under (:mod:`.reporter`);
it connects nowhere, so nothing in that box can reach anything of the
worker's but that listener. The launching task expects its readiness
(:func:`.reporter.expect`), and the session host holds calls until then
(about a millisecond after bwrap made the namespaces).

Light on purpose: a box with the network off gets the deny-all listener on
every start, so this module is on the path of every sandboxed start, while
the proxy itself (:mod:`.netproxy`, :mod:`.netrequest`: about 10 ms of
imports) loads only where a server has an allowlist, or when a deny-all
listener first reports a request.

Entering the box's network namespace takes CAP_SYS_ADMIN in the caller's
own user namespace: as root a short-lived thread enters it (about 0.1 ms);
an ordinary user's worker forks a helper that enters the box's user
namespace first, which its owner may (about 3 ms; :mod:`._namespaces` has the
system calls, and is the program a forked helper with threads becomes).

Lifecycle: a box's listener closes when its bwrap ends (the status pipe's
end of file), when its reporter is released (:func:`release`, the host
closes) or when the worker ends (:func:`close_all`); nothing is left on
disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ...wire.refusals import EgressRefusal, words
from .. import _namespaces
from . import reporter

logger = logging.getLogger("lovia_mcp.netproxy")

# The port the bridge listens on inside the sandbox. The sandbox has a fresh
# network namespace, so any port is free there; 3128 is the customary proxy
# port, which reads well in a server's logs.
BRIDGE_PORT: Final = 3128

# The bridge script, run inside the sandbox with the standard library only.
BRIDGE_SCRIPT: Final = str(Path(__file__).with_name("_netbridge.py"))


def proxy_env(port: int = BRIDGE_PORT) -> dict[str, str]:
    """The variables that point a sandboxed server at the bridge on ``127.0.0.1:port``.

    Both spellings, since tools differ in which they read. Loopback names
    bypass the proxy: inside the sandbox they are the server's own loopback.
    ``NODE_USE_ENV_PROXY=1`` makes Node (22.21+, 24+) honour the variables in
    ``fetch`` and ``http``; older Node ignores it.
    """
    url = f"http://127.0.0.1:{port}"
    no_proxy = "localhost,127.0.0.1,::1"
    env = {"NODE_USE_ENV_PROXY": "1"}
    for name, value in (("http_proxy", url), ("https_proxy", url), ("all_proxy", url), ("no_proxy", no_proxy)):
        env[name] = value
        env[name.upper()] = value
    return env


def bridge_argv(
    argv: Sequence[str],
    *,
    socket_path: str,
    port: int = BRIDGE_PORT,
    python: str = sys.executable,
    script: str = BRIDGE_SCRIPT,
    seccomp_fd: int | None = None,
) -> list[str]:
    """The argv that runs ``argv`` behind the bridge: put it after bwrap's ``--``.

    ``socket_path`` and ``script`` are paths as seen inside the sandbox.
    ``-I -S``: the bridge needs the standard library only, so neither the
    environment nor site-packages (``.pth`` files run code) touch it. With
    ``seccomp_fd``, the bridge installs the seccomp program read from that
    descriptor just before it executes ``argv`` (its own forwarder stays
    outside the filter, since it needs AF_UNIX sockets).
    """
    filtered = [] if seccomp_fd is None else ["--seccomp-fd", str(seccomp_fd)]
    return [python, "-I", "-S", script, "--port", str(port), "--socket", socket_path, *filtered, "--", *argv]


# Bound on the request line a deny-all refusal reports: a longer one is
# malformed and dropped (a request line to a proxy is a method, a target of
# at most a host name and a port, and a version).
REPORT_LINE_MAX: Final = 2048
# Bound on a request head the deny-all listener reads (the proxy's own).
HEAD_MAX: Final = 16 * 1024
# How long a connection may take to send its head: a client that asks sends
# it at once; one that does not only holds one of MAX_CONNECTIONS.
HEAD_WAIT: Final = 10.0
# After the 403, how long the listener keeps reading what the client still
# sends: closing with unread data resets the connection, which can destroy
# the answer before the client has read it (the proxy's LINGER_TIMEOUT).
LINGER: Final = 2.0
# Connections a box may hold open on its deny-all listener at once; past it
# a new one is closed unanswered (and logged once): a server looping on
# connect() costs the worker at most this many small tasks.
MAX_CONNECTIONS: Final = 32
# What the listener reads at once of what a client sends after the answer (discarded).
_CHUNK: Final = 64 * 1024
# Bound on bwrap's status line (its child's pid and namespace ids, ~200 bytes).
STATUS_MAX: Final = 4096
# Bound on the forked helper that makes the listener where a thread may not
# enter the box's network namespace (an ordinary user): a fork and three
# system calls, about 3 ms (about 30 ms where the fork came out with threads
# and the helper executes a fresh interpreter); past it the helper is killed
# and the box's attempts are refused unseen.
HELPER_WAIT: Final = 2.0
# Pause before accepting again after a failed accept (out of descriptors,
# say), which would otherwise repeat at once and spin the worker's loop.
ACCEPT_BACKOFF: Final = 0.1

# The one answer to every request, whatever it names (a malformed one too, which names
# nothing): the words of a refusal with the network off, which name no destination.
_OFF: Final = EgressRefusal(kind="network_off", host="", port=0, why="off")
_REFUSAL: Final = (words(_OFF, "client") + "\n").encode()
_ANSWER: Final = (
    f"HTTP/1.1 403 Forbidden ({words(_OFF, 'reason')})\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    f"Content-Length: {len(_REFUSAL)}\r\nConnection: close\r\n\r\n"
).encode() + _REFUSAL

# CAP_SYS_ADMIN's bit (linux/capability.h).
_CAP_SYS_ADMIN: Final = 21
# Loaded here (in the forkserver), never in the forked helper: a fork of a
# process with threads must not take the dynamic loader's lock.
_LIBC: Final = ctypes.CDLL(None, use_errno=True)

_CHILD_PID = re.compile(rb'"child-pid": (\d+)')
_NET_NAMESPACE = re.compile(rb'"net-namespace": (\d+)')

# The boxes with the network off, by reporter (a session host), until their bwrap ends.
_boxes: dict[reporter.Reporter | None, set[_ClosedBox]] = {}


def _has_sys_admin() -> bool:
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_ADMIN & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


# Whether a thread of this process may enter a box's network namespace
# (CAP_SYS_ADMIN in its own user namespace: root); read once, at import in
# the forkserver, and learnt again on a refusal. Otherwise a forked helper.
_thread_enters = _has_sys_admin()


def route_closed(env: dict[str, str], *, port: int = BRIDGE_PORT) -> int:
    """The network off (bwrap): the worker's own deny-all listener inside the box; sets ``env``.

    Returns the write end of a pipe for bwrap's ``--json-status-fd``: pass
    it to the spawn, then close it. Once bwrap has made the box's namespaces
    it writes its child's pid there; the worker makes a listener on
    ``127.0.0.1:port`` in that child's network namespace (where the proxy
    variables point) and serves it from its own event loop: every request
    gets a 403 and its request line is reported (:mod:`.reporter`). The
    listener is the only thing of the worker's in the box: it holds no
    route anywhere, so the box's only network stays its own loopback. It
    closes when bwrap ends (the pipe's end of file) or the reporter is
    released. Its readiness is expected by the launching task
    (:func:`.reporter.expect`).
    """
    report = reporter.current()
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    read_end, write_end = os.pipe()
    try:
        box = _ClosedBox(read_end, report, port, ready)
    except BaseException:
        os.close(read_end)
        os.close(write_end)
        raise
    _boxes.setdefault(report, set()).add(box)
    reporter.expect(ready)
    env.update(proxy_env(port))
    return write_end


def boxes(report: reporter.Reporter | None) -> list[_ClosedBox]:
    """The boxes with the network off whose refusals go to ``report`` (for tests and diagnostics)."""
    return list(_boxes.get(report, ()))


def release(report: reporter.Reporter) -> None:
    """Close the deny-all listeners of ``report``'s boxes (its host has closed)."""
    for box in list(_boxes.get(report, ())):
        box.close()


def close_all() -> None:
    """Close every deny-all listener (the worker ends)."""
    for boxes in list(_boxes.values()):
        for box in list(boxes):
            box.close()
    _boxes.clear()


def _listen_in_thread(netns: int, port: int) -> socket.socket:
    """A thread enters the namespace, makes the listener and ends (its namespace with it)."""
    made: list[socket.socket | BaseException] = []

    def enter() -> None:
        try:
            _namespaces.setns(_LIBC, netns, _namespaces.CLONE_NEWNET)
            made.append(_namespaces.listener(port))
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            made.append(e)

    thread = threading.Thread(target=enter, name="lovia-mcp-denyall")
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]


def _listen_in_child(netns: int, port: int) -> socket.socket:
    """A forked helper enters the box's user namespace, then its network namespace, and sends the listener.

    Entering a user namespace takes a single-threaded process, and entering
    a network namespace takes CAP_SYS_ADMIN in the caller's own user
    namespace too; the owner of the box's user namespace has every
    capability inside it. A child that came out of the fork with threads
    (at-fork handlers start them) executes :mod:`._namespaces` as a fresh
    program instead, which has none.
    """
    ours, theirs = socket.socketpair()
    try:
        pid = os.fork()
        if pid == 0:  # the helper: system calls only, then out
            code = 1
            try:
                ours.close()
                if _namespaces.threaded():
                    os.set_inheritable(netns, True)
                    os.set_inheritable(theirs.fileno(), True)
                    _namespaces.execute("listen", str(netns), str(port), str(theirs.fileno()))
                code = _namespaces.serve(_LIBC, netns, port, theirs)
            except BaseException as e:  # noqa: BLE001 - told to the worker, which logs it
                with contextlib.suppress(BaseException):
                    theirs.sendall(f"{type(e).__name__}: {e}".encode()[: _namespaces.MESSAGE_MAX])
            os._exit(code)
        theirs.close()
        try:
            ours.settimeout(HELPER_WAIT)
            message, fds, _, _ = socket.recv_fds(ours, _namespaces.MESSAGE_MAX, 1)
        except BaseException:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            raise
        finally:
            os.waitpid(pid, 0)
    finally:
        ours.close()
        theirs.close()
    if not fds:
        raise OSError(message.decode(errors="replace") or "the helper made no listener")
    return socket.socket(fileno=fds[0])


def _listen_in(netns: int, port: int) -> socket.socket:
    global _thread_enters
    if _thread_enters:
        try:
            return _listen_in_thread(netns, port)
        except PermissionError:
            _thread_enters = False  # no CAP_SYS_ADMIN here (an ordinary user)
    return _listen_in_child(netns, port)


class _ClosedBox:
    """One box with the network off: reads bwrap's status, then serves the deny-all listener until bwrap ends."""

    def __init__(
        self, status_fd: int, report: reporter.Reporter | None, port: int, ready: asyncio.Future[None]
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._status = status_fd
        self._report = report
        self._port = port
        self._ready = ready
        self._buffer = b""
        self.refusing: Refusing | None = None
        self.ended = asyncio.Event()  # set once the box is gone and its listener closed
        self._loop.add_reader(status_fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self._status, STATUS_MAX)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # bwrap has ended (or the spawn failed): the box is gone
            self.close()
            return
        if self._ready.done():
            return  # the exit status, later: not needed
        self._buffer += data
        if b"\n" not in self._buffer:
            if len(self._buffer) > STATUS_MAX:
                self._give_up("bwrap's status line is too long")
            return
        self._listen(self._buffer.split(b"\n", 1)[0])
        self._buffer = b""

    def _listen(self, status: bytes) -> None:
        pid, netns = _CHILD_PID.search(status), _NET_NAMESPACE.search(status)
        if pid is None or netns is None:
            self._give_up("bwrap's status names no child and network namespace")
            return
        try:
            fd = os.open(f"/proc/{int(pid[1])}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            self._give_up(f"cannot open the box's network namespace: {e.strerror or e}")
            return
        try:
            # The namespace bwrap made (not a pid reused since), never the worker's own.
            if os.fstat(fd).st_ino != int(netns[1]) or os.stat("/proc/self/ns/net").st_ino == int(netns[1]):
                self._give_up("the box's network namespace is not the one bwrap reported")
                return
            listener = _listen_in(fd, self._port)
        except OSError as e:
            self._give_up(f"cannot listen in the box: {e.strerror or e}")
            return
        finally:
            os.close(fd)
        self.refusing = Refusing(listener, self._report)
        self._ready.set_result(None)

    def _give_up(self, why: str) -> None:
        logger.warning("no deny-all listener for a box with the network off (%s); its attempts are refused unseen", why)
        if not self._ready.done():
            self._ready.set_result(None)  # calls need not wait for what will not come

    def close(self) -> None:
        if self._status >= 0:
            self._loop.remove_reader(self._status)
            os.close(self._status)
            self._status = -1
        if not self._ready.done():
            self._ready.cancel()
        if self.refusing is not None:
            self.refusing.close()
        boxes = _boxes.get(self._report)
        if boxes is not None:
            boxes.discard(self)
            if not boxes:
                del _boxes[self._report]
        self.ended.set()


class Refusing:
    """Serves a deny-all listener in the worker's event loop: a 403 to each request, its request line reported.

    Bounded: at most :data:`MAX_CONNECTIONS` at once, a head of at most
    :data:`HEAD_MAX` bytes read within :data:`HEAD_WAIT`, then the answer
    and :data:`LINGER`. It writes nothing but the fixed answer, connects
    nowhere, and hands the worker only the request line, parsed as strictly
    as the proxy parses a request.
    """

    def __init__(self, listener: socket.socket, report: reporter.Reporter | None) -> None:
        self._loop = asyncio.get_running_loop()
        self._listener = listener
        self._report = report
        self._tasks: set[asyncio.Task[None]] = set()
        self._warned: set[str] = set()
        self._closed = False
        listener.setblocking(False)
        self._loop.add_reader(listener.fileno(), self._accept)

    def _warn_once(self, key: str, message: str) -> None:
        # A server retrying in a loop must not flood the worker's log.
        if key not in self._warned:
            self._warned.add(key)
            logger.warning("%s", message)

    def _accept(self) -> None:
        # At most a backlog's worth per wake-up: a server connecting in a loop
        # must not hold the worker's loop here.
        for _ in range(_namespaces.BACKLOG):
            if self._closed:
                return
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self._warn_once(f"accept:{e.errno}", f"the deny-all listener cannot accept: {e.strerror or e}")
                self._loop.remove_reader(self._listener.fileno())
                self._loop.call_later(ACCEPT_BACKOFF, self._resume)
                return
            if len(self._tasks) >= MAX_CONNECTIONS:
                self._warn_once(
                    "full",
                    f"a box holds {MAX_CONNECTIONS} connections to its deny-all listener; more are closed unseen",
                )
                client.close()
                continue
            client.setblocking(False)
            task = self._loop.create_task(self._refuse(client))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _resume(self) -> None:
        if not self._closed:
            self._loop.add_reader(self._listener.fileno(), self._accept)

    async def _refuse(self, client: socket.socket) -> None:
        loop = self._loop
        try:
            head = b""
            async with asyncio.timeout(HEAD_WAIT):
                while b"\r\n\r\n" not in head and b"\n\n" not in head and len(head) < HEAD_MAX:
                    data = await loop.sock_recv(client, HEAD_MAX - len(head))
                    if not data:
                        break
                    head += data
            line = head.lstrip(b"\r\n").split(b"\n", 1)[0].rstrip(b"\r")
            if line:
                self.line(line)
            await loop.sock_sendall(client, _ANSWER)
            client.shutdown(socket.SHUT_WR)
            async with asyncio.timeout(LINGER):
                while await loop.sock_recv(client, _CHUNK):
                    pass
        except (OSError, TimeoutError):
            pass
        finally:
            client.close()

    def line(self, line: bytes) -> None:
        """Report the request line ``line`` a box sent, if it is a proxy request; anything else is dropped."""
        if len(line) > REPORT_LINE_MAX:
            return
        # Imported here: only a box that asked for something pays the parser's import.
        from .netrequest import Answer, parse_head

        try:
            request = parse_head([line])
        except Answer:
            return
        refusal = EgressRefusal(kind="network_off", host=request.host, port=request.port, why="off")
        logger.warning("%s", words(refusal, "log"))
        if self._report is not None:
            self._report(refusal)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self._listener.fileno())
        self._listener.close()
        for task in list(self._tasks):
            task.cancel()


__all__ = [
    "BRIDGE_PORT",
    "BRIDGE_SCRIPT",
    "HEAD_MAX",
    "HEAD_WAIT",
    "HELPER_WAIT",
    "LINGER",
    "MAX_CONNECTIONS",
    "REPORT_LINE_MAX",
    "STATUS_MAX",
    "Refusing",
    "bridge_argv",
    "close_all",
    "proxy_env",
    "release",
    "boxes",
    "route_closed",
]
