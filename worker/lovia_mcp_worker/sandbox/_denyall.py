"""Inside a box with the network off: a proxy that refuses everything and tells the worker what was asked.

Usage::

    python -I -S _denyall.py --port PORT --report FIFO --ready TOKEN --parent PID

A standalone script (standard library only, no package imports), started
by a shell in the background beside the server
(:func:`~lovia_mcp_worker.sandbox.netbridge.route_closed`), so the server's
start does not wait for it. It binds ``127.0.0.1:PORT`` in the box's own
network namespace, where the server's proxy variables point, and answers
every request with a 403; it writes each request's first line (at most
:data:`_REPORT_LINE` bytes) to FIFO, which the worker reads and attributes
to the calls in flight. Once it listens it writes ``READY TOKEN`` there:
the worker holds calls until then (within a bound). Without the FIFO (the
worker is gone) it still refuses. It connects nowhere: it has no socket to
the worker, only the FIFO.

Cost: it runs on every start of a box with the network off, so the script
is small (it is compiled at each start) and, until a client connects, it
loads nothing but C modules (no ``socket``, whose enums cost more than the
interpreter's own start, no ``threading``): about an interpreter's start.

Lifecycle: it ends when its parent (PID: the shell, which became the
server) has gone, seen every :data:`_PARENT_CHECK` seconds; under bwrap the
server's end ends the box's pid namespace, and this with it. It holds only
stderr (its messages, prefixed ``_denyall:``) and /dev/null on stdin and
stdout, so the server's pipes close when the server exits.

Caveats: the server has a child it did not start (a server that waits for
any child may reap it, and its attempts are then refused unseen); it counts
towards the server's process and memory limits.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # typeshed has no stub for signal's C module
import _socket
import os
import select
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Final

_USAGE: Final = "usage: python -I -S _denyall.py --port PORT --report FIFO --ready TOKEN --parent PID"
_CHUNK: Final = 64 * 1024
_BACKLOG: Final = 128
# Refusal threads only read a head and answer; a small stack keeps them light
# under the server's address-space limit (the default reserves 8 MiB each).
_THREAD_STACK: Final = 256 * 1024
# Pause after a failed accept (out of file descriptors, say) so that the
# failure, which would repeat at once, does not spin a core.
_ACCEPT_BACKOFF: Final = 0.1
# The bound on a request head it reads (the worker's proxy's own), on the
# request line it reports (a longer one is cut: the worker drops it as
# malformed), and on the wait for a head. Writes of at most PIPE_BUF (4 KiB)
# bytes are atomic, so lines from concurrent connections never interleave.
_HEAD_MAX: Final = 16 * 1024
_REPORT_LINE: Final = 1024
_HEAD_WAIT: Final = 30.0
# After the 403, how long it keeps reading what the client still sends:
# closing with unread data resets the connection, which can destroy the
# answer before the client has read it (the proxy's LINGER_TIMEOUT).
_LINGER: Final = 2.0
# How often it checks that its parent (the server) is still there. Under
# bwrap the box's pid namespace ends with the server and this with it;
# elsewhere (a test) it ends within this.
_PARENT_CHECK: Final = 1.0
_REFUSAL: Final = (
    b"lovia-mcp sandbox: this server has no network access (its sandbox has network=False). "
    b"To reach a host, list it in Sandbox(network=[...]).\n"
)

_reported: set[str] = set()


def _say(message: str) -> None:
    try:
        sys.stderr.write(f"_denyall: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _say_once(key: str, message: str) -> None:
    # A server retrying in a loop must not flood the worker's stderr log.
    if key not in _reported:
        _reported.add(key)
        _say(message)


def _detach(*keep: int) -> None:
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
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _refuse(client: socket.socket, report_fd: int) -> None:
    import socket

    try:
        client.settimeout(_HEAD_WAIT)
        head = b""
        while b"\r\n\r\n" not in head and b"\n\n" not in head and len(head) < _HEAD_MAX:
            data = client.recv(_CHUNK)
            if not data:
                break
            head += data
        line = head.lstrip(b"\r\n").split(b"\n", 1)[0].rstrip(b"\r")
        if line and report_fd >= 0:
            try:
                os.write(report_fd, line[:_REPORT_LINE] + b"\n")
            except OSError:
                pass  # the worker is gone: still refuse
        client.sendall(
            b"HTTP/1.1 403 Forbidden (the network is off for this server)\r\n"
            b"Content-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_REFUSAL), _REFUSAL)
        )
        client.shutdown(socket.SHUT_WR)
        client.settimeout(_LINGER)
        while client.recv(_CHUNK):
            pass
    except OSError:
        pass
    finally:
        client.close()


def _serve(listener_fd: int, report_fd: int, parent: int) -> None:
    """A client has come: from now on the full modules, a thread per connection, until the parent goes."""
    import socket
    import threading
    import time

    threading.stack_size(_THREAD_STACK)
    listener = socket.socket(fileno=listener_fd)
    listener.settimeout(_PARENT_CHECK)
    while os.getppid() == parent:
        try:
            client, _ = listener.accept()
        except TimeoutError:
            continue
        except OSError as e:
            _say_once(f"accept:{e.errno}", f"accept failed: {e.strerror or e}")
            time.sleep(_ACCEPT_BACKOFF)
            continue
        try:
            client.settimeout(None)  # accept's socket inherits the listener's timeout
            threading.Thread(target=_refuse, args=(client, report_fd), daemon=True).start()
        except RuntimeError as e:
            _say_once("thread", f"cannot serve a connection: {e}")
            client.close()
    os._exit(0)  # threads still answering are cut with the process


def main(args: list[str]) -> int:
    values = dict(zip(args[::2], args[1::2]))
    port_text, parent_text = values.get("--port", ""), values.get("--parent", "")
    if (
        len(args) % 2
        or set(values) != {"--port", "--report", "--ready", "--parent"}
        or not (port_text.isdigit() and parent_text.isdigit())
    ):
        sys.stderr.write(_USAGE + "\n")
        return 2
    parent = int(parent_text)
    try:
        # Non-blocking: with no reader (the worker is gone) the open fails at once.
        report_fd = os.open(values["--report"], os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(report_fd, True)
    except OSError as e:
        _say(f"cannot open the report FIFO: {e.strerror or e}; refusing without reporting")
        report_fd = -1
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(port_text)))
        listener.listen(_BACKLOG)
    except OSError as e:
        _say(f"cannot listen on 127.0.0.1:{port_text}: {e.strerror or e}")
        return 1
    if report_fd >= 0:
        # Listening: the worker lets calls through once it reads this.
        try:
            os.write(report_fd, b"READY " + values["--ready"].encode("ascii", "replace")[:64] + b"\n")
        except OSError:
            pass
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)  # a Ctrl-C to the group ends it quietly
    _detach(listener.fileno(), report_fd)
    while os.getppid() == parent:
        ready, _, _ = select.select([listener], [], [], _PARENT_CHECK)
        if ready:
            _serve(listener.detach(), report_fd, parent)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
