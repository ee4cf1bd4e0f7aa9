#!/usr/bin/env python3
"""An agent process on a machine that refuses user namespaces (and, with --no-landlock, Landlock).

Before anything else it installs seccomp filters on itself, which its
forkserver, workers and servers inherit: ``deny_new_user_namespaces()`` (what
Docker's default profile and Kubernetes' RuntimeDefault amount to), and with
``--no-landlock`` one that answers ``landlock_create_ruleset`` with ENOSYS (a
kernel without Landlock). Then a real lovia ``Agent``, driven by a
``ScriptedProvider``, calls the escape server's probes under
``Sandbox(backend=BACKEND)``.

Prints one JSON line: ``{"outputs": [...], "logs": [...]}``, or
``{"error": ..., "hint": ...}`` when the run fails.

Usage: refused_agent.py BACKEND CWD SECRET PORT [--no-landlock]
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/, for _agent

# escape_server.py's probes also run (each must be denied): the agent's
# memory and environment, the kernel knobs, capabilities, namespaces and the
# system calls the filter refuses.
PROBES = (
    "agent_environ",
    "agent_mem",
    "proc_sys_write",
    "sysfs_write",
    "cgroup_write",
    "capabilities",
    "new_userns",
    "ptrace",
    "process_vm_readv",
    "io_uring",
    "bpf",
    "perf_event_open",
)
_ENOSYS = 38
_LANDLOCK_CREATE_RULESET = 444


def no_landlock_filter() -> bytes:
    """Classic BPF: landlock_create_ruleset fails with ENOSYS, everything else is allowed (x86_64/aarch64)."""
    ld_nr = struct.pack("<HBBI", 0x20, 0, 0, 0)  # A = seccomp_data.nr
    jeq = struct.pack("<HBBI", 0x15, 0, 1, _LANDLOCK_CREATE_RULESET)
    deny = struct.pack("<HBBI", 0x06, 0, 0, 0x00050000 | _ENOSYS)  # SECCOMP_RET_ERRNO
    allow = struct.pack("<HBBI", 0x06, 0, 0, 0x7FFF0000)
    return ld_nr + jeq + deny + allow


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def main(backend: str, cwd: str, secret: str, port: int) -> dict[str, object]:
    from helpers import drive, outputs
    from lovia.testing import batch

    from lovia_mcp import MCP, MCPServerStdio, Sandbox

    records = Records()
    logging.getLogger("lovia_mcp").addHandler(records)
    logging.getLogger("lovia_mcp").setLevel(logging.INFO)
    # The probes load the doctor's (lovia_mcp/doctor/probes.py): named in the arguments, so a box lets it be read.
    doctor_probes = os.path.join(os.path.dirname(os.path.dirname(HERE)), "lovia_mcp", "doctor", "probes.py")
    server = MCPServerStdio(
        command=sys.executable,
        args=[os.path.join(HERE, "escape_server.py"), doctor_probes],
        cwd=cwd,
        sandbox=Sandbox(backend=backend),
    )  # type: ignore[arg-type]
    try:
        result, _ = await drive(
            MCP(server),
            batch(
                ("read", {"path": secret}),
                ("connect", {"host": "127.0.0.1", "port": port}),
                ("signal", {"pid": os.getpid()}),
                ("write", {"path": os.path.join(os.path.dirname(cwd), "escaped.txt")}),
                *(("probe", {"name": name, "args": {"pid": os.getpid()}}) for name in PROBES),
            ),
        )
    except Exception as exc:  # noqa: BLE001 - reported to the test, which checks it
        return {"error": str(exc), "hint": getattr(exc, "hint", None), "type": type(exc).__name__}
    return {"outputs": outputs(result), "logs": records.lines}


if __name__ == "__main__":
    from lovia_mcp_worker.sandbox import seccomp

    seccomp.install(seccomp.deny_new_user_namespaces())
    if "--no-landlock" in sys.argv:
        seccomp.install(no_landlock_filter())
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    print(json.dumps(asyncio.run(main(args[0], args[1], args[2], int(args[3])))), flush=True)
