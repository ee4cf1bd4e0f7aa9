"""The MCP-JSON codec (protocol's ``call_result``, ``tools_page``, ``list_tools``, ``to_json``), without processes.

Property style: every content block type survives the trip from the
server's JSON to the wire structs, across the pipe and back to MCP JSON;
fields MCP may add later are ignored; a field of the wrong type costs only
that field, never the block or the result (today's leniency: a block the
SDK rejects still reaches the renderer); a listing is paginated by one
loop, with a page cap. The behaviour through real servers is in
tests/plugin/test_results.py and tests/plugin/test_renderer_models.py.
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
from typing import Any

import mcp.types as sdk
import msgspec
import pytest
from lovia.plugins.mcp import render_mcp_content
from lovia_mcp_worker.wire.mcpjson import (
    MAX_LIST_PAGES,
    ContentBlock,
    MCPJSONError,
    ToolAnnotations,
    block_json,
    call_result,
    list_tools,
    to_json,
    tools_page,
)
from lovia_mcp_worker.wire.messages import Result, agent_decoder, encoder

# One block of each MCP type, every field the wire struct models set.
BLOCKS: dict[str, dict[str, Any]] = {
    "text": {
        "type": "text",
        "text": "héllo 😀",
        "annotations": {"audience": ["user"], "priority": 0.5},
        "_meta": {"example.com/trace": "t-1"},
    },
    "image": {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png", "annotations": {"priority": 0.1}},
    "audio": {"type": "audio", "data": "AAAA", "mimeType": "audio/wav", "_meta": {"n": [1, 2]}},
    "resource_link": {
        "type": "resource_link",
        "uri": "file:///c.txt",
        "name": "c.txt",
        "title": "C",
        "description": "a link",
        "mimeType": "text/plain",
        "annotations": {"audience": ["assistant"]},
    },
    "resource_text": {
        "type": "resource",
        "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "inline"},
        "_meta": {"example.com/source": "disk"},
    },
    "resource_blob": {
        "type": "resource",
        "resource": {"uri": "file:///b.bin", "mimeType": "application/octet-stream", "blob": "AAAAAAAA"},
    },
}
# The SDK model each block validates as.
SDK_MODELS = {
    "text": sdk.TextContent,
    "image": sdk.ImageContent,
    "audio": sdk.AudioContent,
    "resource_link": sdk.ResourceLink,
    "resource_text": sdk.EmbeddedResource,
    "resource_blob": sdk.EmbeddedResource,
}
# A value of the wrong JSON type for each kind of field.
WRONG = {str: 5, dict: "not an object", float: "high", list: "not a list"}


def result_json(blocks: list[Any], **fields: Any) -> bytes:
    return json.dumps({"content": blocks, **fields}).encode()


def across_the_pipe(blocks: list[ContentBlock]) -> list[ContentBlock]:
    """The blocks after the worker's msgpack frame and the agent's typed decoder."""
    message = agent_decoder().decode(encoder().encode(Result(id=1, content=blocks)))
    assert isinstance(message, Result)
    return message.content


@pytest.mark.parametrize("seed", range(4))
def test_every_block_type_survives_server_json_to_wire_to_mcp_json_unchanged(seed: int) -> None:
    rng = random.Random(seed)
    names = [rng.choice(list(BLOCKS)) for _ in range(rng.randint(1, 12))]

    content, is_error, structured = call_result(result_json([BLOCKS[n] for n in names]))

    assert (is_error, structured) == (False, None)
    arrived = across_the_pipe(content)
    assert arrived == content
    assert [to_json(b) for b in arrived] == [BLOCKS[n] for n in names]
    for name, block in zip(names, arrived):
        assert block.extra is None
        # The JSON validates as the SDK's own model: what with_sdk_models hands a renderer.
        SDK_MODELS[name].model_validate(to_json(block))


def test_the_wire_blocks_keep_the_sdk_attribute_names_a_renderer_reads() -> None:
    content, _, _ = call_result(result_json(list(BLOCKS.values())))
    text, image, _, link, res, _ = content

    assert text.annotations == {"audience": ["user"], "priority": 0.5} and text.meta == {"example.com/trace": "t-1"}
    assert image.mime_type == "image/png" and link.mime_type == "text/plain" and link.name == "c.txt"
    assert res.resource is not None and res.resource.mime_type == "text/plain" and res.resource.text == "inline"
    assert text.model_dump() == {
        "type": "text",
        "text": "héllo 😀",
        "annotations": {"audience": ["user"], "priority": 0.5},
        "meta": {"example.com/trace": "t-1"},
    }


@pytest.mark.parametrize("seed", range(4))
def test_fields_the_structs_do_not_model_are_ignored_at_every_level(seed: int) -> None:
    rng = random.Random(seed)
    blocks = copy.deepcopy(list(BLOCKS.values()))
    for block in blocks:
        for target in (block, block.get("resource")):
            if target is not None:
                for i in range(rng.randint(1, 3)):
                    target[f"futureField{i}"] = rng.choice([1, "x", None, [1, {"a": 2}], {"deep": {"er": True}}])

    content, _, _ = call_result(result_json(blocks, futureTopLevel={"x": 1}))

    assert [to_json(b) for b in content] == list(BLOCKS.values())
    assert all(b.extra is None for b in content)


def _wrong_field_cases() -> list[tuple[str, str | None, str]]:
    """(block, nested key or None, key) for every field of every block but ``type``."""
    cases: list[tuple[str, str | None, str]] = []
    for name, block in BLOCKS.items():
        cases += [(name, None, key) for key in block if key != "type"]
        cases += [(name, "resource", key) for key in block.get("resource", {})]
    return cases


@pytest.mark.parametrize(("name", "nested", "key"), _wrong_field_cases())
def test_a_field_of_the_wrong_type_costs_only_that_field_never_the_block_or_the_result(
    name: str, nested: str | None, key: str
) -> None:
    bad = copy.deepcopy(BLOCKS[name])
    holder = bad[nested] if nested else bad
    holder[key] = WRONG[type(holder[key])]
    neighbours = [BLOCKS["text"], BLOCKS["image"]]

    content, _, _ = call_result(result_json([neighbours[0], bad, neighbours[1]], isError=False))

    assert len(content) == 3
    assert [to_json(content[0]), to_json(content[2])] == neighbours
    expected = copy.deepcopy(BLOCKS[name])
    (expected[nested] if nested else expected).pop(key)
    if nested is None and key == "resource":
        # A resource block without a resource object keeps its JSON, as before the codec.
        assert content[1].resource is None and content[1].extra is not None
        assert json.loads(content[1].extra) == bad
    got = to_json(content[1])
    if nested == "resource" and key == "uri":
        expected["resource"]["uri"] = ""  # the struct's default for a missing uri
        got["resource"].setdefault("uri", "")
    assert got == expected
    # It still reaches the renderer, whatever the SDK thinks of it.
    assert isinstance(render_mcp_content(content), str)


def test_an_unknown_block_type_keeps_its_json_and_a_block_that_is_not_an_object_is_unknown() -> None:
    widget = {"type": "widget", "knobs": 3, "text": "t", "annotations": {"priority": 1}, "_meta": {"m": 1}}
    typeless = {"text": "no type"}

    content, _, _ = call_result(result_json([widget, "just a string", typeless, {"type": 7}]))

    assert [b.type for b in content] == ["widget", "unknown", "unknown", "unknown"]
    assert all(b.extra is not None for b in content)
    assert json.loads(content[0].extra or b"") == widget and content[0].annotations == {"priority": 1}
    assert content[0].model_dump()["knobs"] == 3 and content[0].text is None
    assert json.loads(content[1].extra or b"") == "just a string"
    assert across_the_pipe(content) == content


def test_block_json_gives_back_the_json_the_server_sent_for_modelled_and_unknown_blocks() -> None:
    widget = {"type": "widget", "knobs": 3, "text": "t", "annotations": {"priority": 1}, "_meta": {"m": 1}}
    sent = [*BLOCKS.values(), widget]

    content, _, _ = call_result(result_json(sent))

    assert [block_json(b) for b in across_the_pipe(content)] == sent
    # A block that was not a JSON object has no object to give back: its wire form.
    (odd,), _, _ = call_result(result_json(["just a string"]))
    assert block_json(odd) == {"type": "unknown"}


def test_a_key_named_like_the_private_extra_field_is_not_taken_from_the_server() -> None:
    text = {"type": "text", "text": "t", "extra": "aGVsbG8="}  # valid base64: would decode as bytes

    content, _, _ = call_result(result_json([text]))

    assert content == [ContentBlock(type="text", text="t")]


def test_is_error_and_structured_content_are_read_leniently_and_structured_content_stays_raw_json() -> None:
    structured = b'{"b": [1, 2.50, "\\u00e9"],  "a": null}'
    raw = b'{"content": [{"type": "text", "text": "t"}], "isError": true, "structuredContent": ' + structured + b"}"

    assert call_result(raw) == ([ContentBlock(type="text", text="t")], True, structured)
    assert call_result(result_json([], isError="yes")) == ([], True, None)
    assert call_result(result_json([], isError=None, structuredContent=None)) == ([], False, None)
    assert call_result(b'{"content": {"type": "text"}}') == ([], False, None)
    assert call_result(b"{}") == ([], False, None)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[1, 2]", "was a list, not an object"),
        (b'"text"', "was a str, not an object"),
        (b"{not json", "could not be decoded"),
        (b"[" * 5000 + b"]" * 5000, "could not be decoded"),
    ],
)
def test_a_result_that_is_not_a_json_object_is_a_clear_error(raw: bytes, message: str) -> None:
    for read in (call_result, lambda r: tools_page(r, print)):
        with pytest.raises(MCPJSONError) as info:
            read(raw)
        assert message in str(info.value)


def test_a_tool_page_skips_malformed_entries_with_a_warning_and_reads_loose_fields_as_not_given() -> None:
    warnings: list[str] = []
    page = {
        "tools": [
            {
                "name": "ok",
                "description": "d",
                "inputSchema": {"type": "object"},
                "_meta": {"k": 1},
                "annotations": {"title": "OK", "readOnlyHint": True, "futureHint": 1},
            },
            {"name": "loose", "description": 5, "annotations": {"destructiveHint": "very", "idempotentHint": True}},
            {"description": "nameless"},
            {"name": ""},
            {"name": 3},
            "not an object",
        ],
        "nextCursor": "c2",
    }

    specs, cursor = tools_page(json.dumps(page), warnings.append)

    assert cursor == "c2"
    assert [s.name for s in specs] == ["ok", "loose"]
    ok, loose = specs
    assert (ok.description, json.loads(ok.input_schema), ok.meta) == ("d", {"type": "object"}, b'{"k": 1}')
    assert ok.annotations == ToolAnnotations(title="OK", read_only_hint=True)
    assert to_json(ok.annotations) == {"title": "OK", "readOnlyHint": True}
    assert (loose.description, loose.input_schema, loose.annotations) == (
        None,
        b"null",
        ToolAnnotations(idempotent_hint=True),
    )
    assert len(warnings) == 4 and all("skipped a malformed tool entry" in w for w in warnings)


def test_a_tool_page_whose_tools_are_not_a_list_warns_and_a_cursor_that_is_not_a_string_ends_the_listing() -> None:
    warnings: list[str] = []

    assert tools_page(b'{"tools": {"name": "a"}, "nextCursor": 5}', warnings.append) == ([], None)
    assert tools_page(b'{"tools": null, "nextCursor": ""}', warnings.append) == ([], None)
    assert warnings == ["tools/list answered 'tools' with a dict, not a list; no tools read"]


def _pages(cursors: Any) -> tuple[Any, list[str | None]]:
    """A fetch answering one tool per page, with the next cursor from ``cursors``; and the cursors it was asked."""
    asked: list[str | None] = []

    async def fetch(cursor: str | None) -> bytes:
        asked.append(cursor)
        nxt = next(cursors, None)
        return json.dumps({"tools": [{"name": f"t{len(asked)}"}], "nextCursor": nxt}).encode()

    return fetch, asked


def test_the_listing_follows_cursors_until_the_last_page() -> None:
    fetch, asked = _pages(iter(["a", "b"]))
    warnings: list[str] = []

    tools = asyncio.run(list_tools(fetch, warnings.append))

    assert [t.name for t in tools] == ["t1", "t2", "t3"]
    assert asked == [None, "a", "b"] and warnings == []


def test_a_repeated_cursor_ends_the_listing_with_a_warning() -> None:
    fetch, asked = _pages(iter(["a", "b", "a", "c"]))
    warnings: list[str] = []

    tools = asyncio.run(list_tools(fetch, warnings.append))

    assert [t.name for t in tools] == ["t1", "t2", "t3"] and asked == [None, "a", "b"]
    assert warnings == ["tools/list repeated the cursor 'a'; listing stopped at 3 tools"]


def test_a_listing_whose_cursors_never_end_is_cut_at_the_page_cap() -> None:
    fetch, asked = _pages(f"c{i}" for i in range(10 * MAX_LIST_PAGES))
    warnings: list[str] = []

    tools = asyncio.run(list_tools(fetch, warnings.append))

    assert len(tools) == len(asked) == MAX_LIST_PAGES
    assert warnings == [f"tools/list had more than {MAX_LIST_PAGES} pages; listing stopped at {MAX_LIST_PAGES} tools"]


def test_the_codec_reads_a_raw_slice_a_str_and_bytes_alike() -> None:
    line = b'{"id": 1, "result": ' + result_json([BLOCKS["text"]]) + b"}"

    class Reply(msgspec.Struct):
        result: msgspec.Raw

    raw = msgspec.json.decode(line, type=Reply).result
    assert call_result(raw) == call_result(bytes(raw)) == call_result(bytes(raw).decode())


def test_a_block_the_sdk_rejects_reaches_a_custom_renderer_as_the_wire_block_beside_sdk_models() -> None:
    from lovia_mcp.render import sdk_content

    rejected = {"type": "image", "data": "aGk=", "mimeType": ["image/png"]}  # the SDK wants a string
    content, _, _ = call_result(result_json([BLOCKS["text"], rejected, BLOCKS["resource_text"]]))

    text, image, resource = sdk_content(across_the_pipe(content))

    assert isinstance(text, sdk.TextContent) and text.meta == {"example.com/trace": "t-1"}
    assert isinstance(image, ContentBlock) and (image.type, image.data, image.mime_type) == ("image", "aGk=", None)
    assert isinstance(resource, sdk.EmbeddedResource) and resource.resource.uri == "file:///a.txt"
    assert render_mcp_content([text, image, resource]) == "héllo 😀\n[image: application/octet-stream, 2 B]\ninline"


def test_a_result_already_parsed_reads_as_its_json_does_good_unknown_or_malformed() -> None:
    results = [
        {"content": list(BLOCKS.values()), "isError": True, "structuredContent": {"a": [1, 2]}},
        {"content": [BLOCKS["text"], {"type": "widget", "knobs": 3}, "odd", {"type": "image", "mimeType": 5}]},
        {"content": "not a list", "isError": "yes", "futureField": 1},
        {},
    ]
    for parsed in results:
        # Compact JSON, as msgspec writes it: raw parts then compare byte for byte.
        assert call_result(copy.deepcopy(parsed)) == call_result(json.dumps(parsed, separators=(",", ":"))), parsed
    page = {"tools": [{"name": "a", "inputSchema": {"type": "object"}}, {"name": 5}], "nextCursor": "n"}
    assert tools_page(page, print) == tools_page(json.dumps(page, separators=(",", ":")), print)
