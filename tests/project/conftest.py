"""The README's config, locked once for the session: test_readme.py checks the lock, test_docs_examples.py uses it."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from docblocks import README, WHEELS, Step, offline_env, section, steps

# Bound on the lock: it installs mcp-server-time's ~30 wheels into a venv and
# compiles them (about ten seconds; several times that on a loaded machine).
LOCK_TIMEOUT = 240.0


@dataclass(frozen=True)
class ReadmeLocked:
    """The README's ``mcp.json`` in ``folder``, locked by the README's own command, which printed ``printed``."""

    folder: Path
    config: str
    env: dict[str, str]
    step: Step
    printed: subprocess.CompletedProcess[str]


@pytest.fixture(scope="session")
def readme_locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReadmeLocked]:
    if not WHEELS.is_dir():
        pytest.skip(".cache/thirdparty has no wheels: run `bash scripts/thirdparty.sh`")
    use_it = section(README, "Use it")
    [config] = [b for b in use_it if b.lang == "json"]
    [lock] = steps(next(b for b in use_it if b.lang == "console"))
    name = re.search(r"--config (\S+)", lock.command)
    assert lock.command.startswith("lovia-mcp lock ") and name is not None, lock.command
    folder = tmp_path_factory.mktemp("readme")
    (folder / name[1]).write_text(config.text)
    env = offline_env(folder)
    printed = subprocess.run(
        ["bash", "-c", lock.command],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=LOCK_TIMEOUT,
    )
    yield ReadmeLocked(folder, name[1], env, lock, printed)
