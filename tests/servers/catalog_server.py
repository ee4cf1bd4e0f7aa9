#!/usr/bin/env python3
"""An MCP SDK ``MCPServer`` over stdio with resources, prompts, completion, and requests of its own to the client.

``catalog_server.py SCHEME``: every URI it has starts with ``SCHEME://``
(two of them behind one gateway have URIs of their own). It serves the
resource ``SCHEME://note`` (text ``note of SCHEME``), the template
``SCHEME://item/{id}``, the prompt ``hello {who}`` and completion of its
argument (``alpha``, ``beta``); it declares ``resources.subscribe`` and
``listChanged``. Tools:

- ``touch {uri}``: sends ``notifications/resources/updated`` for ``uri``;
- ``change``: sends ``notifications/resources/list_changed`` and
  ``notifications/prompts/list_changed``;
- ``sample {prompt}``: asks the client's model (``sampling/createMessage``)
  during the call, answers ``sampled: <its text>`` or ``refused: <error>``;
- ``elicit {message}``: asks the user (``elicitation/create``), answers
  ``<action> <content>`` or ``refused: <error>``;
- ``roots``: asks for the client's roots (``roots/list``);
- ``wait {gate}``: answers ``waited`` once a line can be read from ``gate``;
- ``later {gate}``: answers ``later``, then, once a line can be read from the
  FIFO ``gate``, asks the client's model with no request of its own in
  flight, and writes what came back to its stderr (``LATER sampled: ...`` or
  ``LATER refused: ...``).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import anyio
from mcp.server.lowlevel.server import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.types import (
    Completion,
    CompletionArgument,
    CompletionContext,
    EmptyResult,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    SubscribeRequestParams,
    TextContent,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel

# Sampling, roots and elicitation are deprecated by the 2026-07-28 protocol;
# this server is reached in the handshake era, where they are not.
warnings.filterwarnings("ignore", message=".*deprecated as of 2026-07-28.*")

SCHEME = sys.argv[1] if len(sys.argv) > 1 else "cat"
server = MCPServer("catalog")


@server.resource(f"{SCHEME}://note", mime_type="text/plain")
def note() -> str:
    """A note."""
    return f"note of {SCHEME}"


@server.resource(SCHEME + "://item/{id}", mime_type="text/plain")
def item(id: str) -> str:
    """An item by id."""
    return f"item {id} of {SCHEME}"


@server.prompt()
def hello(who: str) -> list[UserMessage]:
    """Greets ``who``."""
    return [UserMessage(role="user", content=TextContent(type="text", text=f"hello {who} from {SCHEME}"))]


@server.completion()
async def complete(
    ref: PromptReference | ResourceTemplateReference, argument: CompletionArgument, context: CompletionContext | None
) -> Completion:
    return Completion(values=[v for v in ("alpha", "beta") if v.startswith(argument.value)], total=2)


@server.tool()
async def touch(uri: str, ctx: Context) -> str:
    await ctx.session.send_resource_updated(uri)
    return "touched"


@server.tool()
async def change(ctx: Context) -> str:
    await ctx.session.send_resource_list_changed()
    await ctx.session.send_prompt_list_changed()
    return "changed"


def _sampling(prompt: str) -> list[SamplingMessage]:
    return [SamplingMessage(role="user", content=TextContent(type="text", text=prompt))]


@server.tool()
async def sample(prompt: str, ctx: Context) -> str:
    try:
        result = await ctx.session.create_message(
            messages=_sampling(prompt), max_tokens=50, related_request_id=ctx.request_context.request_id
        )
    except Exception as exc:  # noqa: BLE001 - the test reads what the client answered
        return f"refused: {exc}"
    content: Any = result.content
    return f"sampled: {getattr(content, 'text', '')}"


class Answer(BaseModel):
    answer: str


@server.tool()
async def elicit(message: str, ctx: Context) -> str:
    try:
        result = await ctx.elicit(message=message, schema=Answer)
    except Exception as exc:  # noqa: BLE001 - the test reads what the client answered
        return f"refused: {exc}"
    return f"{result.action} {result.data.answer if result.action == 'accept' else ''}".strip()


@server.tool()
async def roots(ctx: Context) -> str:
    try:
        result = await ctx.session.list_roots()
    except Exception as exc:  # noqa: BLE001 - the test reads what the client answered
        return f"refused: {exc}"
    return " ".join(str(r.uri) for r in result.roots)


@server.tool()
async def wait(gate: str) -> str:
    async with await anyio.open_file(gate) as lines:
        await lines.readline()
    return "waited"


@server.tool()
async def later(gate: str, ctx: Context) -> str:
    session = ctx.session

    async def speak() -> None:
        async with await anyio.open_file(gate) as lines:
            await lines.readline()
        try:
            result = await session.create_message(messages=_sampling("later"), max_tokens=50)
            print(f"LATER sampled: {getattr(result.content, 'text', '')}", file=sys.stderr, flush=True)
        except Exception as exc:  # noqa: BLE001 - written for the test to read
            print(f"LATER refused: {exc}", file=sys.stderr, flush=True)

    group.start_soon(speak)
    return "later"


async def _subscribe(ctx: ServerRequestContext[Any], params: SubscribeRequestParams) -> EmptyResult:
    print(f"SUBSCRIBE {params.uri}", file=sys.stderr, flush=True)
    return EmptyResult()


async def _unsubscribe(ctx: ServerRequestContext[Any], params: UnsubscribeRequestParams) -> EmptyResult:
    print(f"UNSUBSCRIBE {params.uri}", file=sys.stderr, flush=True)
    return EmptyResult()


lowlevel = server._lowlevel_server  # noqa: SLF001 - no public registration for these two
lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, _subscribe)
lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, _unsubscribe)


async def main() -> None:
    global group
    async with anyio.create_task_group() as group:
        await server.run_stdio_async()
        group.cancel_scope.cancel()


group: Any = None

if __name__ == "__main__":
    anyio.run(main)
