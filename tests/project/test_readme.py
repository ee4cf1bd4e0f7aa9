"""The README's "Use it" works as written: its ``mcp.json``, its ``lovia-mcp lock`` and its script, verbatim.

The blocks are taken from README.md as they are (tests/project/docblocks.py
reads them): the JSON is written to a fresh folder under the name the
command gives, the lock command runs through the real ``lovia-mcp`` and
must print what the README shows, and the script runs in a fresh process
(tests/project/docs_runner.py) whose ``openai:`` models are lovia's
``ScriptedProvider``: it asks for the time server's ``get_current_time``,
then answers. The script's tool result must be the real server's answer,
the server must have started in a sandbox (the backend on the open's span
event, from lovia-mcp's own OpenTelemetry spans) and from the lock's cache:
``uvx`` is not on the script's PATH, so an unlocked server could not start.

No network: as in tests/lock/test_lock_thirdparty.py, pip finds
mcp-server-time's wheels in ``.cache/thirdparty/wheels`` (``bash
scripts/thirdparty.sh`` puts them there; the test skips without them) and
the cache is a folder of the test's own (``LOVIA_MCP_CACHE_DIR``). The lock
runs once for the session (``readme_locked`` in tests/project/docblocks.py:
docs/without-a-model.md's examples use the same locked file).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from docblocks import README, matches, padded, readme_locked, section

# The lock (readme_locked, once for the session) takes about ten seconds,
# several times that on a loaded machine; then the script starts a worker and the server.
pytestmark = pytest.mark.timeout(300)
# Bound on the script: a hang fails the test instead of the session.
SCRIPT_TIMEOUT = 120.0

RUNNER = Path(__file__).with_name("docs_runner.py")
ANSWER = "It is 21:04 in Tokyo."
TURNS = [["call", "time__get_current_time", {"timezone": "Asia/Tokyo"}], ["text", ANSWER]]


def test_the_readme_config_lock_and_script_work_verbatim_through_the_locked_sandboxed_server(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    locked = readme_locked(tmp_path_factory)
    [script] = [b for b in section(README, "Use it") if b.lang == "python"]
    assert f'"{locked.config}"' in script.text, "the script loads the file the lock command locked"
    lock = locked.printed
    assert lock.returncode == 0, lock.stdout
    assert matches(locked.step.shown, lock.stdout.rstrip("\n").split("\n")), (
        locked.step.shown,
        lock.stdout,
    )

    env = locked.env
    no_uvx = os.pathsep.join(d for d in env["PATH"].split(os.pathsep) if not (Path(d) / "uvx").exists())
    assert shutil.which("uvx", path=no_uvx) is None
    spec, report = tmp_path / "spec.json", tmp_path / "report.json"
    spec.write_text(
        json.dumps(
            {
                "blocks": [{"page": str(README), "line": script.line, "source": padded(script)}],
                "turns": TURNS,
                "trace": True,
                "report": str(report),
            }
        )
    )
    ran = subprocess.run(
        [sys.executable, str(RUNNER), str(spec)],
        cwd=locked.folder,
        env={**env, "PATH": no_uvx},
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT,
    )
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(report.read_text())

    assert seen["outputs"] == [ANSWER + "\n"]
    [result] = seen["tool_results"]
    assert json.loads(result)["timezone"] == "Asia/Tokyo"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+09:00", json.loads(result)["datetime"]), result
    backends = {e["attributes"].get("lovia_mcp.sandbox.backend") for e in seen["span_events"]} - {None}
    assert backends and "none" not in backends, seen["span_events"]
