"""The worker's JSON-RPC core, driven without processes: the top-level id
scanner, the stdout line framer, the client, the generation state machine.

Pure logic, so fed bytes directly; the behaviour against real servers is in
tests/protocol/test_hostile.py.
"""

from __future__ import annotations

import asyncio
import json
import random

import msgspec
import pytest
from lovia_mcp_worker.session.generation import Generation, State
from lovia_mcp_worker.transport._jsonscan import MISSING, IdScanner, repair_surrogates, top_level_id
from lovia_mcp_worker.transport.jsonrpc import Client
from lovia_mcp_worker.transport.lines import LineFramer
from lovia_mcp_worker.wire.failures import HostError, RemoteError

pytestmark = pytest.mark.unit  # no test here starts a process


def _random_value(rng: random.Random, depth: int = 0) -> object:
    r = rng.random()
    if depth > 4 or r < 0.3:
        return rng.choice([1, -2.5, 'q"uo\\te', "é😀", None, True, "\\", "id", 7])
    if r < 0.6:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {
        rng.choice(["id", "a", "result", "x" * 12]): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))
    }


@pytest.mark.parametrize("seed", range(3))
def test_the_scanner_finds_the_top_level_id_whatever_the_key_order_nesting_and_read_boundaries(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(3000):
        keys = rng.sample(["jsonrpc", "result", "error", "params", "method", "zz"], rng.randint(0, 4))
        items = [(k, _random_value(rng)) for k in keys]
        has_id = rng.random() < 0.8
        if has_id:
            items.insert(
                rng.randint(0, len(items)), ("id", rng.choice([0, 5, -3, 123456789, "lm-1", 'a"b', "\\x", None]))
            )
        obj = dict(items)
        text = json.dumps(obj, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1]))
        data = text.encode()
        scanner = IdScanner()
        pos = 0
        while pos < len(data) and not scanner.done:
            n = rng.randint(1, 9)
            scanner.feed(data[pos : pos + n])
            pos += n
        got = scanner.id if scanner.found else MISSING
        assert got == (obj["id"] if "id" in obj else MISSING), text
        if "id" not in obj:
            assert scanner.hopeless and scanner.ended, text


def test_the_scanner_gives_up_at_once_on_what_cannot_be_an_object() -> None:
    for line in (b"yyyy", b"[1, 2]", b'"id"', b"{1: 2}"):
        scanner = IdScanner()
        scanner.feed(line)
        assert scanner.hopeless and not scanner.ended, line
    assert top_level_id(b'{"id": true}') is MISSING
    assert top_level_id(b'{"id": 3.0}') == 3


def test_lone_surrogate_escapes_are_replaced_and_pairs_and_escaped_backslashes_kept() -> None:
    line = b'{"t":"bad \\ud800 x \\ud83d\\ude00 \\\\ud800 \\udc00"}'
    repaired = repair_surrogates(line)
    assert json.loads(repaired)["t"] == "bad \ufffd x \U0001f600 \\ud800 \ufffd"
    assert repair_surrogates(b'{"t":"plain"}') == b'{"t":"plain"}'


def _framer(cap: int) -> tuple[LineFramer, list[bytes], list[tuple[object, int, bool]]]:
    lines: list[bytes] = []
    over: list[tuple[object, int, bool]] = []
    return LineFramer(cap, lines.append, lambda rid, size, complete: over.append((rid, size, complete))), lines, over


@pytest.mark.parametrize("seed", range(3))
def test_the_framer_cuts_lines_and_reports_each_over_long_line_once_with_its_id(seed: int) -> None:
    rng = random.Random(seed)
    cap = 1000
    big_last = b'{"result":{"id":99,"text":"' + b"z" * 3000 + b'"},"jsonrpc":"2.0","id":7}'
    big_first = b'{"jsonrpc":"2.0","id":8,"result":{"text":"' + b"z" * 3000 + b'"}}'
    note = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"' + b"n" * 3000 + b'"}}'
    small = [b'{"jsonrpc":"2.0","id":%d,"result":{}}' % i for i in range(5)]
    stream = b"\n".join([small[0], big_last, small[1], big_first, small[2], note, small[3], b"", small[4]]) + b"\n"
    framer, lines, over = _framer(cap)
    pos = 0
    while pos < len(stream):
        n = rng.randint(1, 700)
        framer.feed(stream[pos : pos + n])
        pos += n
    assert lines == small
    # An id is reported the moment it is read (before the line ends); a
    # notification only once its object closed.
    assert [(rid, complete) for rid, _, complete in over] == [(7, False), (8, False), (MISSING, True)]
    assert all(size > cap for _, size, _ in over)


def test_the_framer_reports_an_unterminated_flood_as_soon_as_it_passes_the_cap() -> None:
    framer, lines, over = _framer(100)
    framer.feed(b"y" * 150)
    assert over == [(MISSING, 150, False)]
    framer.feed(b"y" * 10_000)
    assert len(over) == 1 and not lines
    framer.feed(b'\n{"id":1}\n')
    assert lines == [b'{"id":1}']


def _client() -> tuple[Client, list[bytes], list[bytes]]:
    sent: list[bytes] = []
    garbage: list[bytes] = []
    client = Client(sent.append, on_garbage=garbage.append, log=lambda *_: None, server_log=lambda *_: None)
    return client, sent, garbage


def test_the_client_numbers_requests_and_matches_replies_by_top_level_id_in_any_key_order() -> None:
    async def main() -> None:
        client, sent, garbage = _client()
        first = asyncio.ensure_future(client.request("a", None, what="a"))
        second = asyncio.ensure_future(client.request("b", b"{}", what="b"))
        await asyncio.sleep(0)
        ids = [json.loads(line)["id"] for line in sent]
        assert ids == [1, 2]
        client.feed(b'{"result":{"id":1,"v":"second"},"jsonrpc":"2.0","id":2}')
        client.feed(b'{"jsonrpc":"2.0","id":1.0,"result":{"v":"first"}}')
        assert msgspec.json.decode(await first) == {"v": "first"}
        assert msgspec.json.decode(await second) == {"id": 1, "v": "second"}
        assert garbage == []

    asyncio.run(main())


def test_an_undecodable_reply_still_answers_its_request_and_garbage_is_counted() -> None:
    async def main() -> None:
        client, _, garbage = _client()
        deep = asyncio.ensure_future(client.call_tool("deep", b"{}"))
        await asyncio.sleep(0)
        client.feed(b'{"jsonrpc":"2.0","result":' + b"[" * 50_000 + b"]" * 50_000 + b',"id":1}')
        with pytest.raises(HostError) as info:
            await deep
        assert info.value.kind == "protocol" and "could not be decoded" in info.value.message
        client.feed(b"not json")
        client.feed(b'{"jsonrpc":"2.0","method":42}')
        assert len(garbage) == 2

    asyncio.run(main())


def test_the_client_answers_ping_refuses_other_server_requests_and_relays_errors() -> None:
    async def main() -> None:
        client, sent, _ = _client()
        client.feed(b'{"jsonrpc":"2.0","id":"s1","method":"ping"}')
        client.feed(b'{"jsonrpc":"2.0","id":9,"method":"sampling/createMessage","params":{}}')
        assert json.loads(sent[0]) == {"jsonrpc": "2.0", "id": "s1", "result": {}}
        assert json.loads(sent[1])["error"]["code"] == -32601 and json.loads(sent[1])["id"] == 9
        call = asyncio.ensure_future(client.request("tools/call", b"{}", what="x"))
        await asyncio.sleep(0)
        client.feed(b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad args"}}')
        with pytest.raises(RemoteError) as info:
            await call
        assert info.value.code == -32602

    asyncio.run(main())


def test_an_abandoned_request_sends_a_cancel_with_its_integer_id() -> None:
    async def main() -> None:
        client, sent, _ = _client()
        call = asyncio.ensure_future(client.request("tools/call", b"{}", what="x"))
        await asyncio.sleep(0)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        cancel = json.loads(sent[-1])
        assert cancel["method"] == "notifications/cancelled" and cancel["params"]["requestId"] == 1

    asyncio.run(main())


def test_a_repeating_cursor_ends_the_listing_with_a_warning() -> None:
    async def main() -> None:
        client, sent, _ = _client()
        warnings: list[str] = []
        listing = asyncio.ensure_future(client.list_tools(warnings.append))
        for i in range(1, 4):
            await asyncio.sleep(0)
            client.feed(b'{"jsonrpc":"2.0","id":%d,"result":{"tools":[{"name":"t%d"}],"nextCursor":"again"}}' % (i, i))
        tools = await asyncio.wait_for(listing, 5)
        assert [t.name for t in tools] == ["t1", "t2"]
        assert "repeated the cursor" in warnings[0]

    asyncio.run(main())


def test_a_generation_moves_only_along_its_drawn_transitions() -> None:
    async def main() -> None:
        gen = Generation(1)
        with pytest.raises(AssertionError):
            gen.finished()
        gen.ready([])
        assert gen.serving
        gen.drain(0.0, HostError("timeout", "killed"))
        assert gen.state is State.DRAINING and not gen.serving
        await asyncio.wait_for(gen.stopping.wait(), 5)
        gen.stop(HostError("server_exited", "later"))
        assert gen.reason is not None and gen.reason.kind == "timeout"
        gen.finished()
        assert gen.state is State.DOWN and gen.down.is_set()

    asyncio.run(main())


def test_a_host_refuses_an_open_from_an_agent_speaking_another_wire_protocol() -> None:
    from lovia_mcp_worker.session.host import Host
    from lovia_mcp_worker.wire.messages import PROTOCOL_VERSION, Failure, Open, ServerSpec, WorkerMessage

    async def main() -> None:
        out: list[WorkerMessage] = []
        host = Host(out.append, subreaper=False)
        spec = ServerSpec(name="x", transport="stdio", command="true")
        host.handle(Open(id=1, spec=spec, protocol=PROTOCOL_VERSION + 1))
        for _ in range(10):
            await asyncio.sleep(0)
        await host.aclose()
        [failure] = [m for m in out if isinstance(m, Failure)]
        assert failure.id == 1 and "wire protocol" in failure.message
        assert "restart the agent" in (failure.hint or "")

    asyncio.run(main())


def test_a_relisting_started_just_as_the_previous_one_ended_stays_tracked_and_is_waited_for() -> None:
    # A finished task's done-callbacks run after handles queued before it
    # ended: a list_changed read in that gap starts a new re-listing, which
    # the old task's callback must not forget (settled() would not wait for it).
    from lovia_mcp_worker.session.generation import Generation
    from lovia_mcp_worker.session.listing import Listing
    from lovia_mcp_worker.wire.mcpjson import ToolSpec
    from lovia_mcp_worker.wire.messages import WorkerMessage

    sent: list[WorkerMessage] = []
    gate = asyncio.Event()
    second_started = asyncio.Event()

    class Session:
        listings = 0

        async def list_tools(self) -> list[ToolSpec]:
            Session.listings += 1
            if Session.listings == 2:
                second_started.set()
                await gate.wait()
            return [ToolSpec(name=f"t{Session.listings}")]

    async def main() -> None:
        gen = Generation(1)
        gen.session = Session()  # type: ignore[assignment]
        gen.ready([ToolSpec(name="t0")])

        def emit(msg: WorkerMessage) -> None:
            sent.append(msg)
            if len(sent) == 1:
                # Queued in the re-listing task's last step: it runs once the
                # task has ended, before the task's done-callbacks.
                asyncio.get_running_loop().call_soon(listing.changed, gen)

        listing = Listing(emit, lambda level, text: None, lambda: gen)
        listing.sent([ToolSpec(name="t0")])
        listing.changed(gen)
        await asyncio.wait_for(second_started.wait(), 5)
        assert gen in listing._tasks, "the running re-listing was forgotten"
        waiting = asyncio.ensure_future(listing.settled(gen))
        await asyncio.sleep(0)
        assert not waiting.done()  # settled() waits for the second re-listing
        gate.set()
        await asyncio.wait_for(waiting, 5)
        assert [m.tools[0].name for m in sent] == ["t1", "t2"]  # type: ignore[union-attr]

    asyncio.run(main())
