"""MCP's JSON, read in one place: the content, listing and annotation structs and their codec.

The structs are the wire structs that cross the pipe, with the MCP SDK 2.x
attribute names (``mime_type``, ``read_only_hint``, ``meta``...) a custom
``result_renderer`` reads. msgspec's ``rename="camel"`` (and ``_meta`` named
explicitly) maps them to MCP's JSON names in one declaration, so a server's
JSON decodes straight into them and :func:`msgspec.to_builtins` gives the
JSON back; no table of names is written by hand anywhere else.

Lenient by design: one loose block or tool entry must not sink a whole
result or server. A result is decoded typed in one pass; only when that
fails (or a block is of a type these structs do not model) is it read again
block by block, and a block that still fails keeps every field that is valid
on its own (a wrong-typed field is taken as not given). So a block the SDK
would reject still reaches the renderer. A malformed tool entry is skipped
with a warning. ``structuredContent``, ``inputSchema`` and a tool's
``_meta`` stay raw JSON (:class:`msgspec.Raw`): the worker never parses them.

Paginated listing is written once here too (:func:`list_tools`), with the
page cap, for both transports.

Like the protocol module, this imports nothing but the standard library and
msgspec.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import msgspec

_S = TypeVar("_S", bound=msgspec.Struct)


# --------------------------------------------------------------------------- #
# The structs (wire and JSON at once)
# --------------------------------------------------------------------------- #
class Resource(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """An embedded resource's contents (SDK ``TextResourceContents`` / ``BlobResourceContents``)."""

    uri: str = ""
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None


class ContentBlock(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """One MCP content block, whatever its ``type``; unused fields stay ``None``.

    ``extra`` keeps the JSON of a block whose type this struct does not model
    (an unknown ``type``, or a ``resource`` without a resource object), so
    nothing the server sent is silently lost; it is never read from the
    server's JSON. ``annotations`` and ``meta`` (the block's ``_meta``) are
    the server's JSON objects as dicts, named as on the SDK's models.
    """

    type: str
    text: str | None = None
    data: str | None = None
    mime_type: str | None = None
    uri: str | None = None
    name: str | None = None
    title: str | None = None
    description: str | None = None
    resource: Resource | None = None
    extra: bytes | None = None
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")

    def model_dump(self) -> dict[str, Any]:
        """A dict like the SDK model's ``model_dump()``, for renderers that call it."""
        out: dict[str, Any] = {f: getattr(self, f) for f in self.__struct_fields__ if f != "extra"}
        if self.resource is not None:
            out["resource"] = msgspec.structs.asdict(self.resource)
        if self.extra:
            out.update(msgspec.json.decode(self.extra))
        return {k: v for k, v in out.items() if v is not None}


class ToolAnnotations(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """A tool's behaviour hints, with the SDK's attribute names (``ToolAnnotations``).

    Hints the server gives about itself: untrusted unless the user trusts
    the server (``trust_annotations=True``). ``None`` means not said.
    """

    title: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None


class ToolSpec(msgspec.Struct, frozen=True, omit_defaults=True):
    """A tool as listed by the server; ``input_schema``, ``output_schema`` and ``meta`` (its ``_meta``) are raw JSON.

    ``title`` and ``output_schema`` are not shown to the model; they are
    carried so that a tool's whole definition can be pinned (``lovia_mcp.lock``).
    """

    name: str
    description: str | None = None
    input_schema: bytes = b"null"
    annotations: ToolAnnotations | None = None
    meta: bytes | None = None
    title: str | None = None
    output_schema: bytes | None = None


# A tools/call result, as the SDK's CallToolResult. structuredContent stays
# raw: the worker only passes it on.
class _CallResult(msgspec.Struct, rename="camel"):
    content: list[ContentBlock] = []
    is_error: bool = False
    structured_content: msgspec.Raw = msgspec.Raw()


# The same, already parsed (by the SDK, for HTTP).
class _ParsedCallResult(msgspec.Struct, rename="camel"):
    content: list[ContentBlock] = []
    is_error: bool = False
    structured_content: Any = None


# The same, when the typed read failed: each part read on its own.
class _LooseCallResult(msgspec.Struct, rename="camel"):
    content: msgspec.Raw = msgspec.Raw()
    is_error: msgspec.Raw = msgspec.Raw()
    structured_content: msgspec.Raw = msgspec.Raw()


class _ToolEntry(msgspec.Struct, rename="camel"):
    """One entry of a ``tools/list`` page, as the server lists it."""

    name: str
    description: str | None = None
    input_schema: msgspec.Raw = msgspec.Raw()
    annotations: ToolAnnotations | None = None
    meta: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="_meta")
    title: str | None = None
    output_schema: msgspec.Raw = msgspec.Raw()


class _ToolsPage(msgspec.Struct, rename="camel"):
    tools: msgspec.Raw = msgspec.Raw()
    next_cursor: msgspec.Raw = msgspec.Raw()


# The block types ContentBlock models; any other keeps its JSON in `extra`.
KNOWN_BLOCKS: Final = frozenset({"text", "image", "audio", "resource_link", "resource"})
# A listing longer than this many pages is cut (with a warning): a server
# whose cursors never repeat but never end must not spin until open_timeout.
MAX_LIST_PAGES: Final = 1000

_encode = msgspec.json.Encoder().encode
_decode_any = msgspec.json.Decoder().decode
_decode_result = msgspec.json.Decoder(_CallResult).decode
_decode_loose_result = msgspec.json.Decoder(_LooseCallResult).decode
_decode_block = msgspec.json.Decoder(ContentBlock).decode
_decode_entry = msgspec.json.Decoder(_ToolEntry).decode
_decode_page = msgspec.json.Decoder(_ToolsPage).decode
_decode_raws = msgspec.json.Decoder(list[msgspec.Raw]).decode
_decode_str = msgspec.json.Decoder(str).decode
# What a decode of the server's bytes can raise: syntax, shape, nesting
# beyond the decoder's stack, bytes that are not UTF-8. (msgspec's
# ValidationError is a DecodeError: where a shape is salvaged it is caught
# before these.)
_UNDECODABLE: Final = (msgspec.DecodeError, RecursionError, UnicodeDecodeError)


# A server's JSON: bytes, a raw slice of a message already framed, or a str
# (what pydantic's model_dump_json gives, for HTTP).
JSONData = bytes | msgspec.Raw | str


class MCPJSONError(ValueError):
    """A reply that is not an MCP object at all; the message completes "the reply ..."."""


def _undecodable(exc: BaseException) -> MCPJSONError:
    why = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)
    return MCPJSONError(f"could not be decoded ({why})")


def json_object(raw: JSONData) -> dict[str, Any]:
    """A reply's result as a dict (for the few fields read by hand, e.g. ``initialize``)."""
    try:
        value = _decode_any(raw)
    except _UNDECODABLE as exc:
        raise _undecodable(exc) from None
    if not isinstance(value, dict):
        raise MCPJSONError(f"was a {type(value).__name__}, not an object")
    return value


def _loose(raw: JSONData, decode: Callable[[JSONData], _S]) -> _S:
    """``raw`` decoded into a struct of raw parts; not an object is an MCPJSONError."""
    try:
        return decode(raw)
    except msgspec.ValidationError:  # a DecodeError too: caught first
        json_object(raw)  # raises with the kind of value it was
        raise
    except _UNDECODABLE as exc:
        raise _undecodable(exc) from None


def _given(raw: msgspec.Raw) -> bool:
    """Whether a raw part was sent, and not as ``null`` (compared without copying a big one)."""
    return len(raw) > 0 and not (len(raw) == 4 and bytes(raw) == b"null")


# --------------------------------------------------------------------------- #
# Salvage: the valid fields of an object that failed its typed read
# --------------------------------------------------------------------------- #
# Per struct: (attribute, JSON name, decoder of the field's type, nested struct or None).
_Field = tuple[str, str, "msgspec.json.Decoder[Any]", "type[msgspec.Struct] | None"]
_FIELDS: dict[type[msgspec.Struct], list[_Field]] = {}


def _fields(cls: type[msgspec.Struct]) -> list[_Field]:
    found = _FIELDS.get(cls)
    if found is None:
        found = []
        for f in msgspec.structs.fields(cls):
            nested = next(
                (
                    t
                    for t in (f.type, *typing.get_args(f.type))
                    if isinstance(t, type) and issubclass(t, msgspec.Struct)
                ),
                None,
            )
            found.append((f.name, f.encode_name, msgspec.json.Decoder(f.type), nested))
        _FIELDS[cls] = found
    return found


def _salvage(cls: type[_S], obj: dict[str, Any], **fixed: Any) -> _S:
    """``cls`` from ``obj``, keeping each field that is valid on its own (and ``fixed``).

    Each field is read with the struct's own type and JSON name, so the
    lenient path needs no mapping of its own; a nested struct is salvaged
    the same way.
    """
    kwargs = dict(fixed)
    for attr, key, decoder, nested in _fields(cls):
        if attr in kwargs or key not in obj:
            continue
        value = obj[key]
        try:
            kwargs[attr] = decoder.decode(_encode(value))
        except msgspec.ValidationError:
            if nested is not None and isinstance(value, dict):
                kwargs[attr] = _salvage(nested, value)
    return cls(**kwargs)


# --------------------------------------------------------------------------- #
# tools/call results
# --------------------------------------------------------------------------- #
CallOutcome = tuple[list[ContentBlock], bool, bytes | None]


def _modelled(block: ContentBlock) -> bool:
    return (
        block.type in KNOWN_BLOCKS and block.extra is None and (block.type != "resource" or block.resource is not None)
    )


def _block(raw: msgspec.Raw) -> ContentBlock:
    """One block read on its own: typed, else field by field; unmodelled types keep their JSON."""
    data = bytes(raw)
    try:
        block = _decode_block(data)
        if _modelled(block):
            return block
        obj = _decode_any(data)
    except msgspec.ValidationError:
        obj = _decode_any(data)
    if not isinstance(obj, dict):
        return ContentBlock(type="unknown", extra=data)
    btype = obj.get("type")
    btype = btype if isinstance(btype, str) else "unknown"
    if btype not in KNOWN_BLOCKS:
        # As before the codec: the JSON in `extra`, beside annotations and _meta.
        return _salvage(ContentBlock, {k: obj[k] for k in ("annotations", "_meta") if k in obj}, type=btype, extra=data)
    block = _salvage(ContentBlock, obj, type=btype, extra=None)
    return block if _modelled(block) else msgspec.structs.replace(block, extra=data)


def call_result(raw: JSONData | dict[str, Any]) -> CallOutcome:
    """A ``tools/call`` result: its content blocks, ``isError`` and raw ``structuredContent``.

    ``raw`` is the result's JSON, or the result already parsed (the SDK's
    model dumped as MCP JSON objects, for HTTP: converted without copying its
    strings). Raises :class:`MCPJSONError` if it is not a JSON object.
    """
    if isinstance(raw, dict):
        try:
            parsed = msgspec.convert(raw, _ParsedCallResult)
        except msgspec.ValidationError:
            pass
        else:
            if all(_modelled(b) for b in parsed.content):
                sc = parsed.structured_content
                return parsed.content, parsed.is_error, None if sc is None else _encode(sc)
        raw = _encode(raw)  # read leniently, as JSON
    try:
        result = _decode_result(raw)
    except msgspec.ValidationError:
        pass
    except _UNDECODABLE as exc:
        raise _undecodable(exc) from None
    else:
        if all(map(_modelled, result.content)):
            structured = result.structured_content
            return result.content, result.is_error, bytes(structured) if _given(structured) else None
    loose = _loose(raw, _decode_loose_result)
    try:
        parts = _decode_raws(loose.content) if _given(loose.content) else []
    except msgspec.ValidationError:
        parts = []  # content that is not a list: no blocks, as the SDK's default
    is_error = bool(_decode_any(loose.is_error)) if loose.is_error else False
    structured = loose.structured_content
    return [_block(p) for p in parts], is_error, bytes(structured) if _given(structured) else None


# --------------------------------------------------------------------------- #
# tools/list pages
# --------------------------------------------------------------------------- #
def _entry(raw: msgspec.Raw, warn: Callable[[str], None]) -> ToolSpec | None:
    data = bytes(raw)
    try:
        entry: _ToolEntry | None = _decode_entry(data)
    except msgspec.ValidationError:
        obj = _decode_any(data)
        name = obj.get("name") if isinstance(obj, dict) else None
        entry = _salvage(_ToolEntry, obj, name=name) if isinstance(name, str) else None
    if entry is None or not entry.name:
        warn(f"skipped a malformed tool entry: {data[:200].decode('utf-8', 'replace')!r}")
        return None
    meta = bytes(entry.meta)
    return ToolSpec(
        name=entry.name,
        description=entry.description,
        input_schema=bytes(entry.input_schema) or b"null",
        # An object of no valid hints is no annotations: it costs no wire bytes.
        annotations=None if entry.annotations == ToolAnnotations() else entry.annotations,
        meta=meta if meta.startswith(b"{") else None,
        title=entry.title,
        output_schema=bytes(entry.output_schema) if _given(entry.output_schema) else None,
    )


def tools_page(raw: JSONData | dict[str, Any], warn: Callable[[str], None]) -> tuple[list[ToolSpec], str | None]:
    """One ``tools/list`` page: its tools (malformed entries skipped with a warning) and ``nextCursor``.

    ``raw`` is the page's JSON or the page already parsed (read as its
    JSON: a listing is not on the call path). Raises :class:`MCPJSONError`
    if it is not a JSON object.
    """
    if isinstance(raw, dict):
        raw = _encode(raw)
    page = _loose(raw, _decode_page)
    tools: list[ToolSpec] = []
    if _given(page.tools):
        try:
            entries = _decode_raws(page.tools)
        except msgspec.ValidationError:
            kind = type(_decode_any(page.tools)).__name__
            warn(f"tools/list answered 'tools' with a {kind}, not a list; no tools read")
            entries = []
        tools = [spec for e in entries if (spec := _entry(e, warn)) is not None]
    try:
        cursor = _decode_str(page.next_cursor) if page.next_cursor else None
    except msgspec.ValidationError:
        cursor = None  # a cursor that is not a string ends the listing
    return tools, cursor or None


async def list_tools(
    fetch: Callable[[str | None], Awaitable[JSONData | dict[str, Any]]], warn: Callable[[str], None]
) -> list[ToolSpec]:
    """Every page of a listing: ``fetch(cursor)`` returns one ``tools/list`` result's JSON.

    A cursor seen before ends the listing with a warning instead of spinning,
    and so does passing :data:`MAX_LIST_PAGES`.
    """
    tools: list[ToolSpec] = []
    seen: set[str] = set()
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page, cursor = tools_page(await fetch(cursor), warn)
        tools.extend(page)
        if cursor is None:
            return tools
        if cursor in seen:
            warn(f"tools/list repeated the cursor {cursor[:80]!r}; listing stopped at {len(tools)} tools")
            return tools
        seen.add(cursor)
    warn(f"tools/list had more than {MAX_LIST_PAGES} pages; listing stopped at {len(tools)} tools")
    return tools


def to_json(value: msgspec.Struct) -> dict[str, Any]:
    """A struct under its MCP JSON names (``mimeType``, ``readOnlyHint``, ``_meta``), unset fields left out."""
    out = msgspec.to_builtins(value)
    assert isinstance(out, dict)
    out.pop("extra", None)
    return out


def block_json(block: ContentBlock) -> dict[str, Any]:
    """A content block as MCP JSON: the server's own object for a block kept as it came (``extra``), else :func:`to_json`."""
    if block.extra:
        kept = msgspec.json.decode(block.extra)
        if isinstance(kept, dict):
            return kept
    return to_json(block)


# Longest progress message forwarded; a server's message is a status line.
PROGRESS_MESSAGE_MAX: Final = 500


def parse_progress(params: object) -> tuple[object, float, float | None, str | None] | None:
    """``(token, progress, total, message)`` from ``notifications/progress`` params, or None if malformed."""
    if not isinstance(params, dict):
        return None
    token = params.get("progressToken")
    progress = _number(params.get("progress"))
    if token is None or progress is None:
        return None
    total = _number(params.get("total"))
    message = params.get("message")
    text = message[:PROGRESS_MESSAGE_MAX] if isinstance(message, str) else None
    return token, progress, total, text


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


__all__ = [
    "PROGRESS_MESSAGE_MAX",
    "parse_progress",
    "KNOWN_BLOCKS",
    "MAX_LIST_PAGES",
    "CallOutcome",
    "ContentBlock",
    "JSONData",
    "MCPJSONError",
    "Resource",
    "ToolAnnotations",
    "ToolSpec",
    "block_json",
    "call_result",
    "json_object",
    "list_tools",
    "to_json",
    "tools_page",
]
