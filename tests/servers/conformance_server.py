#!/usr/bin/env python3
"""An MCP SDK ``MCPServer`` with what the official conformance suite's server scenarios ask for.

The suite (npm ``@modelcontextprotocol/conformance``, ``conformance server``)
connects as a client and calls tools, resources and prompts by fixed names:
``test_simple_text``, ``test_image_content``, ``test_audio_content``,
``test_embedded_resource``, ``test_multiple_content_types``,
``test_tool_with_logging`` (three log messages), ``test_tool_with_progress``
(three progress notifications, answers the progress token),
``test_error_handling`` (an ``isError`` result), ``test_sampling``,
``test_elicitation``, ``test_elicitation_sep1034_defaults``,
``test_elicitation_sep1330_enums`` (server-to-client requests),
``test_reconnection`` (closes its SSE stream mid-call, over HTTP only),
``json_schema_2020_12_tool`` (an input schema with 2020-12 keywords); the
resources ``test://static-text``, ``test://static-binary``,
``test://template/{id}/data``, ``test://watched-resource`` (subscribable);
the prompts ``test_simple_prompt``, ``test_prompt_with_arguments``,
``test_prompt_with_embedded_resource``, ``test_prompt_with_image``; a
completion handler and ``logging/setLevel``.

Over stdio by default (what ``lovia-mcp serve`` fronts); with ``--http`` it
serves streamable HTTP on a free port of 127.0.0.1 with an event store (the
SSE polling scenario resumes from it) and prints ``PORT <n>`` once it serves,
as ``http_server.py`` does.
"""

from __future__ import annotations

import base64
import json
import sys
import warnings
from typing import Any

import anyio
from mcp.server.lowlevel.server import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.types import (
    AudioContent,
    Completion,
    CompletionArgument,
    CompletionContext,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    JSONRPCMessage,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, Field
from sdk_http import serve_http

# The logging capability is deprecated by the 2026-07-28 protocol; the suite's
# scenarios are of the 2025 protocols, where it is not.
warnings.filterwarnings("ignore", message=".*deprecated as of 2026-07-28.*")

# A 1x1 PNG and a WAV header with two samples: small, valid base64.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

subscribed: set[str] = set()
server = MCPServer("conformance")


@server.tool()
def test_simple_text() -> str:
    """A text result."""
    return "This is a simple text response for testing."


@server.tool()
def test_image_content() -> list[ImageContent]:
    """An image result."""
    return [ImageContent(type="image", data=PNG, mime_type="image/png")]


@server.tool()
def test_audio_content() -> list[AudioContent]:
    """An audio result."""
    return [AudioContent(type="audio", data=WAV, mime_type="audio/wav")]


@server.tool()
def test_embedded_resource() -> list[EmbeddedResource]:
    """An embedded resource result."""
    text = TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return [EmbeddedResource(type="resource", resource=text)]


@server.tool()
def test_multiple_content_types() -> list[TextContent | ImageContent | EmbeddedResource]:
    """Text, an image and a resource in one result."""
    data = TextResourceContents(
        uri="test://mixed-content-resource", mime_type="application/json", text='{"test": "data", "value": 123}'
    )
    return [
        TextContent(type="text", text="Multiple content types test:"),
        ImageContent(type="image", data=PNG, mime_type="image/png"),
        EmbeddedResource(type="resource", resource=data),
    ]


@server.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Three log messages to the client during the call."""
    for text in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.log("info", text)
    return "Tool with logging executed successfully"


@server.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Three progress notifications during the call; answers the progress token."""
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100, f"Completed step {step} of 100")
    meta = ctx.request_context.meta
    token = meta.get("progress_token") if isinstance(meta, dict) else getattr(meta, "progress_token", None)
    return str(token)


@server.tool()
def test_error_handling() -> str:
    """Fails: the result is an error."""
    raise RuntimeError("This tool intentionally returns an error for testing")


@server.tool()
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Asks the client's model (sampling/createMessage)."""
    message = SamplingMessage(role="user", content=TextContent(type="text", text=prompt))
    # On the call's own stream: the client may not have opened its GET stream yet.
    result = await ctx.session.create_message(
        messages=[message], max_tokens=100, related_request_id=ctx.request_context.request_id
    )
    content: Any = result.content
    return f"LLM response: {content.text if getattr(content, 'type', '') == 'text' else 'No response'}"


class Answer(BaseModel):
    response: str = Field(description="User's response")


@server.tool()
async def test_elicitation(message: str, ctx: Context) -> str:
    """Asks the user (elicitation/create)."""
    result = await ctx.elicit(message=message, schema=Answer)
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"User response: action={result.action}, content={content}"


class Defaults(BaseModel):
    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: str = Field(
        default="active", description="User status", json_schema_extra={"enum": ["active", "inactive", "pending"]}
    )
    verified: bool = Field(default=True, description="Verification status")


@server.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Asks the user with a default for every primitive type (SEP-1034)."""
    result = await ctx.elicit(message="Please provide user information", schema=Defaults)
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"Elicitation result: action={result.action}, content={content}"


class Enums(BaseModel):
    untitledSingle: str = Field(
        description="Simple enum without titles", json_schema_extra={"enum": ["active", "inactive", "pending"]}
    )
    titledSingle: str = Field(
        description="Enum with titled options (oneOf)",
        json_schema_extra={
            "oneOf": [
                {"const": "low", "title": "Low Priority"},
                {"const": "medium", "title": "Medium Priority"},
                {"const": "high", "title": "High Priority"},
            ]
        },
    )
    untitledMulti: list[str] = Field(
        description="Multi-select without titles",
        json_schema_extra={"items": {"type": "string", "enum": ["read", "write", "execute"]}},
    )
    titledMulti: list[str] = Field(
        description="Multi-select with titled options",
        json_schema_extra={
            "items": {
                "anyOf": [
                    {"const": "feature", "title": "New Feature"},
                    {"const": "bug", "title": "Bug Fix"},
                    {"const": "docs", "title": "Documentation"},
                ]
            }
        },
    )
    legacyEnum: str = Field(
        description="Legacy enum with enumNames",
        json_schema_extra={
            "enum": ["small", "medium", "large"],
            "enumNames": ["Small Size", "Medium Size", "Large Size"],
        },
    )


@server.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Asks the user with each enum schema form (SEP-1330)."""
    result = await ctx.elicit(message="Please select values using different enum schema types", schema=Enums)
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"Elicitation completed: action={result.action}, content={content}"


@server.tool()
async def test_reconnection(ctx: Context) -> str:
    """Closes the call's SSE stream mid-call; the client resumes it (SEP-1699)."""
    await ctx.log("info", "Before disconnect")
    await ctx.close_sse_stream()
    # The client reconnects after the stream's retry interval (100 ms): the
    # message below must reach it on the resumed stream, not the closed one.
    await anyio.sleep(0.2)
    await ctx.log("info", "After reconnect")
    return "Reconnection test completed"


@server.tool()
def json_schema_2020_12_tool(name: str = "", address: dict[str, str] | None = None) -> str:
    """Tool with JSON Schema 2020-12 features."""
    return f"name={name}"


# The schema the suite's json-schema-2020-12 scenario expects listed as it is
# (SEP-1613: $schema, $defs and additionalProperties kept); the SDK derives
# another from the signature, so it is replaced here.
server._tool_manager.get_tool("json_schema_2020_12_tool").parameters = {  # noqa: SLF001 - no public setter
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


@server.resource("test://static-text", mime_type="text/plain")
def static_text() -> str:
    """A static text resource."""
    return "This is the content of the static text resource."


@server.resource("test://static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A static binary resource (a PNG)."""
    return base64.b64decode(PNG)


@server.resource("test://template/{id}/data", mime_type="application/json")
def template(id: str) -> str:
    """A resource template with a parameter."""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@server.resource("test://watched-resource", mime_type="text/plain")
def watched() -> str:
    """A resource a client may subscribe to."""
    return "Watched resource content"


@server.prompt()
def test_simple_prompt() -> list[UserMessage]:
    """A prompt without arguments."""
    return [UserMessage(role="user", content=TextContent(type="text", text="This is a simple prompt for testing."))]


@server.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    """A prompt with two required arguments."""
    text = f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
    return [UserMessage(role="user", content=TextContent(type="text", text=text))]


@server.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
    """A prompt holding an embedded resource."""
    text = TextResourceContents(uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing.")
    return [
        UserMessage(role="user", content=EmbeddedResource(type="resource", resource=text)),
        UserMessage(role="user", content=TextContent(type="text", text="Please process the embedded resource above.")),
    ]


@server.prompt()
def test_prompt_with_image() -> list[UserMessage]:
    """A prompt holding an image."""
    return [
        UserMessage(role="user", content=ImageContent(type="image", data=PNG, mime_type="image/png")),
        UserMessage(role="user", content=TextContent(type="text", text="Please analyze the image above.")),
    ]


@server.completion()
async def complete(
    ref: PromptReference | ResourceTemplateReference, argument: CompletionArgument, context: CompletionContext | None
) -> Completion:
    """No suggestions: the suite checks the answer's shape."""
    return Completion(values=[], total=0, has_more=False)


async def _set_level(ctx: ServerRequestContext[Any], params: SetLevelRequestParams) -> EmptyResult:
    return EmptyResult()


async def _subscribe(ctx: ServerRequestContext[Any], params: SubscribeRequestParams) -> EmptyResult:
    subscribed.add(str(params.uri))
    return EmptyResult()


async def _unsubscribe(ctx: ServerRequestContext[Any], params: UnsubscribeRequestParams) -> EmptyResult:
    subscribed.discard(str(params.uri))
    return EmptyResult()


# The handlers MCPServer has no decorator for: their presence is what the
# capabilities (logging, resources.subscribe) are derived from.
lowlevel = server._lowlevel_server  # noqa: SLF001 - no public registration for these three
lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, _set_level)
lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, _subscribe)
lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, _unsubscribe)


class Events(EventStore):
    """Every SSE event kept in memory, replayed after a client's ``Last-Event-ID``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = str(len(self.events) + 1)
        self.events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        stream = next((s for s, e, _ in self.events if e == last_event_id), None)
        if stream is None:
            return None
        for s, e, message in self.events[int(last_event_id) :]:
            if s == stream and message is not None:  # None: a priming event
                await send_callback(EventMessage(message, e))
        return stream


if __name__ == "__main__":
    if "--http" in sys.argv:
        # A 100 ms retry interval: the SSE polling scenario's client reconnects that soon.
        serve_http(server, event_store=Events(), retry_interval=100)
    else:
        server.run("stdio")
