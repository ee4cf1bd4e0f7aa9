#!/usr/bin/env python3
"""raw_server.py, slow to start on the test's signal rather than a timer.

``gated_server.py FIFO [raw_server flags...]`` reads one line from FIFO
(which the test holds open, so opening it never blocks), then becomes
raw_server.py. Until the test writes that line, the client's open waits.
"""

from __future__ import annotations

import os
import sys

with open(sys.argv[1], encoding="utf-8") as gate:
    gate.readline()
raw = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raw_server.py")
os.execv(sys.executable, [sys.executable, raw, *sys.argv[2:]])
