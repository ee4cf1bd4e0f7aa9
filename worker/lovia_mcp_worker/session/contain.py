"""One generation's containment: its tree, the limit watch, the kill at its end.

Each generation gets its own :class:`~lovia_mcp_worker.containment.guard.Tree`: a cgroup
where the worker could make one (:mod:`.cgroup`), else the psutil watch's
attribution (:mod:`.guard`), which must know the other generations' trees
to tell their processes apart. :meth:`Containment.watch` samples the limits
and reaps inherited orphans while the generation runs;
:meth:`Containment.teardown` kills what is left of the tree (SIGTERM grace
unless the reason forbids it), stops the watchers and removes the cgroup.
The host (:mod:`..session.host`) decides when; this module decides how.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable
from typing import Final

from ..containment import cgroup, cgroup_layout, guard, proctree
from ..transport.protocol import TransportSession
from ..wire import failures
from ..wire.failures import HostError
from ..wire.messages import ServerSpec
from .generation import Generation

# How often the guard samples the tree when a memory, CPU or process limit is
# set. 0.1 s bounds overshoot while costing ~1 % of a core.
GUARD_INTERVAL: Final = 0.1
# How often a worker without limits reaps the orphans it inherited (exited
# double-forked helpers). Zombies hold only a pid each, so this can be slow;
# one reap costs a few /proc reads.
REAP_INTERVAL: Final = 1.0
# Bound on a whole shutdown of one generation: kill escalation plus slack.
SHUTDOWN_WAIT: Final = proctree.TERM_GRACE + proctree.KILL_WAIT + 1.0
# Reasons after which the tree gets no SIGTERM grace: it already ignored a
# cancel, passed a limit, or broke the stream.
_NO_GRACE: Final = frozenset({"limit", "protocol", "timeout"})


class Containment:
    """The trees of one host's generations; ``gens`` lists the generations not yet down."""

    def __init__(
        self, *, subreaper: bool, gens: Callable[[], list[Generation]], log: Callable[[int, str], None]
    ) -> None:
        self.subreaper = subreaper
        self._gens = gens
        self._log = log
        # "cgroup" or "watch" once a generation has a tree.
        self.enforcement: str | None = None
        # OOM kills of generations whose trees are closed.
        self.oom_kills = 0

    def total_oom_kills(self) -> int:
        return self.oom_kills + sum(g.tree.oom_kills() for g in self._gens() if g.tree is not None)

    def tree(self, number: int, spec: ServerSpec) -> guard.Tree:
        """A generation's containment: its own cgroup where one can be made, else the watch."""
        where = cgroup_layout.layout()
        tree: guard.Tree
        if where is not None:
            try:
                tree = cgroup.CgroupTree(cgroup.GenerationCgroup.create(where, number, spec.limits))
            except OSError as exc:
                cgroup_layout.disable()
                self._log(logging.INFO, f"no cgroup for server generations ({exc}); limits are watched")
                tree = guard.WatchTree(subreaper=self.subreaper, generations=self._watch_trees)
            else:
                if self.enforcement is None:
                    self._log(logging.DEBUG, f"server generations are contained in {where.describe()}")
        else:
            tree = guard.WatchTree(subreaper=self.subreaper, generations=self._watch_trees)
        self.enforcement = tree.enforcement
        return tree

    def _watch_trees(self) -> list[guard.WatchTree]:
        return [g.tree for g in self._gens() if isinstance(g.tree, guard.WatchTree)]

    def server_pids(self) -> set[int]:
        """Servers whose exit status belongs to asyncio: never reaped as orphans."""
        return {pid for g in self._gens() if (pid := g.server_pid) is not None}

    def kernel_reason(self, gen: Generation, spec: ServerSpec, reason: HostError) -> HostError:
        """A server the kernel stopped at a cgroup limit (OOM kill, refused fork) ended for that limit."""
        tree = gen.tree
        if reason.kind != "server_exited" or not isinstance(tree, cgroup.CgroupTree):
            return reason
        found = tree.check(spec.limits)
        if found is None or found.what == "CPU":
            return reason
        limited = failures.limit(found, reason.stderr_tail, oom=found.what == "memory")
        self._log(logging.WARNING, f"server {spec.name!r}: {limited.text}")
        return limited

    def attach(self, gen: Generation) -> asyncio.Future[int] | None:
        """Put a launched server in its generation's tree; the move into a cgroup, under way."""
        tree = gen.tree
        if tree is None or gen.server_pid is None:
            return None
        tree.attach(gen.server_pid)
        if not isinstance(tree, cgroup.CgroupTree):
            return None
        # The move waits out an RCU grace period: done beside the handshake, not before it.
        return asyncio.ensure_future(asyncio.to_thread(tree.cgroup.enter, gen.server_pid))

    async def entered(self, entering: asyncio.Future[int] | None) -> None:
        """Wait for the move :meth:`attach` started; a server that could not be moved is an open failure."""
        if entering is None:
            return
        try:
            await entering
        except OSError as exc:
            cgroup_layout.disable()
            raise HostError(
                "open",
                f"could not move the server into its cgroup: {exc}",
                hint=f"Set {cgroup_layout.ENV_SWITCH}=0 to use the watch instead of cgroups.",
            ) from None

    def watch(self, gen: Generation, spec: ServerSpec) -> list[asyncio.Future[None]]:
        """The limit watch and the orphan reaper of a stdio generation."""
        tree = gen.tree
        if gen.server_pid is None or tree is None:
            return []
        tasks: list[asyncio.Future[None]] = []
        if guard.limits_watched(spec.limits):

            def breach(found: failures.Breach) -> None:
                # Under a cgroup, memory is the kernel's to enforce: a breach is its OOM kill.
                oom = found.what == "memory" and isinstance(tree, cgroup.CgroupTree)
                reason = failures.limit(found, session_tail(gen), oom=oom)
                self._log(logging.WARNING, f"server {spec.name!r}: {reason.text}")
                gen.stop(reason)

            tasks.append(
                asyncio.ensure_future(
                    guard.watch_limits(
                        tree,
                        spec.limits,
                        stop=gen.stopping,
                        on_breach=breach,
                        interval=GUARD_INTERVAL,
                        in_thread=isinstance(tree, guard.WatchTree),
                    )
                )
            )
        if self.subreaper:
            # Inherited orphans that exit must not stay zombies until close.
            tasks.append(asyncio.ensure_future(guard.reap_loop(self.server_pids, gen.stopping, REAP_INTERVAL)))
        return tasks

    async def teardown(
        self,
        gen: Generation,
        session: TransportSession,
        watchers: list[asyncio.Future[None]],
        entering: asyncio.Future[int] | None,
    ) -> None:
        tree = gen.tree
        if entering is not None:
            # The kill must see every member: let a move still under way finish.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(entering), SHUTDOWN_WAIT)
        if session.pid is not None and tree is not None:
            pid = session.pid
            if not session.has_exited():
                reason = gen.reason
                no_grace = gen.drained or (reason is not None and reason.kind in _NO_GRACE)
                await asyncio.to_thread(tree.kill, 0.0 if no_grace else proctree.TERM_GRACE)
            elif await asyncio.to_thread(tree.pids):
                # The server is gone; its orphans are still in the tree.
                await asyncio.to_thread(tree.kill, 0.0)
            else:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            await session.wait_exited(SHUTDOWN_WAIT)
            if self.subreaper:
                proctree.reap_orphans(keep=self.server_pids())
            session.close_transport()
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        if tree is not None:
            # Counted before the cgroup goes, and the tree dropped from the
            # generation at once: stats() must count each OOM kill exactly once,
            # also while the close runs in its thread.
            self.oom_kills += tree.oom_kills()
            gen.tree = None
            await asyncio.to_thread(tree.close)

    async def sweep(self) -> None:
        """A closing worker's last word, once its generations are down (a worker process's host only)."""
        if not self.subreaper:
            # Not in the agent's process, where other hosts' trees and cgroups are being made.
            return
        if not self._gens():
            # Anything still below the worker now belongs to no generation
            # (an escapee of a cgroup's first milliseconds, say): it goes too.
            with contextlib.suppress(Exception):
                await asyncio.to_thread(proctree.kill_tree, os.getpid(), None, include_root=False, term_grace=0.0)
        if self.enforcement == "cgroup":
            # Cgroups a teardown could not remove yet (members still
            # exiting) go now that all are down.
            with contextlib.suppress(OSError):
                await asyncio.to_thread(cgroup_layout.remove_leftovers, os.getpid())


def session_tail(gen: Generation) -> list[str]:
    return gen.session.stderr_tail if gen.session is not None else []


__all__ = ["GUARD_INTERVAL", "REAP_INTERVAL", "SHUTDOWN_WAIT", "Containment", "session_tail"]
