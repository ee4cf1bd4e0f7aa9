"""The plain attempts of ``escape_server.py``'s tools, which its probes (``escape_probes.py``) make too.

Standard library only, and nothing of lovia-mcp's: every escape server
imports this, boxed however the test boxes it; only one that runs probes
needs the doctor's probes file as well.
"""

from __future__ import annotations

import os
import socket

# Bound on a connection to a listener the test opened: it answers at once, when it is reachable.
CONNECT_WAIT = 5


def read(path: str) -> str:
    with open(path) as f:
        return f.read()[:200]


def write(path: str) -> str:
    with open(path, "w") as f:
        f.write("escaped\n")
    return path


def connect(host: str, port: int) -> str:
    with socket.create_connection((host, port), timeout=CONNECT_WAIT) as s:
        return s.recv(100).decode()


def procs() -> int:
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


def environ(pid: int) -> str:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return str(len(f.read()))
