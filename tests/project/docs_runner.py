"""Run a page's Python blocks in this fresh process, as a reader's script would run: ``python docs_runner.py SPEC``.

SPEC is a JSON file: ``blocks`` (each ``{"page", "line", "source"}``, the
source padded so that its line numbers are the page's), ``turns`` (what a
model named by a string answers: ``["call", name, arguments]`` or
``["text", content]``) and ``report`` (where to write what happened).

A model string (``"openai:gpt-4.1-mini"``, ``"anthropic:..."``) is served
by lovia's ``ScriptedProvider`` replaying ``turns``, a fresh one per
provider made, registered with ``lovia.providers.register_provider`` before
any block runs: the blocks themselves are not changed. With ``trace``, an
OpenTelemetry SDK records lovia-mcp's spans in memory.

The blocks run in order in one namespace named ``__main__``, each block's
stdout captured on its own. The report holds each block's output, the tool
results each scripted model was sent, and the recorded spans' events; on a
failure the traceback (pointing at the page's lines) goes to stderr and the
exit status is 1.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback
from pathlib import Path
from typing import Any

from lovia.providers import register_provider
from lovia.testing import ScriptedProvider, call, text

MODEL_PREFIXES = ("openai", "anthropic")


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    made: list[ScriptedProvider] = []

    def scripted(model: str, **_: Any) -> ScriptedProvider:
        turns = [call(t[1], t[2]) if t[0] == "call" else text(t[1]) for t in spec["turns"]]
        made.append(ScriptedProvider(turns))
        return made[-1]

    for prefix in MODEL_PREFIXES:
        register_provider(prefix, scripted)
    spans = None
    if spec.get("trace"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        trace.set_tracer_provider(provider)

    namespace: dict[str, Any] = {"__name__": "__main__"}
    outputs: list[str] = []
    status = 0
    for block in spec["blocks"]:
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(block["source"], block["page"], "exec"), namespace)
        except BaseException:
            sys.stderr.write(f"the block at {block['page']}:{block['line']} failed:\n{traceback.format_exc()}")
            status = 1
        outputs.append(printed.getvalue())
        if status:
            break
    report = {
        "outputs": outputs,
        "tool_results": [m.content for p in made for turn in p.calls for m in turn if m.role == "tool"],
        "span_events": [
            {"span": s.name, "event": e.name, "attributes": dict(e.attributes or {})}
            for s in (spans.get_finished_spans() if spans is not None else ())
            for e in s.events
        ],
    }
    Path(spec["report"]).write_text(json.dumps(report, default=str))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
