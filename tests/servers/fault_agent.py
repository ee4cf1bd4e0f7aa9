#!/usr/bin/env python3
"""An agent process that refuses user namespaces, under random faults (tests/long/test_faults.py).

Before anything else it installs the seccomp filter Docker's default profile
amounts to (``deny_new_user_namespaces()``), which its forkserver, workers
and servers inherit, so ``Sandbox(backend="auto")`` picks Landlock. Like
the test process, it is a child subreaper, so the workers a killed
forkserver leaves behind stay its descendants (to be found, aimed at and
checked). Then it runs test_faults.py's ``hammer`` on one connection and
prints its figures as one JSON line.

Usage: fault_agent.py SEED
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path[:0] = [TESTS, os.path.join(TESTS, "long")]  # helpers, and test_faults


def main(seed: int) -> None:
    from test_faults import config, hammer

    from lovia_mcp import Sandbox

    figures = asyncio.run(hammer(config("process", Sandbox(backend="auto")), seed))
    print(json.dumps(figures.to_json()), flush=True)


if __name__ == "__main__":
    from lovia_mcp_worker.containment.guard import become_subreaper
    from lovia_mcp_worker.sandbox import seccomp

    become_subreaper()
    seccomp.install(seccomp.deny_new_user_namespaces())
    main(int(sys.argv[1]))
