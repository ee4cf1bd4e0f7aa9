"""Every entry of ``scripts/mutants.py`` still applies to the code and names tests that exist (pure: no process).

An entry whose ``old`` text moved away is refused when the script runs,
but only then: a refactor that moves code leaves its guard silently
unchecked until someone runs the whole, slow mutation check. Read here,
a stale entry fails the ordinary test command instead.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from helpers import ROOT


def _mutants() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutants_under_test", ROOT / "scripts" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


MUTANTS = _mutants().MUTANTS


@pytest.mark.unit
def test_mutant_names_are_unique() -> None:
    names = [m.name for m in MUTANTS]
    assert len(MUTANTS) > 50
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


@pytest.mark.unit
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_replaces_text_found_once_in_its_file(mutant: Any) -> None:
    path = ROOT / mutant.path
    assert path.is_file(), f"{mutant.path} is gone: update the entry"
    count = path.read_text(encoding="utf-8").count(mutant.old)
    assert count == 1, f"the text to replace occurs {count} times in {mutant.path}: update the entry"
    assert mutant.new != mutant.old


@pytest.mark.unit
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_names_test_files_and_functions_that_exist(mutant: Any) -> None:
    for target in mutant.tests:
        file, _, node = target.partition("::")
        path: Path = ROOT / file
        assert path.is_file(), f"{target}: no such test file"
        if node:
            function = re.sub(r"\[.*\]$", "", node.split("::")[-1])
            source = path.read_text(encoding="utf-8")
            assert re.search(rf"^\s*(async )?def {re.escape(function)}\(", source, re.M), f"{target}: no such test"
