"""Admission on its own (:mod:`lovia_mcp.gateway.admission`): who may enter while the gateway drains, and the drain.

Pure logic: no server, no HTTP. The end-to-end behaviour (SIGTERM, shares,
opening waits) is in test_gateway_serve.py and test_gateway_shares.py.
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import run

from lovia_mcp.gateway.access import Access
from lovia_mcp.gateway.admission import Admission
from lovia_mcp.gateway.metrics import Metrics
from lovia_mcp.gateway.routes import LISTEN, McpRequest
from lovia_mcp.gateway.sessions import Sessions

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"


def _admission(sessions: Sessions | None = None) -> Admission:
    sessions = sessions if sessions is not None else Sessions(idle=60.0)
    admission = Admission(
        {},
        access=Access(None),
        sessions=sessions,
        metrics=Metrics(),
        max_sessions=4,
        principals=1,
        labelled=lambda principal: None,
    )
    admission.ready = True
    return admission


def _request(*, session: str | None, version: str | None, mcp_method: bytes | None = None) -> McpRequest:
    return McpRequest(
        path="/mcp",
        only=None,
        principal="default",
        method="POST",
        session=session,
        version=version,
        mcp_method=mcp_method,
        accept=b"application/json, text/event-stream",
    )


def test_while_draining_what_would_open_a_session_or_a_listen_stream_is_refused_and_the_rest_enters() -> None:
    admission = _admission()
    assert admission.readiness() == (200, "ready\n")
    run(admission.drain(0.0))
    assert admission.readiness() == (503, "draining\n")

    opening = run(admission.admit(_request(session=None, version=HANDSHAKE)))
    assert opening is not None and opening.status == 503 and (b"retry-after", b"1") in opening.headers
    listen = run(admission.admit(_request(session=None, version=MODERN, mcp_method=LISTEN)))
    assert listen is not None and listen.status == 503
    # A session's requests and stateless calls are still served until HTTP stops.
    assert run(admission.admit(_request(session="s1", version=HANDSHAKE))) is None
    assert run(admission.admit(_request(session=None, version=MODERN, mcp_method=b"tools/call"))) is None


def test_a_drain_waits_for_the_calls_in_flight_and_says_whether_they_ended() -> None:
    async def main() -> tuple[bool, bool, bool]:
        admission = _admission()
        admission.call_began()
        cut_short = await admission.drain(0.01)
        draining = asyncio.ensure_future(admission.drain(10.0))
        done, _ = await asyncio.wait([draining], timeout=0.05)
        admission.call_ended()
        return cut_short, bool(done), await draining

    # Cut short while the call runs; still waiting 50 ms later; done once it ends.
    assert run(main()) == (False, False, True)


def test_the_session_cap_counts_the_sessions_of_both_managers_together() -> None:
    # Each of an endpoint's two session managers checks --max-http-sessions
    # alone; a session of either counts against the endpoint's one cap.
    sessions = Sessions(idle=60.0)
    admission = _admission(sessions)
    for n in range(3):
        sessions.opened(f"s{n}", None, "default", "/mcp", json_mode=n % 2 == 0)
    assert run(admission.admit(_request(session=None, version=HANDSHAKE))) is None
    sessions.opened("s3", None, "default", "/mcp", json_mode=False)
    refused = run(admission.admit(_request(session=None, version=HANDSHAKE)))
    assert refused is not None and refused.status == 503 and "its cap (--max-http-sessions)" in refused.message
    # Another endpoint's sessions are its own; a 2026-07-28 request opens none.
    sessions.forget("s0")
    sessions.opened("other", None, "default", "/servers/x/mcp", json_mode=True)
    assert run(admission.admit(_request(session=None, version=HANDSHAKE))) is None
    sessions.opened("s0", None, "default", "/mcp", json_mode=True)
    assert run(admission.admit(_request(session=None, version=MODERN, mcp_method=b"tools/call"))) is None
