#!/usr/bin/env python3
"""Mutation check: each known weakening of a protection must fail the tests named for it.

A protection whose removal no test notices is not tested. Each entry of
:data:`MUTANTS` is one weakening, written as a textual replacement in one
file (``old`` must occur there exactly once) and the tests that must then
fail. For each entry the script

1. refuses to start when the file has uncommitted changes (its restore
   would otherwise be the only copy of them) or ``old`` is not there
   exactly once (the code moved on: update the entry);
2. runs the tests unchanged, which must pass (a test that already fails
   kills every mutant and proves nothing);
3. applies the replacement, runs ``pytest -x`` on the tests, and restores
   the file whatever happens (``finally``, SIGTERM included);
4. reports ``killed`` (a test failed, and which), ``survived`` (they all
   passed: the weakening goes unnoticed), or ``error`` (pytest could not
   run them: a wrong test name, a collection error, a timeout).

Usage (from the repository; the tests run on its code, worker included)::

    .venv/bin/python scripts/mutants.py            # every entry
    .venv/bin/python scripts/mutants.py --list     # the table
    .venv/bin/python scripts/mutants.py frame-cap-core cli-escape-block

Exit status: 0 every mutant selected was killed; 1 one survived or could
not be run; 2 refused (a dirty file, a stale entry, an unknown name).

Adding a weakening: one :class:`Mutant` in :data:`MUTANTS` with the
smallest ``old`` that is unique in its file, the ``new`` that a careless or
hostile change would write, and the few test files or node ids that guard
it. It reruns those tests twice, so it is kept out of the test command.

Caveats: a test that needs what the machine lacks (cgroups, a backend) is
skipped, and its mutant then survives here; the ``needs`` column says so.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
# One mutant's test run, start to end: the named tests take seconds to a
# minute; past this something hangs that pytest-timeout did not stop.
RUN_TIMEOUT: Final = 600.0
# How long pytest gets to end after SIGTERM (its own cleanup: the leak check
# kills what a test left) before its process group is killed.
STOP_GRACE: Final = 10.0


@dataclass(frozen=True, kw_only=True)
class Mutant:
    """One weakening: ``old`` replaced by ``new`` in ``path``; ``tests`` must then fail."""

    name: str
    path: str  # relative to the repository's root
    old: str
    new: str
    tests: tuple[str, ...]  # pytest arguments: files or node ids
    why: str  # what the weakening breaks
    needs: str = ""  # what the machine must have for the tests to run (else they skip)


# Tests that guard more than one weakening, named once.
OAUTH_TESTS: Final = "tests/gateway/test_gateway_oauth.py::"
FRAME_CAP_TEST: Final = (
    "tests/protocol/test_framing.py::test_the_agent_drops_a_worker_that_sends_a_frame_over_the_cap_its_"
    "connection_configured",
)
FORKSERVER_KILL_TEST: Final = (
    "tests/client/test_forkserver.py::test_the_forkserver_kills_what_a_sigkilled_worker_left_and_removes_its_cgroups",
)
TERMINAL_TESTS: Final = ("tests/cli/test_cli_terminal.py",)

MUTANTS: Final = [
    Mutant(
        name="frame-cap-core",
        path="lovia_mcp/client/core.py",
        old="channel = ProcessChannel(frame_cap(self.spec.limits.max_result_bytes))",
        new="channel = ProcessChannel(2 * 1024**3)",
        tests=FRAME_CAP_TEST,
        why="the agent takes frames up to 2 GiB from a worker, whatever max_result_bytes says",
    ),
    Mutant(
        name="frame-cap-channel",
        path="lovia_mcp/client/worker_link.py",
        old='cap=self.cap, peer="the worker"',
        new='cap=2 * 1024**3, peer="the worker"',
        tests=FRAME_CAP_TEST,
        why="the channel's reader ignores the cap the connection gave it",
    ),
    Mutant(
        name="forkserver-kill-adopted",
        path="worker/lovia_mcp_worker/forkserver/server.py",
        old="""    for pid in adopted:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)""",
        new="""    for pid in adopted:
        pass""",
        tests=FORKSERVER_KILL_TEST,
        why="a SIGKILLed worker's grandchildren, orphans and escapees live on (the watch path has no other remedy)",
    ),
    Mutant(
        name="forkserver-remove-cgroups",
        path="worker/lovia_mcp_worker/forkserver/server.py",
        old="if not cgroup_layout.remove_leftovers(pid):",
        new="if True:",
        tests=FORKSERVER_KILL_TEST,
        why="a SIGKILLed worker's cgroups stay until some later worker's sweep",
        needs="cgroups (root, or a delegated memory and pids hierarchy)",
    ),
    Mutant(
        name="gateway-token-compare",
        path="lovia_mcp/gateway/auth/tokens.py",
        old="hmac.compare_digest(given, known)",
        new="given == known",
        tests=(
            "tests/gateway/test_gateway_auth.py::test_bearer_tokens_are_each_compared_in_constant_time_and_never_with_equality",
        ),
        why="the bearer token is compared in variable time (its prefix shows in the timing)",
    ),
    Mutant(
        name="gateway-access-call",
        path="lovia_mcp/gateway/app.py",
        old="if raw in self.callable_tools(backend, holder, principal):",
        new="if backend.knows(raw, holder):",
        tests=(
            "tests/gateway/test_gateway_principals.py::test_a_forbidden_call_is_answered_byte_for_byte_as_an_unknown_tool_and_audited_as_denied",
        ),
        why="a principal calls a listed tool its access rules do not allow",
    ),
    Mutant(
        name="gateway-access-schema",
        path="lovia_mcp/gateway/app.py",
        old="tool = self.callable_tools(backend, backend.holder(None, principal), principal).get(raw)",
        new="tool = {t.raw_name: t for t in backend.tools(backend.holder(None, principal))}.get(raw)",
        tests=(
            "tests/gateway/test_gateway_principals.py::test_a_forbidden_call_is_answered_byte_for_byte_as_an_unknown_tool_and_audited_as_denied",
        ),
        why="an Mcp-Param header check (HTTP 400) tells a principal that a tool it may not call exists",
    ),
    Mutant(
        name="gateway-access-listing",
        path="lovia_mcp/gateway/app.py",
        old="for tool in self.callable_tools(backend, backend.holder(session, principal), principal).values():",
        new="for tool in backend.tools(backend.holder(session, principal)):",
        tests=(
            "tests/gateway/test_gateway_principals.py::test_each_principal_lists_only_the_tools_its_access_rules_allow",
        ),
        why="a principal lists tools its access rules do not allow",
    ),
    Mutant(
        name="gateway-access-endpoint",
        path="lovia_mcp/gateway/routes.py",
        old="if manager is None or (only is not None and not self._access.sees(principal, only)):",
        new="if manager is None:",
        tests=(
            "tests/gateway/test_gateway_principals.py::test_a_server_a_principal_may_not_see_has_no_endpoint_for_it_and_metrics_only_for_who_may_read_them",
        ),
        why="a principal reaches the endpoint of a server it may not use",
    ),
    Mutant(
        name="gateway-per-principal-holder",
        path="lovia_mcp/gateway/upstreams.py",
        old="        return PrincipalHolder(principal)\n",
        new="        return super().holder(session, principal)\n",
        tests=(
            "tests/gateway/test_gateway_principals.py::test_each_principal_has_a_server_process_of_its_own_shared_by_its_sessions_and_stateless_requests",
        ),
        why="a per-principal server is chosen by session: a principal's sessions and stateless calls do not share it",
    ),
    Mutant(
        name="gateway-audit-failure",
        path="lovia_mcp/gateway/audit.py",
        old="            self._failed(exc)\n",
        new="            self._failed(exc)\n            raise\n",
        tests=(
            "tests/gateway/test_gateway_principals.py::test_a_failed_audit_write_is_logged_once_a_minute_and_the_call_is_still_served",
        ),
        why="a full disk under the audit log fails every call",
    ),
    Mutant(
        name="landlock-write-parent",
        path="worker/lovia_mcp_worker/sandbox/landlock.py",
        # Paths are granted by the descriptors the worker pinned: the weakening grants the parent instead.
        old="                    grants.add_fd(held_fd, real, rights)\n",
        new="                    grants.add(os.path.dirname(real), rights)\n",
        tests=("tests/sandbox/test_paths.py::test_a_sandboxed_server_cannot_write_next_to_its_cwd",),
        why="a Landlock-boxed server may write next to its cwd",
        needs="Landlock (Linux 5.13+)",
    ),
    Mutant(
        name="bwrap-no-userns",
        path="worker/lovia_mcp_worker/sandbox/bwrap.py",
        old="""        "--unshare-user",
        "--disable-userns",
""",
        new="",
        tests=("tests/sandbox/test_sandbox.py", "tests/sandbox/test_escapes.py"),
        why="a bwrap-boxed server runs in the host's user namespace, as uid 0 with a full bounding set under root",
        needs="bubblewrap",
    ),
    Mutant(
        name="cli-escape-block",
        path="lovia_mcp/cli/_terminal.py",
        old="return text.translate(_BLOCK)",
        new="return text",
        tests=TERMINAL_TESTS,
        why="results, error messages and stderr tails drive the user's terminal",
    ),
    Mutant(
        name="cli-escape-line",
        path="lovia_mcp/cli/_terminal.py",
        old="return text.translate(_LINE)",
        new="return text",
        tests=TERMINAL_TESTS,
        why="tool descriptions, parameters and the status line drive the user's terminal",
    ),
    Mutant(
        name="cli-escape-json",
        path="lovia_mcp/cli/_terminal.py",
        old="ensure_ascii=False).translate(_JSON)",
        new="ensure_ascii=False)",
        tests=TERMINAL_TESTS,
        why="--json output carries C1 controls, DEL and bidi overrides raw",
    ),
    Mutant(
        name="arguments-surrogates",
        path="lovia_mcp/connection/live.py",
        old="return _json_encode(_surrogates_replaced(arguments))",
        new="return _json_encode(arguments)",
        tests=(
            "tests/protocol/test_framing.py::test_a_lone_surrogate_in_a_models_arguments_reaches_the_server_as_the_"
            "replacement_character",
        ),
        why="a model's lone surrogate fails the call with a bare UnicodeEncodeError",
    ),
    Mutant(
        name="env-trust-dropped",
        path="worker/lovia_mcp_worker/wire/environment.py",
        old=" or name in TRUST or (",
        new=" or (",
        tests=(
            "tests/supervision/test_trust_env.py::test_a_server_that_trusts_its_registry_through_ssl_cert_file_alone_"
            "starts_with_it_set_in_the_agent",
            "tests/supervision/test_trust_env.py::test_an_unlocked_uvx_server_opens_when_the_agent_trusts_its_registry_"
            "through_ssl_cert_file_alone",
        ),
        why="servers no longer get SSL_CERT_FILE and the other trust paths: uvx behind a TLS-intercepting proxy fails",
    ),
    Mutant(
        name="env-proxy-credentials",
        path="worker/lovia_mcp_worker/wire/environment.py",
        old="(name in PROXY and not carries_credentials(value))",
        new="name in PROXY",
        tests=(
            "tests/supervision/test_trust_env.py::test_proxy_variables_pass_without_credentials_and_stay_out_with_them",
        ),
        why="a proxy URL's user name and password reach every server",
    ),
    Mutant(
        name="env-proxy-over-sandbox",
        path="worker/lovia_mcp_worker/containment/launch.py",
        old="        plan = await _sandboxed(spec, spec.sandbox, argv, env)\n",
        new="        plan = await _sandboxed(spec, spec.sandbox, argv, env)\n"
        "        env.update({k: v for k, v in os.environ.items() if k in environment.PROXY})\n",
        tests=(
            "tests/supervision/test_trust_env.py::test_in_a_sandbox_with_an_allowlist_the_users_proxy_variables_never_"
            "replace_the_sandboxs",
        ),
        why="the user's proxy variables replace the sandbox's: the allowlist proxy is no longer the box's way out",
        needs="bubblewrap or Landlock ABI 4",
    ),
    Mutant(
        name="doctor-escape-reads-held",
        path="lovia_mcp/doctor/probes.py",
        old='return "escaped: " + str(probe(args))',
        new='return "held: " + str(probe(args))',
        tests=(
            "tests/cli/test_doctor.py::test_a_backend_that_boxes_nothing_lets_every_probe_escape_and_the_command_fails",
        ),
        why="lovia-mcp doctor reports a box that leaks as holding",
        needs="root (the probes' escapes unboxed)",
    ),
    Mutant(
        name="landlock-trust-files",
        path="worker/lovia_mcp_worker/sandbox/landlock.py",
        old="            grants.add(path, FS_READ_FILE)\n",
        new="            pass\n",
        tests=(
            "tests/supervision/test_trust_env.py::test_a_sandboxed_server_reads_the_ca_bundle_ssl_cert_file_names_and_"
            "trusts_its_registry",
        ),
        why="a Landlock-boxed server cannot read the CA bundle SSL_CERT_FILE names: uvx behind a TLS proxy fails there",
        needs="Landlock ABI 4",
    ),
    Mutant(
        name="accounting-peak-cgroup",
        path="worker/lovia_mcp_worker/containment/usage.py",
        old="os.write(self._peak, self._reset_bytes)",
        new="pass",
        tests=(
            "tests/supervision/test_accounting.py::test_a_memory_spike_freed_before_the_answer_is_the_calls_peak_and_"
            "not_the_next_calls",
        ),
        why="a call's peak under a cgroup is the cgroup's lifetime peak: an echo reports an earlier call's spike",
        needs="cgroups (root)",
    ),
    Mutant(
        name="accounting-peak-watch",
        path="worker/lovia_mcp_worker/containment/usage.py",
        old='os.write(self._clear, b"5")',
        new="pass",
        tests=(
            "tests/supervision/test_accounting.py::test_a_memory_spike_freed_before_the_answer_is_the_calls_peak_and_"
            "not_the_next_calls",
        ),
        why="a call's peak on the watch is the processes' lifetime peak: an echo reports an earlier call's spike",
    ),
    Mutant(
        name="accounting-egress-bytes",
        path="worker/lovia_mcp_worker/sandbox/egress/netproxy.py",
        old="    while data := await reader.read(_CHUNK):\n        traffic.bytes += len(data)",
        new="    while data := await reader.read(_CHUNK):\n        pass",
        tests=("tests/sandbox/egress/test_egress_accounting.py",),
        why="a sandboxed call's egress counts its request head only, not the bytes relayed",
        needs="a sandbox backend",
    ),
    Mutant(
        name="gateway-notify-everyone",
        path="lovia_mcp/gateway/notify.py",
        old="return (principal is None or who == principal) and self._access.sees(who, server)",
        new="return True",
        tests=(
            "tests/gateway/test_gateway_notify.py::test_a_change_is_told_only_to_principals_that_may_see_the_server_and_a_"
            "per_principal_one_to_its_own",
        ),
        why="a principal hears when servers it may not see, or another principal's own server, change",
    ),
    Mutant(
        name="gateway-no-share",
        path="lovia_mcp/gateway/principals.py",
        old="return max(1, cap // max(1, principals))",
        new="return cap",
        tests=("tests/gateway/test_gateway_shares.py",),
        why="one principal fills an endpoint's sessions and listen streams, or a per-session server's slots, "
        "for the others",
    ),
    Mutant(
        name="gateway-share-answered-only",
        path="lovia_mcp/gateway/admission.py",
        old="return self._sessions.held(principal, path) + self._pending[principal, path] >= self.session_share",
        new="return self._sessions.held(principal, path) >= self.session_share",
        tests=(
            "tests/gateway/test_gateway_shares.py::test_no_principal_can_hold_more_than_its_share_of_an_endpoints_sessions",
        ),
        why="a principal that opens its sessions all at once, before the SDK answers any, takes the whole endpoint",
    ),
    Mutant(
        name="config-file-unguarded",
        path="lovia_mcp/opening/config_file/loader.py",
        old="return [dataclasses.replace(s, config_files=paths) if isinstance(s, MCPServerStdio) else s for s in servers]",
        new="return servers",
        tests=("tests/sandbox/test_config_guard.py",),
        why="a sandboxed server rewrites the config file it was loaded from (an unsandboxed server of its own, "
        "run on the host next time) or its lock",
        needs="a sandbox backend",
    ),
    Mutant(
        name="config-files-not-in-box",
        path="lovia_mcp/config/server.py",
        old="_sandbox.resolved(self._guarded(), cwd)",
        new="_sandbox.resolved(self.sandbox, cwd)",
        tests=("tests/sandbox/test_config_guard.py",),
        why="the recorded config file and lock never reach the box: the server rewrites them",
        needs="a sandbox backend",
    ),
    Mutant(
        name="gateway-files-unguarded",
        path="lovia_mcp/gateway/serve.py",
        old="own = tuple(os.path.abspath(f) for f in files if f)",
        new="own = ()",
        tests=(
            "tests/sandbox/test_config_guard.py::test_a_gateways_sandboxed_server_cannot_rewrite_its_config_lock_"
            "token_file_or_audit_log",
        ),
        why="a gateway's sandboxed server rewrites the token file (letting itself in next time) or the audit log",
        needs="a sandbox backend",
    ),
    Mutant(
        name="no-proxy-ignored",
        path="worker/lovia_mcp_worker/sandbox/egress/netproxy.py",
        old="and not self.upstream.direct(request.host, request.port)",
        new="and True",
        tests=(
            "tests/sandbox/egress/test_netproxy.py::test_a_no_proxy_name_is_reached_directly_with_the_address_check_and_"
            "the_others_through_the_upstream",
        ),
        why="an internal name the operator listed in no_proxy is sent to the upstream proxy, which cannot reach it",
    ),
    Mutant(
        name="gateway-wait-for-all",
        path="lovia_mcp/gateway/admission.py",
        old="if only in (None, name) and self._access.sees(principal, name)\n",
        new="if only in (None, name)\n",
        tests=(
            "tests/gateway/test_gateway_serve.py::test_a_request_is_not_held_for_a_server_its_principal_may_not_"
            "see_nor_told_its_name",
        ),
        why="before ready, a principal waits for (and hears the failure of) a server it may not see",
    ),
    Mutant(
        name="lock-trusted",
        path="lovia_mcp/lock/packages.py",
        old="    wrong = malformed(package, source)\n",
        new="    wrong = None\n",
        tests=("tests/lock/test_lock_forged.py",),
        why="a lock file's cache name and entry are used as written: a path out of the cache runs",
    ),
    Mutant(
        name="lock-entry-undeclared",
        path="lovia_mcp/lock/packages.py",
        old="if source is not None and declared_entry(package, source) != package.entry:",
        new="if False:",
        tests=("tests/lock/test_lock_forged.py",),
        why="a lock may launch a function the verified package does not declare",
    ),
    Mutant(
        name="seccomp-vm-writev-allowed",
        path="worker/lovia_mcp_worker/sandbox/seccomp.py",
        old='    "process_vm_readv",\n    "process_vm_writev",\n',
        new='    "process_vm_readv",\n',
        tests=(
            "tests/sandbox/test_seccomp.py::test_every_call_on_the_deny_list_is_refused_inside_the_box",
            "tests/sandbox/test_escapes.py::test_each_escape_fails_in_the_sandbox[process_vm_writev-bwrap]",
            "tests/sandbox/test_escapes.py::test_each_escape_fails_in_the_sandbox[process_vm_writev-landlock]",
        ),
        why="a sandboxed server writes the memory of another process of its user (process_vm_writev)",
        needs="a sandbox backend",
    ),
    Mutant(
        name="seccomp-fanotify-allowed",
        path="worker/lovia_mcp_worker/sandbox/seccomp.py",
        old='    "fanotify_init",\n',
        new="",
        tests=("tests/sandbox/test_seccomp.py::test_every_call_on_the_deny_list_is_refused_inside_the_box",),
        why="a sandboxed server may make a fanotify group (unprivileged ones watch files by handle)",
        needs="a sandbox backend",
    ),
    Mutant(
        name="landlock-carve-follows-links",
        path="worker/lovia_mcp_worker/sandbox/landlock.py",
        old="os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd",
        new="os.O_PATH | os.O_CLOEXEC, dir_fd=fd",
        tests=("tests/sandbox/test_landlock.py::test_a_symlink_in_a_carved_folder_grants_nothing_where_it_points",),
        why="a symlink in a carved writable folder carries the write grant to its target anywhere on disk",
        needs="Landlock ABI 4",
    ),
    Mutant(
        name="gateway-callable-bypassed",
        path="lovia_mcp/gateway/app.py",
        old="if raw in self.callable_tools(backend, holder, principal):",
        new="if not self.access.restricted or raw in self.callable_tools(backend, holder, principal):",
        tests=("tests/gateway/test_gateway_callable.py",),
        why="without an access section a client calls by name a tool include_tools/exclude_tools or the lock hide",
    ),
    Mutant(
        name="connection-callable-bypassed",
        path="lovia_mcp/connection/live.py",
        old="        if name not in self._callable:\n",
        new="        if name in self._withheld:\n",
        tests=(
            "tests/plugin/test_callable.py::test_a_tool_the_filters_hide_is_refused_by_name_exactly_as_a_tool_the_"
            "server_does_not_have",
        ),
        why="MCPConnection.call_tool runs a tool include_tools/exclude_tools hide, or one the server does not list",
    ),
    Mutant(
        name="pin-meta-ignored",
        path="lovia_mcp/lock/definition.py",
        old='"_meta": _schema(spec.meta) or None,',
        new='"_meta": None,',
        tests=("tests/plugin/test_callable.py", "tests/lock/test_pin_hash.py"),
        why="a tool's _meta (which the gateway forwards to its clients) changes after the lock with no quarantine",
    ),
    Mutant(
        name="gateway-bearer-scheme",
        path="lovia_mcp/gateway/auth/authenticator.py",
        old='if scheme.lower() != b"bearer" or not token:',
        new="if not token:",
        tests=(
            "tests/gateway/test_gateway_auth.py::test_a_request_without_the_right_bearer_token_gets_401_on_every_protected_route",
        ),
        why="a valid token under another scheme (Basic) lets the request in",
    ),
    Mutant(
        name="gateway-unknown-names-servers",
        path="lovia_mcp/gateway/app.py",
        old='data={"servers": [s for s in sorted(self.upstreams) if self.access.sees(principal, s)]},',
        new='data={"servers": sorted(self.upstreams)},',
        tests=(
            "tests/gateway/test_gateway_principals.py::test_an_unknown_tools_error_names_only_the_servers_the_"
            "principal_may_see",
        ),
        why="an unknown tool's error tells a principal the names of servers it may not see",
    ),
    Mutant(
        name="access-glob-search",
        path="lovia_mcp/gateway/access.py",
        old="any(g.match(tool) for g in globs)",
        new="any(g.search(tool) for g in globs)",
        tests=(
            "tests/gateway/test_gateway_principals.py::test_a_tool_glob_matches_the_whole_tool_name_not_a_part_of_it",
        ),
        why="a rule shell/read_* allows shell/unread_all (the glob matched anywhere in the name)",
    ),
    Mutant(
        name="audit-name-uncut",
        path="lovia_mcp/gateway/audit.py",
        old='"tool": tool[:MAX_NAME_CHARS],',
        new='"tool": tool,',
        tests=("tests/gateway/test_gateway_principals.py::test_a_megabyte_tool_name_is_cut_in_its_audit_line",),
        why="a client writes a megabyte into the audit log per call, with a tool name of its choosing",
    ),
    Mutant(
        name="gateway-share-by-tokens",
        path="lovia_mcp/gateway/auth/tokens.py",
        old="self.principals: frozenset[str] | None = frozenset(c.principal for c in credentials)",
        new="self.principals: frozenset[str] | None = frozenset(c.token for c in credentials)",
        tests=(
            "tests/gateway/test_gateway_shares.py::test_a_principal_with_two_tokens_holds_one_principals_share_of_"
            "sessions_across_them",
        ),
        why="the caps are split by tokens, not principals: a principal's share depends on how many tokens it has",
    ),
    Mutant(
        name="netproxy-keepalive-piped",
        path="worker/lovia_mcp_worker/sandbox/egress/netproxy.py",
        old="if body is None else _one_body(a_reader, b_writer, body, traffic)",
        new="",
        tests=(
            "tests/sandbox/egress/test_netproxy.py::test_a_second_request_on_a_kept_alive_connection_never_reaches_the_"
            "first_ones_address",
            "tests/sandbox/egress/test_netproxy.py::test_a_request_body_goes_through_whole_and_a_request_after_it_does_not",
        ),
        why="a second request on a kept-alive plain-HTTP connection reaches the first one's address unchecked",
    ),
    Mutant(
        name="netproxy-framing-as-sent",
        path="worker/lovia_mcp_worker/sandbox/egress/netrequest.py",
        old="body=body_framing(version, request.forwarded_headers())",
        new="body=body_framing(version, headers)",
        tests=(
            "tests/sandbox/egress/test_netproxy.py::test_a_content_length_the_connection_header_names_is_not_forwarded_"
            "and_neither_is_its_body",
        ),
        why="a body announced by a header the Connection header drops reaches the upstream as a request of its own",
    ),
    Mutant(
        name="lock-launch-not-isolated",
        path="lovia_mcp/lock/ecosystems/pypi.py",
        old='_FLAGS: Final = ("-I", "-S", "-B")',
        new='_FLAGS: Final = ("-S", "-B")',
        tests=("tests/lock/test_lock_hermetic.py::test_a_module_in_the_cwd_never_shadows_the_locked_code",),
        why="a locked Python server imports a module planted in its cwd ahead of the standard library",
    ),
    Mutant(
        name="lock-launch-venv-interpreter",
        path="lovia_mcp/lock/ecosystems/pypi.py",
        old="return interpreter(), [*_FLAGS,",
        new='return str(top / "env" / "bin" / "python"), [*_FLAGS,',
        tests=("tests/lock/test_lock_hermetic.py::test_a_replaced_venv_interpreter_and_its_config_are_never_used",),
        why="a locked Python server runs the entry's venv interpreter, which the digest does not cover",
    ),
    Mutant(
        name="lock-bytecode-unchecked",
        path="lovia_mcp/lock/packages.py",
        old="""                visit(entry.path)
                continue""",
        new="""                if entry.name != "__pycache__":
                    visit(entry.path)
                continue""",
        tests=("tests/lock/test_lock_hermetic.py::test_planted_bytecode_is_refused_before_the_server_starts",),
        why="bytecode planted in a locked package's __pycache__ runs instead of the verified source",
    ),
    Mutant(
        name="lock-stamp-no-ctime",
        path="worker/lovia_mcp_worker/wire/sealed.py",
        old="\\0{st.st_ctime_ns}",
        new="",
        tests=("tests/lock/test_lock_hermetic.py::test_a_same_size_edit_with_its_times_set_back_is_caught",),
        why="a cache file edited in place with its modification time set back runs",
    ),
    Mutant(
        name="lock-restart-unchecked",
        path="worker/lovia_mcp_worker/containment/launch.py",
        old="if spec.sealed is not None and stamp(spec.sealed.root) != spec.sealed.stamp:",
        new="if False:",
        tests=("tests/lock/test_lock_hermetic.py::test_a_restart_after_a_crash_is_refused_once_the_tree_changed",),
        why="a restart after a crash runs a locked tree changed since the open checked it",
    ),
    Mutant(
        name="lock-seal-not-sent",
        path="lovia_mcp/connection/live.py",
        old="self.core.spec = msgspec.structs.replace(self.core.spec, sealed=sealed)",
        new="pass",
        tests=("tests/lock/test_lock_hermetic.py::test_a_restart_after_a_crash_is_refused_once_the_tree_changed",),
        why="the worker is never told which tree a locked server runs from, so it checks no restart",
    ),
    Mutant(
        name="lock-node-unconfined",
        path="lovia_mcp/lock/ecosystems/npm.py",
        old='["--require", str(NODE_CONFINE), str(top / package.entry), *package.args]',
        new="[str(top / package.entry), *package.args]",
        tests=(
            "tests/lock/test_lock_hermetic.py::test_a_locked_npm_server_never_loads_a_module_from_outside_its_entry",
        ),
        why="a locked npm server loads a module planted in a parent node_modules or NODE_PATH",
        needs="node",
    ),
    Mutant(
        name="runner-in-box-unexplained",
        path="worker/lovia_mcp_worker/wire/failures.py",
        old="hint=runner_in_box(boxed_command, stderr_tail) or base.hint,",
        new="hint=base.hint,",
        tests=("tests/sandbox/test_runner_in_box.py",),
        why="uvx or npx stopped by the box says only 'check the server's log', not to lock the server",
    ),
    Mutant(
        name="readme-unboxed",
        path="README.md",
        old=', "sandbox": {"network": false}}',
        new="}",
        tests=("tests/project/test_readme.py",),
        why="the README's headline example runs its server with no sandbox and its test still passes",
        needs=".cache/thirdparty/wheels",
    ),
    Mutant(
        name="failures-not-kept",
        path="tests/conftest.py",
        old="    if report.failed:\n",
        new="    if False:\n",
        tests=("tests/project/test_failures_kept.py",),
        why="a test run stopped half-way loses the report of what had failed",
    ),
    Mutant(
        name="oauth-audience-unchecked",
        path="lovia_mcp/gateway/auth/oauth.py",
        old='"verify_aud": True,',
        new='"verify_aud": False,',
        tests=(f"{OAUTH_TESTS}test_a_token_outside_its_times_or_for_another_audience_or_issuer_is_refused",),
        why="a token issued for another resource (another gateway, another API of the same issuer) is accepted",
    ),
    Mutant(
        name="oauth-issuer-unchecked",
        path="lovia_mcp/gateway/auth/oauth.py",
        old='"verify_iss": True,',
        new='"verify_iss": False,',
        tests=(f"{OAUTH_TESTS}test_a_token_outside_its_times_or_for_another_audience_or_issuer_is_refused",),
        why="a token naming another issuer is accepted when a key of the configured set verifies it",
    ),
    Mutant(
        name="oauth-expiry-unchecked",
        path="lovia_mcp/gateway/auth/oauth.py",
        old='"verify_exp": True,',
        new='"verify_exp": False,',
        tests=(f"{OAUTH_TESTS}test_a_token_outside_its_times_or_for_another_audience_or_issuer_is_refused",),
        why="an expired access token (a leaked one, long revoked by expiry) is accepted",
    ),
    Mutant(
        name="oauth-not-before-unchecked",
        path="lovia_mcp/gateway/auth/oauth.py",
        old='"verify_nbf": True,',
        new='"verify_nbf": False,',
        tests=(f"{OAUTH_TESTS}test_a_token_outside_its_times_or_for_another_audience_or_issuer_is_refused",),
        why="a token is accepted before its nbf",
    ),
    Mutant(
        name="oauth-any-algorithm",
        path="lovia_mcp/gateway/auth/oauth.py",
        old="if algorithm not in ALGORITHMS:",
        new="if not algorithm:",
        tests=(f"{OAUTH_TESTS}test_an_hmac_token_signed_with_a_secret_the_key_set_publishes_is_refused",),
        why="the token's header picks the algorithm: an HMAC key in the public key set signs any token",
    ),
    Mutant(
        name="oauth-refresh-unbounded",
        path="lovia_mcp/gateway/auth/jwks.py",
        old="return self._read_at is None or now - self._read_at >= MIN_REFRESH",
        new="return True",
        tests=(
            f"{OAUTH_TESTS}test_a_new_key_in_the_fetched_set_is_picked_up_on_its_first_token_and_made_up_ids_fetch_"
            "at_most_once_a_period",
        ),
        why="every token with a made-up key id makes the gateway fetch the issuer's keys (the issuer flooded)",
    ),
    Mutant(
        name="oauth-no-refresh-for-new-key",
        path="lovia_mcp/gateway/auth/jwks.py",
        old="if not stale and self._lookup(kid) is not None:",
        new="if not stale:",
        tests=(
            f"{OAUTH_TESTS}test_a_new_key_in_the_fetched_set_is_picked_up_on_its_first_token_and_made_up_ids_fetch_"
            "at_most_once_a_period",
        ),
        why="a key the issuer rotated in is not taken until the set's maximum age: its tokens are refused for an hour",
    ),
    Mutant(
        name="oauth-jwks-plain-http",
        path="lovia_mcp/gateway/auth/jwks.py",
        old='if parts.scheme == "http" and parts.hostname and is_loopback(parts.hostname):',
        new='if parts.scheme == "http" and parts.hostname:',
        tests=(f"{OAUTH_TESTS}test_oauth_options_that_do_not_fit_stop_serve_with_a_hint",),
        why="the issuer's keys are fetched in the clear: whoever is on the path swaps in a key and signs any token",
    ),
    Mutant(
        name="oauth-principal-unchecked",
        path="lovia_mcp/gateway/auth/oauth.py",
        old="if not isinstance(principal, str) or not PRINCIPAL_NAME.fullmatch(principal):",
        new="if not isinstance(principal, str):",
        tests=(f"{OAUTH_TESTS}test_a_principal_claim_that_is_not_a_plain_principal_name_is_refused",),
        why="a token's claim becomes a principal with newlines or shell characters (log lines, metrics labels)",
    ),
    Mutant(
        name="oauth-scope-unchecked",
        path="lovia_mcp/gateway/auth/oauth.py",
        old="missing = [s for s in self.scopes if s not in access.scopes]",
        new="missing: list[str] = []",
        tests=(
            f"{OAUTH_TESTS}test_a_token_without_a_required_scope_gets_403_insufficient_scope",
            f"{OAUTH_TESTS}test_a_token_without_the_required_scope_gets_403_with_the_scope_in_its_challenge",
        ),
        why="a token without the scope --oauth-scope requires is let in",
    ),
    Mutant(
        name="oauth-session-owner",
        path="lovia_mcp/gateway/auth/oauth.py",
        old="owner = json.dumps([access.client_id, access.subject or principal])",
        new="owner = json.dumps([access.client_id, principal])",
        tests=(f"{OAUTH_TESTS}test_a_session_answers_only_to_its_subject_and_survives_a_refreshed_token",),
        why="a session answers to any subject whose token maps to the same principal name",
    ),
    Mutant(
        name="oauth-discovery-issuer-unchecked",
        path="lovia_mcp/gateway/auth/jwks.py",
        old='if not isinstance(meta, dict) or meta.get("issuer") != self.issuer:',
        new="if not isinstance(meta, dict):",
        tests=(f"{OAUTH_TESTS}test_metadata_naming_another_issuer_is_refused_and_its_keys_never_fetched",),
        why="keys are taken from metadata that names another issuer (RFC 8414 3.3: a mix-up)",
    ),
    Mutant(
        name="oauth-key-file-unguarded",
        path="lovia_mcp/gateway/serve.py",
        old='ns.token_file, key_file, getattr(ns, "audit_log", None))',
        new='ns.token_file, getattr(ns, "audit_log", None))',
        tests=(f"{OAUTH_TESTS}test_a_sandboxed_server_cannot_put_a_key_of_its_own_into_the_issuers_key_file",),
        why="a sandboxed server adds its own key to the issuer's key file and signs any principal's token",
        needs="a sandbox backend",
    ),
    Mutant(
        name="bwrap-exec-error-unread",
        path="worker/lovia_mcp_worker/sandbox/bwrap.py",
        old="""    def setup_error(self, returncode: int, stderr_tail: list[str]) -> str | None:
        return setup_error(returncode, stderr_tail)""",
        new="""    def setup_error(self, returncode: int, stderr_tail: list[str]) -> str | None:
        return None""",
        tests=(
            "tests/sandbox/test_backends.py::test_a_command_the_box_cannot_execute_fails_with_the_same_exec_error_as_unboxed",
        ),
        why="a command bwrap cannot execute fails as a crash before the handshake, not with its exec error",
        needs="user namespaces",
    ),
    Mutant(
        name="gateway-progress-dropped",
        path="lovia_mcp/client/core.py",
        old="listener.progress(msg.progress, msg.total, msg.message)",
        new="pass",
        tests=(
            "tests/gateway/test_gateway_relay.py::test_a_calls_progress_reaches_the_client_that_made_it_in_both_eras_on_both_endpoints",
        ),
        why="a call's progress stays in the gateway's log and never reaches the client that asked for it",
    ),
    Mutant(
        name="relay-shared-any-principal",
        path="lovia_mcp/gateway/upstreams.py",
        old="return self._callers <= {principal}",
        new="return True",
        tests=(
            "tests/gateway/test_gateway_relay.py::test_a_shared_servers_words_reach_only_a_principal_that_alone_used_it_never_another",
        ),
        why="a shared server's log message from one principal's leftover work reaches another principal's call",
    ),
    Mutant(
        name="relay-log-level-ignored",
        path="lovia_mcp/gateway/relay.py",
        old="return floor is None or (level in LEVELS and LEVELS.index(level) >= LEVELS.index(floor))",
        new="return True",
        tests=(
            "tests/gateway/test_gateway_relay.py::test_a_shared_server_is_told_the_most_verbose_level_asked_and_each_"
            "session_hears_only_at_its_own",
        ),
        why="a 2025 session hears log messages below the level it set",
    ),
    Mutant(
        name="relay-progress-coalesced",
        path="worker/lovia_mcp_worker/session/scope.py",
        old="interval=0.0 if spec is not None and spec.relay else PROGRESS_INTERVAL",
        new="interval=PROGRESS_INTERVAL",
        tests=(
            "tests/gateway/test_conformance.py::test_a_scenario_that_passes_directly_passes_through_the_gateway[tools-call-with-progress]",
        ),
        why="the gateway drops a server's progress updates that come closer together than a tenth of a second",
        needs="node (the conformance suite)",
    ),
    Mutant(
        name="relay-resources-any-principal",
        path="lovia_mcp/gateway/relay.py",
        old="if only in (None, name) and self._access.sees(principal, name) and _declares(backend, capability, None)",
        new="if only in (None, name) and _declares(backend, capability, None)",
        tests=(
            "tests/gateway/test_gateway_resources.py::test_a_principal_neither_lists_nor_reads_nor_gets_a_prompt_of_a_"
            "server_it_may_not_see",
        ),
        why="a principal lists, reads and gets the prompts of a server its access rules do not let it see",
    ),
    Mutant(
        name="relay-request-any-principal",
        path="lovia_mcp/gateway/relay.py",
        old="if not self._backend.alone(self._principal):\n            # A shared server several principals used: its request",
        new="if False:\n            # A shared server several principals used: its request",
        tests=(
            "tests/gateway/test_gateway_requests.py::test_a_shared_servers_request_never_reaches_another_principals_client",
        ),
        why="a shared server's sampling request from one principal's leftover work is asked of another principal's client",
    ),
    Mutant(
        name="relay-request-capability-unchecked",
        path="lovia_mcp/gateway/relay.py",
        old="        if not declared:",
        new="        if False:",
        tests=(
            "tests/gateway/test_gateway_requests.py::test_a_client_that_did_not_declare_the_capability_is_not_asked_and_"
            "the_server_is_told_which",
        ),
        why="a server's request goes to a client that never declared the capability it needs",
    ),
    Mutant(
        name="backend-cleanup-skipped",
        path="worker/lovia_mcp_worker/sandbox/registry.py",
        old="            entry.cleanup()",
        new="            pass",
        tests=(
            "tests/sandbox/test_landlock.py::test_writes_go_only_to_cwd_and_a_private_tmpdir_on_landlock",
            "tests/sandbox/test_backends.py::test_a_registered_backend_reports_its_own_kernel_facts_beside_the_"
            "builtin_ones",
        ),
        why="a Landlock server's private TMPDIR outlives its worker (the exit reaches no backend's cleanup)",
        needs="Landlock ABI 4",
    ),
    Mutant(
        name="doctor-userns-always-allowed",
        path="worker/lovia_mcp_worker/sandbox/bwrap.py",
        old='        if userns["allowed"]:',
        new="        if True:",
        tests=(
            "tests/cli/test_doctor.py::test_doctor_text_says_what_refuses_user_namespaces_and_how_each_probe_ended",
        ),
        why="lovia-mcp doctor's text says user namespaces are allowed where bwrap's probe was refused",
        needs="Landlock ABI 4",
    ),
    Mutant(
        name="egress-mapped-address-unjudged",
        path="worker/lovia_mcp_worker/sandbox/egress/netrequest.py",
        old="    if address.ipv4_mapped is not None:\n        embedded = address.ipv4_mapped\n",
        new="    if address.ipv4_mapped is not None:\n        return None\n",
        tests=(
            "tests/sandbox/egress/test_egress.py::test_an_allowed_name_that_resolves_inward_is_refused_naming_the_address_"
            "and_what_to_list",
        ),
        why="an allowed name that resolves to an IPv4-mapped private address (::ffff:192.168.0.1) reaches the LAN",
    ),
    Mutant(
        name="denial-worded-as-the-worker",
        path="lovia_mcp/render.py",
        old='why = words(msgspec.convert(entry, EgressRefusal), "model")',
        new='why = str(entry.get("reason", ""))',
        tests=(
            "tests/sandbox/egress/test_denials.py::test_each_distinct_denial_is_one_plain_line_saying_why_and_whether_"
            "another_call_may_own_it",
        ),
        why="the model reads the worker's log words ('the network allowlist'), not its own server's",
    ),
    Mutant(
        name="timer-heap-unswept",
        path="worker/lovia_mcp_worker/wire/timers.py",
        old="if len(heap) > 2 * len(self._live) + SWEEP_SLACK:",
        new="if False:",
        tests=(
            "tests/supervision/test_host_calls.py::test_answered_calls_deadlines_are_swept_so_the_heap_stays_bounded",
        ),
        why="every call that ends before it is due leaves its slot in the heap: a long-lived connection's heap grows "
        "without bound",
    ),
    Mutant(
        name="timer-heap-stops-on-raise",
        path="worker/lovia_mcp_worker/wire/timers.py",
        old="        finally:\n            self._arm(loop)",
        new="        except BaseException:\n            raise\n        else:\n            self._arm(loop)",
        tests=("tests/protocol/test_timers.py",),
        why="one call's timeout that raises leaves every other call's deadline (or backstop) unfired",
    ),
    Mutant(
        name="gateway-every-session-json",
        path="lovia_mcp/gateway/routes.py",
        old="            if capabilities is not None and capabilities.isdisjoint(ASKED):",
        new="            if capabilities is not None:",
        tests=(
            "tests/gateway/test_gateway_requests.py::test_a_client_declaring_one_capability_still_gets_a_servers_"
            "request_for_it_mid_call",
        ),
        why="a 2025 session whose client declared sampling, elicitation or roots lives in JSON mode, which cannot "
        "carry the server's request to it mid-call",
    ),
    Mutant(
        name="gateway-2025-stream-dropped",
        path="lovia_mcp/gateway/relay.py",
        old="            self._streamed = streamed(self._given)",
        new="            self._streamed = self._given",
        tests=(
            "tests/gateway/test_gateway_relay.py::test_a_calls_progress_reaches_the_client_that_made_it_in_both_"
            "eras_on_both_endpoints",
            "tests/gateway/test_gateway_relay.py::test_a_2025_sessions_call_gets_the_servers_log_messages_on_its_"
            "own_stream",
        ),
        why="a 2025 session's call answered in JSON mode loses its progress and log messages (the SDK drops them)",
    ),
    Mutant(
        name="forkserver-keep-no-shrink",
        path="worker/lovia_mcp_worker/forkserver/server.py",
        old="        while len(self.idle) > count:",
        new="        while False:",
        tests=(
            "tests/client/test_forkserver.py::test_the_forkserver_keeps_as_many_idle_workers_as_the_agent_asks_"
            "ending_the_newest_over_it",
        ),
        why="serve's ask for fewer idle workers once its servers are open ends none: their memory stays",
    ),
    Mutant(
        name="serve-keeps-idle-workers-unasked",
        path="lovia_mcp/gateway/serve.py",
        old='all(b.served.session == "shared" for b in upstreams):',
        new="False:",
        tests=(
            "tests/gateway/test_gateway_resources.py::test_a_gateway_whose_servers_are_all_shared_tells_its_"
            "forkserver_to_keep_one_idle_worker",
        ),
        why="a gateway whose servers are all open and shared keeps idle workers no open will take",
    ),
]


class Refused(Exception):
    """The check cannot start: a dirty file, a stale entry, an unknown name."""


def _check(m: Mutant) -> Path:
    path = ROOT / m.path
    if not path.is_file():
        raise Refused(f"{m.name}: {m.path} does not exist (moved?): update its entry in scripts/mutants.py")
    try:
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", m.path], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise Refused(f"{m.name}: cannot ask git whether {m.path} is clean ({exc}): run from a git checkout") from None
    if dirty:
        raise Refused(f"{m.name}: {m.path} has uncommitted changes: commit or stash them first")
    count = path.read_text(encoding="utf-8").count(m.old)
    if count != 1:
        raise Refused(
            f"{m.name}: the text to replace occurs {count} times in {m.path} (must be once): "
            "update its entry in scripts/mutants.py"
        )
    return path


def _pytest(tests: tuple[str, ...]) -> tuple[int, str]:
    """``pytest -x`` on ``tests`` in its own process group; its exit status (-1: timed out) and output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "worker"), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-x", "-q", "-rfE", *tests],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {RUN_TIMEOUT:.0f} s"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _first_failure(out: str) -> str:
    found = re.search(r"^(?:FAILED|ERROR) (\S+)", out, re.MULTILINE)
    return found.group(1) if found else "?"


def _tail(out: str, lines: int = 15) -> str:
    return "\n".join("    " + line for line in out.rstrip().splitlines()[-lines:])


def run(m: Mutant, path: Path, baselines: dict[tuple[str, ...], tuple[int, str]]) -> tuple[str, str]:
    """(outcome, detail) for one mutant: killed, survived or error."""
    if m.tests not in baselines:
        baselines[m.tests] = _pytest(m.tests)
    code, out = baselines[m.tests]
    if code != 0:
        return "error", f"its tests fail (pytest status {code}) before any change:\n{_tail(out)}"
    original = path.read_bytes()
    try:
        path.write_bytes(original.replace(m.old.encode(), m.new.encode(), 1))
        code, out = _pytest(m.tests)
    finally:
        path.write_bytes(original)
    if code == 1:  # pytest: tests ran and some failed
        return "killed", f"by {_first_failure(out)}"
    if code == 0:
        return "survived", "every test passed" + (f" (needs {m.needs}: skipped here?)" if m.needs else "")
    return "error", f"pytest status {code}:\n{_tail(out)}"


def _table() -> str:
    lines = [f"{'NAME':<26} {'FILE':<44} TESTS"]
    for m in MUTANTS:
        lines.append(f"{m.name:<26} {m.path:<44} {' '.join(t.split('::')[0] for t in m.tests)}")
        lines.append(f"{'':<26} {m.why}" + (f" [needs {m.needs}]" if m.needs else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Each weakening must fail the tests named for it.")
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="print the table and exit")
    ns = parser.parse_args(argv)
    if ns.list:
        print(_table())
        return 0
    known = {m.name: m for m in MUTANTS}
    unknown = [n for n in ns.names if n not in known]
    if unknown:
        print(f"mutants: no mutant {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 2
    chosen = [known[n] for n in ns.names] if ns.names else MUTANTS
    try:
        paths = [_check(m) for m in chosen]
    except Refused as exc:
        print(f"mutants: refused: {exc}", file=sys.stderr)
        return 2
    # SIGTERM unwinds like ^C, so the finally that restores the file runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    baselines: dict[tuple[str, ...], tuple[int, str]] = {}
    outcomes = []
    for m, path in zip(chosen, paths):
        started = time.monotonic()
        outcome, detail = run(m, path, baselines)
        outcomes.append(outcome)
        print(f"{outcome:<8} {m.name:<26} {time.monotonic() - started:5.1f} s  {detail}", flush=True)
    counts = {o: outcomes.count(o) for o in ("killed", "survived", "error")}
    print(f"{counts['killed']} killed, {counts['survived']} survived, {counts['error']} errors")
    return 0 if counts["killed"] == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
