"""What the model sees of a tool's result, and loose input schemas, end to end.

Results: text passes through; ``isError`` is rendered ``[tool error] ...``
rather than raised; images and audio become size-stamped placeholders (never
base64); text resources are inlined; resource links read
``[resource link: uri]``; ``structuredContent`` is kept on
``MCPToolResult.structured_content``. Schemas: whatever a server lists, the
model gets a valid object schema and every tool stays callable.
"""

from __future__ import annotations

import pytest
from helpers import ISOLATIONS, PY, SERVERS, Model, drive, raw, results, run
from lovia.plugins.mcp import normalize_schema as lovia_normalize_schema
from lovia.testing import call

from lovia_mcp import MCPServerStdio, MCPToolResult, normalize_schema, render_mcp_content

# Base64 payloads raw_server's `mixed` tool returns: the model must never see them.
IMAGE_B64 = "aGVsbG8gd29ybGQ="
BLOB_B64 = "AAAAAAAA"


def seen_by_model(model: Model) -> str:
    """Every message the model received on its last turn, as one string."""
    return "\n".join(str(m.content) for m in model.calls[-1])


# --------------------------------------------------------------------------- #
# Content
# --------------------------------------------------------------------------- #
@ISOLATIONS
def test_text_passes_through_unchanged(isolation: str) -> None:
    sample = 'line one\n  line two: ünïcødé ✓ "quoted" \\ back\tslash'
    result, model = run(drive(raw(isolation), call("raw__echo", {"text": sample})))

    (entry,) = results(result)
    assert entry.output == sample and not entry.is_error
    assert sample in seen_by_model(model)


@ISOLATIONS
def test_an_is_error_result_is_rendered_as_a_tool_error_for_the_model_not_raised(isolation: str) -> None:
    result, _ = run(drive(raw(isolation), call("raw__fail", {}), call("raw__echo", {"text": "still here"})))

    failed, after = results(result)
    assert failed.output == "[tool error] something went wrong"
    assert isinstance(failed.raw, MCPToolResult) and failed.raw.is_error
    assert not failed.is_error  # a result the model reads, not an exception the runner caught
    assert after.output == "still here"


@ISOLATIONS
def test_binary_content_becomes_size_stamped_placeholders_and_text_resources_are_inlined(isolation: str) -> None:
    result, model = run(drive(raw(isolation), call("raw__mixed", {})))

    (entry,) = results(result)
    assert entry.output.splitlines() == [
        "hello",
        "[image: image/png, 11 B]",  # "hello world" is 11 bytes
        "[audio: audio/wav, 3 B]",
        "inline text",
        "[resource: file:///b.bin, application/octet-stream, 6 B]",
        "[resource link: file:///c.txt]",
    ]
    assert entry.output == render_mcp_content(entry.raw.content)  # lovia's own rendering
    everything = seen_by_model(model)
    assert IMAGE_B64 not in everything and BLOB_B64 not in everything


@ISOLATIONS
def test_structured_content_is_kept_on_the_result_while_the_model_reads_the_text(isolation: str) -> None:
    result, _ = run(drive(raw(isolation), call("raw__add", {"a": 2, "b": 40})))

    (entry,) = results(result)
    assert entry.output == "42"
    assert isinstance(entry.raw, MCPToolResult)
    assert entry.raw.structured_content == {"sum": 42}


@ISOLATIONS
def test_an_sdk_server_serves_text_structured_output_images_and_tool_errors(isolation: str) -> None:
    server = MCPServerStdio(command=PY, args=[str(SERVERS / "sdk_server.py")], name="sdk", isolation=isolation)  # type: ignore[arg-type]
    result, model = run(
        drive(
            server,
            call("sdk__greet", {"name": "Ada"}),
            call("sdk__divide", {"a": 7, "b": 2}),
            call("sdk__pixel", {}),
            call("sdk__divide", {"a": 1, "b": 0}),
        )
    )

    assert set(model.offered[0]) >= {"sdk__greet", "sdk__divide", "sdk__pixel", "sdk__whoami"}
    assert model.offered[0]["sdk__divide"]["parameters"]["required"] == ["a", "b"]
    greet, divide, pixel, by_zero = results(result)
    assert greet.output == "Hello, Ada!"
    assert divide.raw.structured_content == {"quotient": 3.5, "remainder": 1}
    assert '"quotient": 3.5' in divide.output
    assert pixel.output == "[image: image/png, 67 B]"
    assert pixel.raw.content[0].type == "image" and pixel.raw.content[0].data.startswith("iVBOR")
    assert by_zero.output.startswith("[tool error] ")
    assert "iVBOR" not in seen_by_model(model)


# --------------------------------------------------------------------------- #
# Loose schemas
# --------------------------------------------------------------------------- #
LOOSE = ["loose_null", "loose_empty", "loose_noprops", "loose_broken", "loose_missing"]


@ISOLATIONS
def test_a_server_listing_loose_schemas_has_every_tool_offered_with_a_valid_schema_and_callable(
    isolation: str,
) -> None:
    result, model = run(
        drive(
            raw(isolation, "--loose-schemas"),
            *(call(f"raw__{name}", {}) for name in LOOSE),
            call("raw__echo", {"text": "fine"}),
        )
    )

    offered = model.offered[0]
    for name in LOOSE:
        params = offered[f"raw__{name}"]["parameters"]
        assert params["type"] == "object" and isinstance(params["properties"], dict)
        assert isinstance(params.get("required", []), list)
    *loose, echo = results(result)
    # raw_server implements no body for the loose tools: it answers "unknown
    # tool", which proves each call reached the server under its own name.
    for name, entry in zip(LOOSE, loose):
        assert f"unknown tool {name}" in entry.output
    assert echo.output == "fine"


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (None, {"type": "object", "properties": {}}),
        ({}, {"type": "object", "properties": {}}),
        ("not a schema", {"type": "object", "properties": {}}),
        ({"type": "object"}, {"type": "object", "properties": {}}),
        ({"properties": {"q": {"type": "string"}}}, {"type": "object", "properties": {"q": {"type": "string"}}}),
        ({"type": "object", "properties": [], "required": "x"}, {"type": "object", "properties": {}}),
        ({"type": "string"}, {"type": "object", "properties": {}}),
        ({"type": "object", "properties": {}, "required": [1, 2]}, {"type": "object", "properties": {}}),
        (
            {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
            {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        ),
    ],
)
@pytest.mark.unit
def test_normalize_schema_turns_any_listed_schema_into_a_valid_object_schema(schema: object, expected: object) -> None:
    assert normalize_schema(schema) == expected


@pytest.mark.unit
def test_normalize_schema_agrees_with_lovias_on_every_schema_lovia_already_repairs() -> None:
    for schema in (
        None,
        {},
        {"type": "object"},
        {"properties": {"a": {}}},
        {"type": "object", "properties": {"a": {}}},
    ):
        assert normalize_schema(schema) == lovia_normalize_schema(schema)


@ISOLATIONS
def test_a_server_request_whose_id_looks_like_a_call_id_is_not_taken_for_the_calls_reply(isolation: str) -> None:
    async def main() -> list[str]:
        async with raw(isolation).session() as conn:
            return [str(await conn.call_tool("ping_client")), str(await conn.call_tool("echo", {"text": "next"}))]

    assert run(main()) == ["pinged", "next"]
