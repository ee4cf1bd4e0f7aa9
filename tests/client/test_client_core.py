"""The client core's pure parts: the restart circuit and the one retry decision (no process)."""

from __future__ import annotations

import logging

import pytest
from lovia_mcp_worker.wire.mcpjson import ToolAnnotations
from lovia_mcp_worker.wire.messages import Failure

from lovia_mcp.client.circuit import RestartCircuit
from lovia_mcp.client.retry import retry


def failure(kind: str) -> Failure:
    return Failure(id=1, kind=kind, message=f"a {kind} failure")  # type: ignore[arg-type]


def test_the_circuit_refuses_a_restart_once_the_limit_of_restarts_falls_in_the_window() -> None:
    circuit = RestartCircuit(limit=2, window=60.0)
    circuit.ended("the server exited with code 3")
    assert circuit.needs_restart and circuit.check("s") is None
    circuit.restarted()
    circuit.ended("again")
    assert circuit.check("s") is None
    circuit.restarted()
    refused = circuit.check("s")
    assert refused is not None and refused.kind == "circuit_open"
    assert "restarted 2 times in 60 s (last: again)" in refused.message and refused.hint


def test_the_circuit_shows_a_restart_reason_only_once_that_restart_happened() -> None:
    circuit = RestartCircuit(limit=5, window=60.0)
    circuit.ended("killed at its memory limit")
    assert (circuit.restarts, circuit.last_restart_reason) == (0, None)
    circuit.restarted()
    assert (circuit.restarts, circuit.last_restart_reason) == (1, "killed at its memory limit")
    assert not circuit.needs_restart


def test_the_circuit_closes_once_the_window_has_passed() -> None:
    now = [100.0]
    circuit = RestartCircuit(limit=1, window=60.0, clock=lambda: now[0])
    circuit.restarted()
    now[0] += 59.0
    refused = circuit.check("s")
    assert refused is not None and refused.hint == "Fix the server; calls are tried again in 1 s."
    now[0] += 1.5
    assert circuit.check("s") is None


@pytest.mark.parametrize("kind", ["server_exited", "worker_died", "protocol"])
def test_a_lost_call_is_retried_once(kind: str) -> None:
    args = {"policy": True, "annotations": None, "server": "s", "tool": "t"}
    assert retry(failure(kind), retried=False, **args)  # type: ignore[arg-type]
    assert not retry(failure(kind), retried=True, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kind", ["timeout", "limit", "too_large", "remote", "open", "circuit_open", "closed", "internal"]
)
def test_a_failure_a_fresh_server_would_not_fix_is_never_retried(kind: str) -> None:
    assert not retry(failure(kind), policy=True, annotations=None, retried=False, server="s", tool="t")


def test_safe_retries_only_tools_whose_annotations_say_read_only_or_idempotent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lost = failure("server_exited")
    with caplog.at_level(logging.WARNING, logger="lovia_mcp"):
        assert not retry(lost, policy="safe", annotations=None, retried=False, server="s", tool="write")
    assert "not retrying 'write'" in caplog.text
    read_only = ToolAnnotations(read_only_hint=True)
    assert retry(lost, policy="safe", annotations=read_only, retried=False, server="s", tool="read")
    assert not retry(lost, policy=False, annotations=read_only, retried=False, server="s", tool="read")
