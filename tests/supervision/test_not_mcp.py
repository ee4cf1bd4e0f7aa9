"""A command that is not an MCP server (issue 13, item 3): the error says what happened.

``cat`` echoes the initialize request back; ``python -c "print(1)"`` writes
a line and exits 0; a tool prints a banner and exits, or prints one and waits;
a command stays silent. Each fails at open with an error that quotes what the
command wrote on stdout instead of JSON-RPC (or says it wrote nothing), says
it does not look like an MCP stdio server, and whose hint promises no stderr
tail when there is none. A real crash at start keeps its exit code and tail.
"""

from __future__ import annotations

import time

import pytest
from helpers import ISOLATIONS, PY, run
from lovia_mcp_worker.wire import failures
from lovia_mcp_worker.wire.confinement import Limits

from lovia_mcp import MCPError, MCPServerStdio

NOT_MCP = "does not look like an MCP stdio server"
# Generous: a command that is not a server fails as soon as it answers or
# exits, far inside this, while open_timeout is left at its default (120 s).
FAILS_WITHIN = 10.0


async def open_error(command: str, args: list[str], isolation: str, **options: object) -> tuple[MCPError, float]:
    server = MCPServerStdio(command=command, args=args, name="x", isolation=isolation, **options)  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(MCPError) as info:
        async with server.session():
            pass
    return info.value, time.monotonic() - started


def no_empty_tail_promise(err: MCPError) -> None:
    assert err.stderr_tail == []
    assert "stderr tail below" not in (err.hint or ""), err.hint
    assert "last stderr lines" not in (err.hint or ""), err.hint


@ISOLATIONS
@pytest.mark.timing
def test_cat_is_reported_as_echoing_the_initialize_request_not_as_method_not_found(isolation: str) -> None:
    err, elapsed = run(open_error("cat", [], isolation))
    print(f"[{isolation}] cat: {err} ({elapsed:.3f} s)")
    assert err.kind == "open"
    assert "Method not found" not in str(err)
    # The first request it echoes: the server/discover probe, written before initialize (protocol="auto").
    assert "sent lovia-mcp's own 'server/discover' request back on stdout" in str(err)
    assert '\'{"jsonrpc":"2.0","id":1,"method":"server/discover"' in str(err)  # the first bytes, quoted
    assert NOT_MCP in str(err)
    assert "reads JSON-RPC requests on stdin" in (err.hint or "")
    no_empty_tail_promise(err)
    assert elapsed < FAILS_WITHIN, elapsed


@ISOLATIONS
@pytest.mark.timing
def test_a_command_printing_one_line_and_exiting_0_quotes_that_line(isolation: str) -> None:
    err, elapsed = run(open_error(PY, ["-c", "print(1)"], isolation))
    print(f"[{isolation}] print(1): {err} ({elapsed:.3f} s)")
    assert err.kind == "open" and err.exit_code == 0
    assert "exited with code 0 before answering the MCP handshake" in str(err)
    assert "it wrote '1\\n' on stdout instead of JSON-RPC" in str(err)
    assert NOT_MCP in str(err)
    no_empty_tail_promise(err)
    assert elapsed < FAILS_WITHIN, elapsed


@ISOLATIONS
def test_a_banner_then_exit_quotes_the_first_bytes_of_the_banner(isolation: str) -> None:
    banner = "Welcome to frobnicator 2.1 " + "=" * 300
    err, _ = run(open_error(PY, ["-c", f"print({banner!r}); print('usage: frob [opts]')"], isolation))
    assert err.kind == "open"
    assert f"it wrote {banner[: failures.STDOUT_QUOTE_BYTES]!r}..." in str(err), str(err)
    assert "usage: frob" not in str(err)  # only the first bytes are quoted
    assert NOT_MCP in str(err)
    no_empty_tail_promise(err)


@ISOLATIONS
def test_a_silent_command_times_out_saying_it_never_answered_and_wrote_nothing(isolation: str) -> None:
    err, elapsed = run(open_error(PY, ["-c", "import time; time.sleep(300)"], isolation, open_timeout=1.0))
    print(f"[{isolation}] silent: {err} ({elapsed:.3f} s)")
    assert err.kind == "open"
    assert "within open_timeout=1 s: it never answered the MCP initialize request and wrote nothing on stdout" in str(
        err
    )
    no_empty_tail_promise(err)


@ISOLATIONS
def test_a_banner_then_silence_times_out_quoting_the_banner(isolation: str) -> None:
    err, _ = run(open_error("sh", ["-c", "echo 'Server ready on :8080'; exec sleep 300"], isolation, open_timeout=1.0))
    assert err.kind == "open"
    assert "never answered the MCP initialize request and wrote 'Server ready on :8080\\n' on stdout" in str(err)
    assert NOT_MCP in str(err)
    no_empty_tail_promise(err)


@ISOLATIONS
def test_a_crash_at_start_keeps_its_exit_code_and_stderr_tail_without_the_not_mcp_verdict(isolation: str) -> None:
    err, _ = run(open_error(PY, ["-c", "import sys; print('config missing', file=sys.stderr); sys.exit(2)"], isolation))
    assert err.kind == "server_exited" and err.exit_code == 2
    assert "exited with code 2 before answering the MCP handshake" in str(err)
    assert NOT_MCP not in str(err)
    assert err.stderr_tail == ["config missing"]
    assert "stderr tail below" in (err.hint or "") and "config missing" in (err.hint or "")


@pytest.mark.unit
def test_an_exit_with_nothing_on_stderr_does_not_promise_a_stderr_tail() -> None:
    quiet = failures.exited(3, [], Limits())
    assert quiet.hint == "Check the server's log (it wrote nothing on stderr)."
    loud = failures.exited(3, ["Traceback"], Limits())
    assert loud.hint == failures.HINT_LOG
    clean = failures.exited_before_handshake(0, b"", [], Limits())
    assert clean.kind == "open" and "wrote nothing on stdout or stderr" in clean.message and NOT_MCP in clean.message
