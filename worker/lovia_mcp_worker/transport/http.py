"""Streamable HTTP servers, through the MCP SDK's public API (the one place it is used).

The SDK's ``Client`` and ``streamable_http_client`` do the HTTP transport
(sessions, SSE, redirects within the origin) and the protocol negotiation
(``mode=``: the ``protocol=`` option; 2026-07-28 or the handshake era); this
module adapts them to the interface
:class:`~lovia_mcp_worker.transport.stdio.StdioSession` offers the host:
``start`` (the listing, once ``running`` has negotiated), ``list_tools``,
``call`` and ``end``. anyio wants its contexts entered and left in one task, so the
session lives inside :meth:`HttpSession.running`, held by the generation's
own task.

The SDK's validated results are dumped as MCP JSON objects and read by the
protocol's MCP-JSON codec, as the stdio client's are (the same structs, the
same pagination loop and page cap).

The relay (:meth:`HttpSession.relay`, the server's other notifications) goes
through the same public API: a relayed request is validated into the SDK's
``ClientRequest`` union and sent with ``send_request``, its result taken as a
plain dict; a notification comes through ``message_handler`` as the SDK's
model and is dumped back to JSON (HTTP has no raw path in the SDK's API).

Caveats: results are validated by the SDK against the protocol models, as in
lovia's in-process plugin, so a server whose tool listing breaks the schema
fails here where the stdio client (which validates nothing it does not use)
would read it. Process limits do not apply (there is no local tree).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Final, TypeVar, get_args

from ..wire import failures
from ..wire.failures import HostError
from ..wire.mcpjson import (
    CallOutcome,
    ContentBlock,
    MCPJSONError,
    ToolSpec,
    call_result,
    list_tools,
    parse_progress,
)
from ..wire.messages import MCP_HANDSHAKE_VERSIONS, MCP_MODERN_VERSIONS, ServerSpec
from . import era
from .era import CLIENT_INFO
from .protocol import OnProgress

# The SDK's recommended timeouts for MCP over HTTP: 30 s for connect, write
# and pool; 5 min to read, since a server may hold a response stream open.
CONNECT_TIMEOUT: Final = 30.0
READ_TIMEOUT: Final = 300.0

T = TypeVar("T")


def _missing_mcp(exc: ImportError) -> HostError:
    return HostError(
        "missing_mcp",
        f"MCP over HTTP requires the 'mcp' package, which could not be imported ({exc})",
        hint="Install it with: pip install 'mcp>=2.3'",
    )


def _sdk_mode(protocol: str) -> str:
    """The SDK ``Client``'s ``mode`` for ``protocol=``: it pins modern versions only, so a handshake one is "legacy"."""
    return "legacy" if protocol in MCP_HANDSHAKE_VERSIONS else protocol


def _attached(trace: dict[str, str] | None) -> Callable[[], None]:
    """Make the agent's trace context current in this task; returns the undo."""
    if not trace:
        return lambda: None
    from opentelemetry import context, propagate

    token = context.attach(propagate.extract(trace))
    return lambda: context.detach(token)


def _traced(trace: dict[str, str] | None) -> contextvars.Context:
    """A copy of the current context, with the agent's trace context current in it."""
    ctx = contextvars.copy_context()
    if trace:
        from opentelemetry import context, propagate

        ctx.run(context.attach, propagate.extract(trace))
    return ctx


class HttpSession:
    """One connection to a streamable-HTTP MCP endpoint."""

    pid: int | None = None
    stderr_tail: list[str] = []  # no local process: no stderr
    stdout_head: bytes | None = None  # nor stdout

    def __init__(
        self,
        spec: ServerSpec,
        *,
        on_end: Callable[[HostError], None],
        warn: Callable[[str], None],
        on_tools_changed: Callable[[], None] | None = None,
        on_notification: Callable[[str, bytes | None], None] | None = None,
        trace: dict[str, str] | None = None,
    ) -> None:
        self.spec = spec
        self._on_end = on_end
        self._warn = warn
        self._on_tools_changed = on_tools_changed
        self._on_notification = on_notification
        # The agent's trace context for the negotiation (the open's).
        self._trace = trace
        self._session: Any = None
        self.listing_ttl: float | None = None
        self.listed_at = 0.0  # when the last listing was asked for (monotonic)
        self._ended: asyncio.Future[HostError] = asyncio.get_running_loop().create_future()
        self.initialized = False

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The SDK's transport and client, negotiated (:func:`_sdk_mode`), open for the body's duration."""
        try:
            import httpx2
            from mcp import Client
            from mcp.client.streamable_http import streamable_http_client
            from mcp_types import Implementation
        except ImportError as exc:
            raise _missing_mcp(exc) from exc
        assert self.spec.url is not None
        client = httpx2.AsyncClient(
            headers=dict(self.spec.headers) or None,
            timeout=httpx2.Timeout(CONNECT_TIMEOUT, read=READ_TIMEOUT),
        )
        sdk = Client(
            streamable_http_client(self.spec.url, http_client=client),
            mode=_sdk_mode(self.spec.protocol),
            message_handler=self._message,
            client_info=Implementation(name=CLIENT_INFO["name"], version=CLIENT_INFO["version"]),
            cache=None,  # listings are re-read by the host, which honours ttlMs itself
        )
        async with client, contextlib.AsyncExitStack() as stack:
            # In this task (anyio's contexts are left in the task that entered
            # them), in the agent's trace context (its open's span).
            restore = _attached(self._trace)
            try:
                await stack.enter_async_context(sdk)
            except Exception as exc:  # noqa: BLE001 - classified here, in one place
                leaf = failures.leaf(exc)  # the SDK's task group wraps it
                failed = self._classify(leaf if isinstance(leaf, Exception) else exc, "the protocol negotiation")
                raise HostError(
                    "open", failed.message, hint=failed.hint, option=failed.option, value=failed.value
                ) from exc
            finally:
                restore()
            self._session = sdk.session
            follow = None
            if self._session.protocol_version in MCP_MODERN_VERSIONS and self._on_tools_changed is not None:
                caps = self._session.server_capabilities
                if caps is not None and caps.tools is not None and caps.tools.list_changed:
                    follow = asyncio.ensure_future(self._follow(sdk))
            try:
                yield
            finally:
                self._session = None
                if follow is not None:
                    follow.cancel()
                    with contextlib.suppress(BaseException):
                        await follow

    async def _follow(self, sdk: Any) -> None:
        """Tool-list changes in the modern era: the SDK's ``listen`` stream, for the session's life."""
        assert self._on_tools_changed is not None
        try:
            async with sdk.listen(tools_list_changed=True) as events:
                async for _ in events:
                    self._on_tools_changed()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a lost stream only stops following changes
            self._warn(
                f"the server's subscriptions/listen stream ended ({failures.describe(exc)}); "
                "tool-list changes are no longer followed"
            )

    async def _message(self, message: object) -> None:
        """The SDK's ``message_handler``: server notifications (and transport errors, which the calls see too)."""
        from mcp.types import ProgressNotification, ServerNotification, ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            if self._on_tools_changed is not None:
                self._on_tools_changed()
        elif self._on_notification is not None and isinstance(message, get_args(ServerNotification)):
            if isinstance(message, ProgressNotification):
                return  # a call's own, through its progress callback
            import msgspec

            dumped = message.model_dump(by_alias=True, mode="json", exclude_none=True)
            params = dumped.get("params")
            self._on_notification(dumped["method"], None if params is None else msgspec.json.encode(params))

    @property
    def sandbox(self) -> str | None:
        return None  # a remote server: nothing of ours runs it

    @property
    def protocol_version(self) -> str | None:
        session = self._session
        return None if session is None else session.protocol_version

    @property
    def capabilities(self) -> object:
        session = self._session
        caps = None if session is None else session.server_capabilities
        return None if caps is None else caps.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def relay(self, method: str, params: bytes | None) -> tuple[bytes | None, bytes | None]:
        import msgspec
        from mcp.shared.exceptions import MCPError as SdkError
        from mcp_types import client_request_adapter
        from pydantic import TypeAdapter, ValidationError

        decoded = msgspec.json.decode(params) if params else None
        try:
            request = client_request_adapter.validate_python(
                {"method": method, **({} if decoded is None else {"params": decoded})}
            )
        except ValidationError as exc:
            return None, msgspec.json.encode({"code": -32602, "message": f"{method}: {exc.errors()[:1]}"})
        try:
            result = await self._race(self._live().send_request(request, TypeAdapter(dict[str, Any])), method)
        except HostError as exc:
            cause = exc.__cause__
            if isinstance(cause, SdkError) and cause.error.code != -32000:
                error = cause.error.model_dump(by_alias=True, mode="json", exclude_none=True)
                return None, msgspec.json.encode(error)
            raise
        return msgspec.json.encode(result), None

    async def start(self, trace: dict[str, str] | None = None) -> list[ToolSpec]:
        self._live()  # negotiated when running() was entered
        self.initialized = True
        return await self.list_tools(trace)

    async def list_tools(self, trace: dict[str, str] | None = None) -> list[ToolSpec]:
        from mcp_types import PaginatedRequestParams

        asked = time.monotonic()
        ttls: list[float | None] = []

        async def page(cursor: str | None) -> dict[str, Any]:
            params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
            listed = await self._race(self._live().list_tools(params=params), "tools/list", trace)
            dumped = dict(listed.model_dump(by_alias=True, mode="json", exclude_none=True))
            # Modern listings only: the SDK's model says 0 where a handshake server said nothing.
            ttls.append(era.ttl_seconds(dumped) if self.protocol_version in MCP_MODERN_VERSIONS else None)
            return dumped

        try:
            tools = await list_tools(page, self._warn)
        except MCPJSONError as exc:
            raise failures.bad_reply("tools/list", str(exc)) from None
        # A listing is as fresh as its shortest-lived page.
        self.listing_ttl = None if not ttls or None in ttls else min(t for t in ttls if t is not None)
        self.listed_at = asked
        return tools

    async def ping(self) -> None:
        """Returns once the server answers a ping."""
        await self._race(self._live().send_ping(), "ping")

    async def call(
        self,
        name: str,
        arguments: bytes,
        on_progress: OnProgress | None = None,
        trace: dict[str, str] | None = None,
    ) -> CallOutcome:
        import msgspec

        args = msgspec.json.decode(arguments) if arguments else {}
        callback = None
        if on_progress is not None:
            forward = on_progress

            async def callback(progress: float, total: float | None, message: str | None) -> None:
                # The SDK's values are validated floats; the same bounds as stdio apply.
                found = parse_progress({"progressToken": 0, "progress": progress, "total": total, "message": message})
                if found is not None:
                    forward(*found[1:])

        result = await self._race(
            self._live().call_tool(name, args, progress_callback=callback, allow_input_required=True),
            name,
            trace,
        )
        # Dumped as objects, not JSON: a big text is then never copied.
        dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        asked = era.input_required(dumped)
        if asked is not None:
            return [ContentBlock(type="text", text=asked)], True, None
        try:
            return call_result(dumped)
        except MCPJSONError as exc:
            raise failures.bad_reply(name, str(exc)) from None

    def _live(self) -> Any:
        """The SDK session, or the reason it is gone.

        The transport can fail (the server died) and leave ``running`` before
        the generation has been told: a call in that moment gets this error,
        as one that would be retried on a fresh connection.
        """
        if self._session is not None:
            return self._session
        if self._ended.done():
            raise self._ended.result()
        raise HostError(
            "server_exited",
            f"the connection to {self.spec.url} closed",
            hint="Check that the server is running and reachable.",
        )

    # No local process: nothing to wait for or close at teardown.
    def has_exited(self) -> bool:
        return True

    async def wait_exited(self, timeout: float) -> bool:
        return True

    def close_transport(self) -> None:
        pass

    def end(self, reason: HostError) -> None:
        if not self._ended.done():
            self._ended.set_result(reason)
            self._on_end(reason)

    async def _race(self, aw: Coroutine[Any, Any, T], what: str, trace: dict[str, str] | None = None) -> T:
        """Await the SDK unless the session ends first; SDK errors become HostErrors.

        With ``trace``, the SDK's request runs in the agent's trace context:
        the SDK injects the current context into the request's ``_meta``
        (its own span is a no-op here, where no OpenTelemetry SDK is set up,
        and so carries the agent's span on).
        """
        if self._ended.done():
            raise self._ended.result()
        work: asyncio.Future[T] = asyncio.get_running_loop().create_task(aw, context=_traced(trace))
        ended: asyncio.Future[Any] = self._ended
        try:
            await asyncio.wait((work, ended), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()
            raise
        if not work.done():
            work.cancel()
            with contextlib.suppress(BaseException):
                await work
            raise self._ended.result()
        try:
            return work.result()
        except HostError:
            raise
        except Exception as exc:  # noqa: BLE001 - classified here, in one place
            raise self._classify(exc, what) from exc

    def _classify(self, exc: Exception, what: str) -> HostError:
        from mcp.shared.exceptions import MCPError as SdkError

        if isinstance(exc, SdkError):
            code = exc.error.code
            if code == -32000:  # the SDK's "connection closed"
                return HostError(
                    "server_exited" if self.initialized else "open",
                    f"{what} failed: the connection to {self.spec.url} closed",
                    hint="Check that the server is running and reachable.",
                )
            return failures.remote(what, failures.RemoteError(code, exc.error.message))
        return failures.http_failed(self.spec.url, failures.describe(exc), opened=self.initialized)


__all__ = ["CONNECT_TIMEOUT", "READ_TIMEOUT", "HttpSession"]
