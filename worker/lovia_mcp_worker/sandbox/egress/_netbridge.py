"""Inside the sandbox: forward 127.0.0.1:PORT to the worker's proxy socket, then become the server.

Usage::

    python -I -S _netbridge.py --port PORT --socket SOCKET [--seccomp-fd FD] -- ARGV...

A standalone script (standard library only, no package imports): it runs
inside the sandbox, whose network namespace has only its own loopback. It
binds ``127.0.0.1:PORT`` there and forks. The child is the bridge: for each
TCP connection it connects to the unix socket ``SOCKET`` (the worker's
:mod:`~lovia_mcp_worker.sandbox.egress.netproxy`, bound into the sandbox) and pipes bytes
both ways. The parent closes the listening socket and executes ``ARGV`` in
its own place, so the server keeps the pid, stdio and environment it was
given, and the bridge is the server's child.

With ``--seccomp-fd FD``, the parent reads a seccomp program from FD and
installs it (:func:`~lovia_mcp_worker.sandbox.seccomp.install`, loaded from
the sandbox folder above this one) just before the exec: the server is filtered (no
AF_UNIX sockets), the bridge, forked earlier, is not, so it can reach the
proxy's socket. The bridge is made non-dumpable before the fork (the
server's exec makes the server dumpable again), so the server cannot open
its ``/proc/PID/mem`` and borrow its sockets. A program that cannot be
read or installed ends the start: the server never runs unfiltered.

Lifecycle: the bridge has a parent-death signal (SIGKILL), so it goes when the
server exits; it is in the server's process group and session, so a signal
to the server's group reaches it too. It holds only stderr (for its own
messages, prefixed ``_netbridge:``) and /dev/null on stdin and stdout, so the
server's pipes close when the server exits.

The server is executed with exactly the environment this script was given,
read back from ``/proc/self/environ``: Python's locale coercion may have
added ``LC_CTYPE`` to ``os.environ`` at start-up. SIGPIPE and SIGXFSZ, which
Python ignores, are restored to their defaults before the exec (as
``subprocess`` does), since ignored signals survive an exec.

Caveats: the server has a child it did not start; a server that waits for
any child (``wait()``) may reap the bridge and lose its network. The bridge
counts towards the server's process and memory limits. PORT must be fixed
(not 0): the server finds the bridge through proxy variables set before
this script ran.
"""

from __future__ import annotations

# The bridge's start-up is on the path of every sandboxed server's start, so
# the parent imports only what it needs before the exec: the C modules under
# socket and signal (their Python wrappers load enum and cost about 9 ms),
# no typing (its names are for the type checker). The child, off that path,
# imports what it likes.
import _signal  # type: ignore[import-not-found]  # typeshed has no stub for signal's C module
import _socket
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any, Final, NoReturn

_PR_SET_PDEATHSIG: Final = 1
_CHUNK: Final = 64 * 1024
_BACKLOG: Final = 128
# Bridge threads only copy bytes; a small stack keeps the bridge light under
# the server's address-space limit (the default reserves 8 MiB per thread).
_THREAD_STACK: Final = 256 * 1024
# Pause after a failed accept (out of file descriptors, say) so that the
# failure, which would repeat at once, does not spin a core.
_ACCEPT_BACKOFF: Final = 0.1
_EXEC_FAILED: Final = 127
_PR_SET_DUMPABLE: Final = 4
_USAGE: Final = "usage: python -I -S _netbridge.py --port PORT --socket SOCKET [--seccomp-fd FD] -- ARGV..."

_reported: set[str] = set()


def _say(message: str) -> None:
    try:
        sys.stderr.write(f"_netbridge: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _say_once(key: str, message: str) -> None:
    # A server retrying in a loop must not flood the worker's stderr log.
    if key not in _reported:
        _reported.add(key)
        _say(message)


def _parse(args: list[str]) -> tuple[int, str, int | None, list[str]]:
    if "--" not in args:
        raise ValueError("missing '--' before the server's command")
    split = args.index("--")
    options, argv = args[:split], args[split + 1 :]
    if not argv:
        raise ValueError("no command after '--'")
    if len(options) % 2:
        raise ValueError(f"option without a value: {options[-1]!r}")
    values = dict(zip(options[::2], options[1::2]))
    unknown = set(values) - {"--port", "--socket", "--seccomp-fd"}
    if unknown:
        raise ValueError(f"unknown option {sorted(unknown)[0]!r}")
    if "--port" not in values or "--socket" not in values:
        raise ValueError("--port and --socket are required")
    port_text = values["--port"]
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(
            f"--port must be a fixed port from 1 to 65535, not {port_text!r} "
            "(the server finds the bridge through proxy variables set before the bridge ran)"
        )
    fd_text = values.get("--seccomp-fd")
    if fd_text is not None and not fd_text.isdigit():
        raise ValueError(f"--seccomp-fd must be a descriptor number, not {fd_text!r}")
    return int(port_text), values["--socket"], None if fd_text is None else int(fd_text), argv


def _given_environment() -> dict[bytes, bytes]:
    """The environment this process was started with, as execve passed it."""
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return dict(os.environb)
    env: dict[bytes, bytes] = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:
            env[name] = value
    return env


def _die_with_parent(parent: int) -> None:
    import ctypes
    import signal

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        ok = int(prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        ok = False
    if not ok:
        _say("cannot set a parent-death signal; the bridge may outlive the server")
    # The parent may have died (a failed exec) before the signal was armed.
    if os.getppid() != parent:
        os._exit(0)


def _detach(keep: int) -> None:
    """/dev/null on stdin and stdout; close every other descriptor but stderr and ``keep``."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
    except OSError:
        null = -1
    for fd in (0, 1):
        try:
            if null >= 0:
                os.dup2(null, fd)
            else:
                os.close(fd)
        except OSError:
            pass
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    import socket

    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        # One side failed: end both directions, which wakes the other thread.
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _forward(client: socket.socket, socket_path: str) -> None:
    import socket
    import threading

    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            upstream.connect(socket_path)
        except OSError as e:
            _say_once(f"connect:{e.errno}", f"cannot reach the worker's proxy at {socket_path}: {e.strerror or e}")
            return
        back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
        back.start()
        _pipe(client, upstream)
        back.join()
    except RuntimeError as e:  # no thread for the way back
        _say_once("thread", f"cannot serve a connection: {e}")
    finally:
        # Closed only when both directions are done: no descriptor is reused under a thread.
        client.close()
        upstream.close()


def _serve(listener: socket.socket, socket_path: str) -> NoReturn:
    import socket
    import threading
    import time

    threading.stack_size(_THREAD_STACK)
    while True:
        try:
            client, _ = listener.accept()
        except OSError as e:
            _say_once(f"accept:{e.errno}", f"accept failed: {e.strerror or e}")
            time.sleep(_ACCEPT_BACKOFF)
            continue
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_forward, args=(client, socket_path), daemon=True).start()
        except (OSError, RuntimeError) as e:
            _say_once("thread", f"cannot serve a connection: {e}")
            client.close()


def _bridge(listener_fd: int, socket_path: str, parent: int) -> NoReturn:
    try:
        import signal
        import socket

        _die_with_parent(parent)
        # A Ctrl-C to the group ends the bridge without a traceback.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _detach(listener_fd)
        _serve(socket.socket(fileno=listener_fd), socket_path)
    except BaseException as e:  # noqa: BLE001 - the child must never return into the parent's code
        _say(f"the bridge failed: {e!r}")
    os._exit(1)


def _read_program(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _seccomp_module() -> Any:
    """The package's seccomp module, imported from the sandbox folder above this script's (-I -S: outside the package).

    A plain import, not importlib.util (which costs its own start-up): the
    folder goes first on sys.path for that one import, and the compiled
    file the package import left in __pycache__ serves it.
    """
    folder = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, folder)
    try:
        import seccomp  # type: ignore[import-not-found]  # sandbox/seccomp.py, by its file name
    finally:
        sys.path.remove(folder)
    if os.path.dirname(os.path.abspath(seccomp.__file__)) != folder:
        raise OSError(f"imported seccomp from {seccomp.__file__}, not {folder}")
    return seccomp


def _not_dumpable() -> None:
    """Before the fork, so the bridge is never dumpable (the exec makes the server dumpable again)."""
    import ctypes

    if int(ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def main(args: list[str]) -> int:
    try:
        port, socket_path, seccomp_fd, argv = _parse(args)
    except ValueError as e:
        _say(str(e))
        sys.stderr.write(_USAGE + "\n")
        return 2
    env = _given_environment()
    prog = b""
    filters = None
    if seccomp_fd is not None:
        try:
            prog = _read_program(seccomp_fd)
            filters = _seccomp_module()
            _not_dumpable()
        except Exception as e:  # noqa: BLE001 - whatever failed, the server must not run unfiltered
            _say(f"cannot prepare the seccomp filter from descriptor {seccomp_fd}: {e}")
            return _EXEC_FAILED
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        # Listening before the fork: the server can connect at once, even
        # before the bridge reaches accept().
        listener.listen(_BACKLOG)
    except OSError as e:
        _say(f"cannot listen on 127.0.0.1:{port}: {e.strerror or e}")
        return 1
    parent = os.getpid()
    if os.fork() == 0:
        _bridge(listener.detach(), socket_path, parent)
    listener.close()
    for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(sig, _signal.SIG_DFL)
    if filters is not None:
        try:
            filters.install(prog)
        except Exception as e:  # noqa: BLE001 - whatever failed, the server must not run unfiltered
            _say(f"cannot install the seccomp filter: {e}")
            return _EXEC_FAILED
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        _say(f"failed to execute {argv[0]}: {e.strerror or e}")
    return _EXEC_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
