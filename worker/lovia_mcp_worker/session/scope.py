"""One call's scope: what a ``tools/call`` owns from reaching its server to its answer.

The host opens a :class:`CallScope` (:meth:`CallScopes.open`) as a call
reaches its generation, ends it (:meth:`CallScope.end`) as the server
answers or the call ends otherwise, and makes the call's ``Result`` from it
(:meth:`CallScope.result`). The scope holds the call's parts:

- its accounting window (:mod:`.accounting`): what the server's tree used;
- its denials window (:mod:`.denials`): what the sandbox refused meanwhile;
- its progress (:mod:`.progress`): coalesced for the library, passed on one
  by one for a relay (``lovia-mcp serve``);
- its cut (:mod:`.cut`): the middle of a long text result left here;
- the wait for a re-listing the server announced before it answered
  (:mod:`.listing`), so the caller sees the new list with the answer.

:class:`CallScopes` is what every call's scope draws on: the host's
accounting, its denials, its listing, its answers. The generations keep the
same accounting and denials for their own ends (a generation's meter closes
as it ends; its launches report their refusals).
"""

from __future__ import annotations

from collections.abc import Callable

from ..wire.mcpjson import ContentBlock
from ..wire.messages import CallTool, CallUsage, Denied, Result, ServerSpec, WorkerMessage
from . import cut
from .accounting import Accounting, Window
from .denials import Attribution
from .generation import Generation
from .listing import Listing
from .progress import PROGRESS_INTERVAL, ProgressForwarder


class CallScopes:
    """What each call's scope draws on; :attr:`spec` is the open's, set by the host."""

    def __init__(
        self, emit: Callable[[WorkerMessage], None], accounting: Accounting, denials: Attribution, listing: Listing
    ) -> None:
        self.spec: ServerSpec | None = None
        self.emit = emit
        self.accounting = accounting
        self.denials = denials
        self.listing = listing

    @property
    def waiting(self) -> bool:
        """Whether a helper the sandbox set up beside the server is not ready yet (calls wait: :meth:`settled`)."""
        return bool(self.denials.starting)

    async def settled(self) -> None:
        """Wait (bounded) for the sandbox's helpers, before a call reaches the server."""
        await self.denials.settled()

    def open(self, msg: CallTool, gen: Generation) -> CallScope:
        """Call ``msg`` has reached ``gen``: its windows open now."""
        return CallScope(self, msg, gen)


class CallScope:
    """One call's accounting window, denials window, progress and cut."""

    __slots__ = ("_gen", "_keep", "_rid", "_scopes", "_window", "denied", "progress", "usage")

    def __init__(self, scopes: CallScopes, msg: CallTool, gen: Generation) -> None:
        self._scopes = scopes
        self._rid = msg.id
        self._keep = msg.keep
        self._gen = gen
        spec = scopes.spec
        self._window: Window | None = scopes.accounting.begin(gen, spec)
        scopes.denials.begin(msg.id)
        # A relay (lovia-mcp serve) passes every update on, as a proxy must; the
        # library's connection gets them coalesced.
        self.progress = ProgressForwarder(
            scopes.emit, msg.id, interval=0.0 if spec is not None and spec.relay else PROGRESS_INTERVAL
        )
        self.usage: CallUsage | None = None
        self.denied: list[Denied] = []

    def relisting(self) -> bool:
        """Whether the server announced a changed list before this answer (then :meth:`relisted` first)."""
        return self._scopes.listing.relisting(self._gen)

    async def relisted(self) -> None:
        """Wait (bounded) until the new list has gone out: the caller sees it with the answer."""
        await self._scopes.listing.settled(self._gen)

    def end(self) -> None:
        """The server answered, or the call ended otherwise: the windows close, held progress goes out."""
        scopes = self._scopes
        self.usage = scopes.accounting.end(self._window)
        self.denied = scopes.denials.end(self._rid)
        self.progress.close()  # the last progress held goes out before the answer

    def result(self, content: list[ContentBlock], is_error: bool, structured: bytes | None) -> Result:
        """The call's answer (after :meth:`end`): its result cut to ``CallTool.keep``, with its usage and denials."""
        omitted = 0
        keep = self._keep
        if keep is not None:
            content, omitted = cut.cut_middle(content, keep)
            structured = cut.keeps_structured(structured, keep)
        return Result(
            id=self._rid,
            content=content,
            is_error=is_error,
            structured_content=structured,
            omitted=omitted,
            usage=self.usage,
            denied=self.denied,
        )

    def answered(self) -> None:
        """The answer went out: an idle generation is made ready for the next call."""
        self._scopes.accounting.answered(self._window)


__all__ = ["CallScope", "CallScopes"]
