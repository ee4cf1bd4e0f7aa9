"""The gateway's JSON-mode path (2025 sessions in JSON mode, 2026-07-28 calls) answers as the SDK's SSE mode would.

``serve_fast`` is driven here as the ASGI server drives it, with a handler
standing in for the SDK's JSON-mode manager: the behaviours under test
(the switch to an event stream for a slow call, its pings, a message for
the client before the answer, the cancel of a call whose client went away)
are the wrapper's own, and so is reading what an ``initialize`` declares.
End to end, every 2026-07-28 call and every call of a 2025 session whose
client declared nothing a server may ask of it takes this path
(test_gateway_sessions.py); test_gateway_relay.py's progress and log
messages on a 2025 session go on its event stream.
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import run
from starlette.types import Message, Receive, Scope, Send

from lovia_mcp.gateway import fastpath
from lovia_mcp.gateway.fastpath import ANSWER_KEY, PING, SSE_HEADERS, Answer, accepts_both, declared, serve_fast

pytestmark = pytest.mark.timeout(30)

ANSWER = b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}'
SCOPE: Scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
# A window short enough for a test; the handler is released by what the
# client sees (the ping), never by a sleep.
SHORT_WINDOW = 0.05


class Client:
    """The ASGI server's side: the request body, then a disconnect when told; what was sent."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.leave = asyncio.Event()
        self.pinged = asyncio.Event()
        self._body_given = False

    async def receive(self) -> Message:
        if not self._body_given:
            self._body_given = True
            return {"type": "http.request", "body": b"{}", "more_body": False}
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message.get("body") == PING:
            self.pinged.set()


async def json_answer(send: Send, status: int = 200) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": ANSWER})


def test_a_call_that_answers_within_the_window_gets_the_json_answer_unchanged() -> None:
    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        assert (await receive())["body"] == b"{}"
        await json_answer(send)

    async def main() -> list[Message]:
        client = Client()
        await serve_fast(handler, SCOPE, client.receive, client.send)
        return client.sent

    sent = run(main())
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 200 and sent[1]["body"] == ANSWER


def test_a_call_still_running_after_the_window_gets_an_event_stream_with_pings_then_its_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fastpath, "SSE_WINDOW", SHORT_WINDOW)

    async def main() -> list[Message]:
        client = Client()

        async def handler(scope: Scope, receive: Receive, send: Send) -> None:
            await receive()
            await client.pinged.wait()
            # A JSON-RPC error's status (not 200) cannot change a stream already started.
            await json_answer(send, status=404)

        await serve_fast(handler, SCOPE, client.receive, client.send)
        return client.sent

    sent = run(main())
    assert sent[0] == {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS}
    assert sent[1] == {"type": "http.response.body", "body": PING, "more_body": True}
    assert sent[-1] == {
        "type": "http.response.body",
        "more_body": False,
        "body": b"event: message\r\ndata: " + ANSWER + b"\r\n\r\n",
    }
    assert all(m["type"] == "http.response.body" for m in sent[1:])


def test_a_client_that_goes_away_cancels_its_call() -> None:
    async def main() -> tuple[bool, list[Message]]:
        client = Client()
        entered = asyncio.Event()
        cancelled = False

        async def handler(scope: Scope, receive: Receive, send: Send) -> None:
            nonlocal cancelled
            await receive()
            entered.set()
            try:
                await asyncio.Event().wait()  # a call that would never end
            except asyncio.CancelledError:
                cancelled = True
                raise

        serving = asyncio.ensure_future(serve_fast(handler, SCOPE, client.receive, client.send))
        await entered.wait()
        client.leave.set()
        await asyncio.wait_for(serving, 10)
        return cancelled, client.sent

    cancelled, sent = run(main())
    assert cancelled
    assert sent == []


PROGRESS = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}'
SESSION = (b"mcp-session-id", b"s1")


def test_a_message_for_the_client_turns_the_answer_into_an_event_stream_that_the_answer_ends() -> None:
    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        answer = scope[ANSWER_KEY]
        assert isinstance(answer, Answer)
        assert await answer.event(PROGRESS)
        await json_answer(send)

    async def main() -> list[Message]:
        client = Client()
        await serve_fast(handler, dict(SCOPE), client.receive, client.send, headers=[SESSION])
        return client.sent

    sent = run(main())
    assert sent == [
        {"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, SESSION]},
        {"type": "http.response.body", "body": b"event: message\r\ndata: " + PROGRESS + b"\r\n\r\n", "more_body": True},
        {"type": "http.response.body", "body": b"event: message\r\ndata: " + ANSWER + b"\r\n\r\n", "more_body": False},
    ]


def test_nothing_goes_ahead_of_a_json_answer_already_started() -> None:
    async def main() -> tuple[bool, list[Message]]:
        client = Client()
        answer = Answer(client.send)
        await answer(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
        )
        late = await answer.event(PROGRESS)
        await answer({"type": "http.response.body", "body": ANSWER})
        return late, client.sent

    late, sent = run(main())
    assert late is False
    assert [m.get("body") for m in sent] == [None, ANSWER]


def test_nothing_is_written_after_an_event_stream_ended_with_its_answer() -> None:
    async def main() -> tuple[bool, list[Message]]:
        client = Client()
        answer = Answer(client.send)
        assert await answer.event(PROGRESS)
        await json_answer(answer)
        late = await answer.event(PROGRESS)
        return late, client.sent

    late, sent = run(main())
    assert late is False
    assert len(sent) == 3 and sent[-1]["more_body"] is False


@pytest.mark.parametrize(
    ("body", "capabilities"),
    [
        (b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}', frozenset()),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"roots":{"listChanged":true},'
            b'"sampling":{}}}}',
            frozenset({"roots", "sampling"}),
        ),
        (b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}', frozenset()),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', None),
        (b'[{"jsonrpc":"2.0","id":1,"method":"initialize"}]', None),
        (b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":null}}', None),
        (b"not json", None),
    ],
)
def test_an_initialize_body_says_which_capabilities_its_client_declares(
    body: bytes, capabilities: frozenset[str] | None
) -> None:
    # None (not an initialize, or not one read): the session stays the SDK's SSE-mode manager's.
    assert declared(body) == capabilities


@pytest.mark.parametrize(
    ("accept", "both"),
    [
        (b"application/json, text/event-stream", True),
        (b"*/*", True),
        (b"application/*;q=0.9, text/*", True),
        (b"application/json", False),
        (b"text/event-stream", False),
        (b"", False),
    ],
)
def test_only_requests_accepting_json_and_sse_take_the_json_mode_path(accept: bytes, both: bool) -> None:
    assert accepts_both(accept) is both
