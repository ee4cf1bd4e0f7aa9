"""What the model will never see stays in the worker: the middle of a long text result.

An agent with an output cap (lovia's ``max_output_chars``, or the agent's
``max_tool_output_chars``) keeps at most ``keep`` characters from each end of
a tool's rendered text. When a call says so (``CallTool.keep``), the worker
leaves out everything between the first ``keep`` and the last ``keep``
characters of the result's text, counted over its text blocks and embedded
text resources in order, and says how many it left out (``Result.omitted``).

Why that is exact whatever the renderer adds: rendering passes text through
unchanged and only adds around it (separators, an error prefix, placeholders
for binary blocks), so a character at text position ``i`` lands at rendered
position ``>= i``, from either end. Every character the worker leaves out is
therefore beyond ``keep`` from both ends of the rendered text, and the agent
can still cut the rendered text exactly (head, marker with the whole length,
tail) from what crossed. Blocks keep their place (a block emptied by the cut
stays, with ``""``), so separators do too.

Binary blocks (images, audio, blobs) cross whole: their placeholder's length
depends on their size. ``structuredContent`` is never rendered by the default
renderer; with ``keep`` it crosses only while it is small (:func:`keeps_structured`).
"""

from __future__ import annotations

from typing import Final

import msgspec

from ..wire.mcpjson import ContentBlock

# Nothing is left out unless the text is longer than both ends by this much:
# a few kilobytes more on the pipe cost less than a cut result's surprises
# (a renderer reading the blocks) for results barely over the cap.
KEEP_SLACK: Final = 64 * 1024


def _text_of(block: ContentBlock) -> str | None:
    if block.type == "text":
        return block.text
    if block.type == "resource" and block.resource is not None:
        return block.resource.text
    return None


def _with_text(block: ContentBlock, text: str) -> ContentBlock:
    if block.type == "text":
        return msgspec.structs.replace(block, text=text)
    assert block.resource is not None
    return msgspec.structs.replace(block, resource=msgspec.structs.replace(block.resource, text=text))


def cut_middle(content: list[ContentBlock], keep: int) -> tuple[list[ContentBlock], int]:
    """``content`` with its text kept only within ``keep`` characters of either end, and how many were left out."""
    texts = [_text_of(block) for block in content]
    total = sum(len(t) for t in texts if t)
    if keep < 0 or total <= 2 * keep + KEEP_SLACK:
        return content, 0
    tail_from = total - keep  # text positions [keep, tail_from) are left out
    out: list[ContentBlock] = []
    omitted = 0
    start = 0
    for block, text in zip(content, texts):
        if not text:
            out.append(block)
            continue
        end = start + len(text)
        if end <= keep or start >= tail_from:
            out.append(block)
        else:
            head = text[: max(0, keep - start)]
            tail = text[max(0, tail_from - start) :]
            omitted += len(text) - len(head) - len(tail)
            out.append(_with_text(block, head + tail))
        start = end
    return out, omitted


def keeps_structured(structured: bytes | None, keep: int) -> bytes | None:
    """``structuredContent`` if it is small enough to cross under ``keep``, else ``None``."""
    if structured is None or len(structured) <= 2 * keep + KEEP_SLACK:
        return structured
    return None


__all__ = ["KEEP_SLACK", "cut_middle", "keeps_structured"]
