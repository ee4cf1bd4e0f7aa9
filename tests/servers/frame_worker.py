#!/usr/bin/env python3
"""A stand-in for a worker that a hostile server took over: it writes the bytes it is given to the agent.

Started by tests/protocol/test_framing.py in place of a worker from the forkserver.
``argv[1]`` is the worker's end of its socket pair with the agent (an
inherited descriptor); stdin holds what to write (frames the test built,
header and body). It writes them, then hangs up, so an agent that took the
frames (a weaker cap than configured) sees the pipe close instead of
waiting for an answer. Standard library only.
"""

from __future__ import annotations

import socket
import sys

sock = socket.socket(fileno=int(sys.argv[1]))
data = sys.stdin.buffer.read()
try:
    sock.sendall(data)
except OSError:
    pass  # the agent dropped the pipe mid-write: it refused the frame
sock.close()
