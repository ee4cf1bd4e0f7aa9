"""Per-call accounting: what a server's tree used during each ``tools/call``.

The host opens a :class:`Window` as a call reaches its generation
(:meth:`Accounting.begin`) and closes it as the server answers
(:meth:`Accounting.end`); the :class:`~lovia_mcp_worker.wire.messages.CallUsage`
goes out with the ``Result``. Each generation gets a :class:`Meter`: a
:class:`~lovia_mcp_worker.containment.usage.Gauge` over its tree and the
sandbox proxies its server's traffic goes through.

- CPU: the tree's running total at both ends of the window.
- Peak memory: the kernel's peak, restarted when the generation goes from
  idle to busy (a *busy spell*), read as the window ends (on the watch,
  where that read is dearer, only past :data:`SHORT_WINDOW`); where the
  kernel cannot restart it, the most of the readings of current memory
  taken at the window's ends and every :data:`SAMPLE_INTERVAL` while the
  spell lasts.
- Egress: the proxy's running totals per destination host at both ends.

Calls that overlap on one generation are marked ``shared``: their figures
are the server's over the window (its peak, over the spell), not the
call's own. A call is shared when another call was in flight as it began,
or began before it ended: two counters, no list of calls.

The totals in ``stats()`` (:class:`Totals`) add each busy spell once, so
overlapping calls are not counted twice.

Once an answer has gone out and no call runs (:meth:`Accounting.answered`),
the readings the next spell opens with are taken at once, off the next
call's path: a call that comes within :data:`READY_FOR` opens its window
with them, and only the closing readings (CPU, peak) are on its path.

Cost (``scripts/bench.py --only accounting``): about 7 us of CPU per call
under a cgroup (four reads and writes of files held open, two of them on
the call's path), about 20 us on the watch (``/proc/PID/stat`` is dearer),
under 2 us per call in a burst of overlapping calls (readings shared under
:data:`COALESCE`); the sampling timer runs only where the kernel gives no
peak, and only in spells longer than its interval.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Final, Literal

from ..containment import cgroup, guard
from ..containment.usage import CgroupGauge, Gauge, ProcGauge
from ..wire.messages import CallUsage, HostEgress, ServerSpec
from .generation import Generation

if TYPE_CHECKING:
    from ..sandbox.egress.netproxy import Proxy  # loaded only where a server has a proxy

# A window this short reads no kernel peak where that costs more than a
# cgroup file (the watch's /proc/PID/status): its peak is the more of the
# resident memory at its two ends, read with its CPU for free. Page faults
# run at a few GB/s, so a tree grows by a few MB at most in 1 ms.
SHORT_WINDOW: Final = 0.001
# While other calls run on the generation, a reading this recent stands
# for one now: a burst of overlapping calls (their figures are the server's
# over the window anyway) costs a reading per burst, not two per call.
COALESCE: Final = 0.0005
# A generation made ready (readings taken, the kernel's peak restarted) this
# recently, after its last answer went out, starts the next call's spell
# with no reading on that call's path: back-to-back calls leave the server
# idle for less than this, so at most this much of its idle time (its
# background CPU, a spike meanwhile) can count with the next call.
READY_FOR: Final = 0.001
# How often current memory is read during a busy spell where the kernel has
# no resettable peak. 50 ms catches a spike that lasts a few tenths of a
# second; a small call (well under it) never pays for a reading.
SAMPLE_INTERVAL: Final = 0.05

Snapshot = dict[str, tuple[int, int]]


class Totals:
    """Usage summed over busy spells (``stats()``)."""

    __slots__ = ("cpu_seconds", "egress_bytes", "egress_connections", "memory_peak_bytes", "shared_calls")

    def __init__(self) -> None:
        self.cpu_seconds = 0.0
        self.memory_peak_bytes = 0
        self.egress_connections = 0
        self.egress_bytes = 0
        self.shared_calls = 0


class Meter:
    """One generation's readings; shared by the windows of its calls."""

    def __init__(self, gauge: Gauge, proxies: list[Proxy]) -> None:
        self.gauge = gauge
        self.proxies = proxies
        self.busy = 0  # calls in flight
        self.begun = 0  # calls ever begun (a window compares it at its end)
        self.kernel_peak = False  # this spell's peak is the kernel's
        self.sampled = 0  # this spell's most memory seen, where it is not
        self._spell_cpu: float | None = None
        self._spell_egress: Snapshot = {}
        self._timer: asyncio.TimerHandle | None = None
        self.closed = False
        # The last readings and when they were taken (COALESCE).
        self._cpu: float | None = None
        self._cpu_at = -1.0
        self._peak: int | None = None
        self._peak_at = -1.0
        # When the generation was last made ready (Accounting.answered).
        self._ready_at = -1.0

    def cpu(self, now: float, others: bool) -> float | None:
        """The tree's CPU now (a reading under :data:`COALESCE` old where ``others`` run)."""
        if not others or now - self._cpu_at >= COALESCE:
            self._cpu, self._cpu_at = self.gauge.cpu(), now
        return self._cpu

    def peak(self, now: float, others: bool) -> int | None:
        if not others or now - self._peak_at >= COALESCE:
            self._peak, self._peak_at = self.gauge.peak(), now
        return self._peak

    def egress(self) -> Snapshot:
        if not self.proxies:
            return {}
        found: Snapshot = {}
        for proxy in self.proxies:
            for host, t in proxy.traffic.items():
                was = found.get(host, (0, 0))
                found[host] = (was[0] + t.connections, was[1] + t.bytes)
        return found

    def _sample(self) -> None:
        self._timer = None
        if self.closed or not self.busy:
            return
        self.sampled = max(self.sampled, self.gauge.current())
        self._timer = asyncio.get_running_loop().call_later(SAMPLE_INTERVAL, self._sample)

    def ready(self, now: float) -> None:
        """Idle again after an answer went out: take the next spell's opening readings now, off its path."""
        self._cpu, self._cpu_at = self.gauge.cpu(), now
        self.kernel_peak = self.gauge.reset_peak()
        self.sampled = self.gauge.resident
        self._ready_at = now

    def spell_begins(self, now: float, egress: Snapshot) -> float | None:
        """A call finds the generation idle; the CPU its window starts from."""
        self._spell_egress = egress
        if now - self._ready_at >= READY_FOR:
            self._cpu, self._cpu_at = self.gauge.cpu(), now
            self.kernel_peak = self.gauge.reset_peak()
            self.sampled = self.gauge.resident
        self._ready_at = -1.0
        self._spell_cpu = cpu = self._cpu
        if not self.kernel_peak:
            self.sampled = self.sampled or self.gauge.current()
            self._timer = asyncio.get_running_loop().call_later(SAMPLE_INTERVAL, self._sample)
        return cpu

    def spell_ends(self, cpu: float | None, egress: Snapshot, totals: Totals) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if cpu is not None and self._spell_cpu is not None:
            totals.cpu_seconds += max(0.0, cpu - self._spell_cpu)
        for e in _moved(self._spell_egress, egress):
            totals.egress_connections += e.connections
            totals.egress_bytes += e.bytes

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.gauge.close()


class Window:
    """One call's window on its generation's meter."""

    __slots__ = ("begun", "cpu", "egress", "meter", "shared", "started")

    def __init__(self, meter: Meter, cpu: float | None, egress: Snapshot, shared: bool, started: float) -> None:
        self.started = started
        self.meter = meter
        self.cpu = cpu
        self.egress = egress
        self.begun = meter.begun
        self.shared = shared


class Accounting:
    """The meters of one host's generations, and the totals for ``stats()``."""

    def __init__(self) -> None:
        self._meters: dict[Generation, Meter] = {}
        self.totals = Totals()

    def _meter(self, gen: Generation, spec: ServerSpec | None) -> Meter | None:
        tree = gen.tree
        gauge: Gauge
        if isinstance(tree, cgroup.CgroupTree):
            gauge = CgroupGauge(tree.cgroup)
        elif isinstance(tree, guard.WatchTree) and tree.server_pid is not None:
            gauge = ProcGauge(tree.server_pid)
        else:
            return None  # no local tree (HTTP), or not launched
        proxies: list[Proxy] = []
        box = spec.sandbox if spec is not None else None
        if box is not None and isinstance(box.network, list):
            from ..sandbox.egress import netroute  # loaded only where a server has a proxy

            proxies = netroute.proxies(box.network)
        meter = self._meters[gen] = Meter(gauge, proxies)
        return meter

    def begin(self, gen: Generation, spec: ServerSpec | None) -> Window | None:
        """A call reached ``gen``: its window opens (``None``: nothing to measure)."""
        meter = self._meters.get(gen)
        if meter is None:
            meter = self._meter(gen, spec)
            if meter is None:
                return None
        if meter.closed:
            return None
        now = time.perf_counter()
        shared = meter.busy > 0
        egress = meter.egress()
        cpu = meter.cpu(now, True) if shared else meter.spell_begins(now, egress)
        meter.busy += 1
        meter.begun += 1
        return Window(meter, cpu, egress, shared, now)

    def end(self, window: Window | None) -> CallUsage | None:
        """The call's server answered (or the call ended otherwise): what its window saw."""
        if window is None:
            return None
        meter = window.meter
        meter.busy -= 1
        if meter.closed:
            return None
        gauge = meter.gauge
        now = time.perf_counter()
        others = meter.busy > 0
        cpu = meter.cpu(now, others)
        shared = window.shared or meter.begun != window.begun
        source: Literal["kernel", "sampled"]
        if meter.kernel_peak and (gauge.cheap_peak or shared or now - window.started >= SHORT_WINDOW):
            peak, source = meter.peak(now, others), "kernel"
        else:
            meter.sampled = max(meter.sampled, gauge.resident or gauge.current())
            peak, source = meter.sampled, "sampled"
        egress = meter.egress()
        totals = self.totals
        if meter.busy == 0:
            meter.spell_ends(cpu, egress, totals)
        if shared:
            totals.shared_calls += 1
        if peak is not None and peak > totals.memory_peak_bytes:
            totals.memory_peak_bytes = peak
        return CallUsage(
            cpu_time=None if cpu is None or window.cpu is None else round(max(0.0, cpu - window.cpu), 6),
            memory_peak=peak,
            memory_source=source if peak is not None else None,
            egress=_moved(window.egress, egress) if egress else [],
            shared=shared,
        )

    def answered(self, window: Window | None) -> None:
        """The call's answer went out: an idle generation is made ready for the next call (:data:`READY_FOR`)."""
        if window is not None and not window.meter.busy and not window.meter.closed:
            window.meter.ready(time.perf_counter())

    def forget(self, gen: Generation) -> None:
        """``gen`` is ending: its meter's files close (calls still in flight on it get no figures)."""
        meter = self._meters.pop(gen, None)
        if meter is not None:
            meter.close()

    def close(self) -> None:
        for gen in list(self._meters):
            self.forget(gen)


def _moved(before: Snapshot, after: Snapshot) -> list[HostEgress]:
    moved: list[HostEgress] = []
    for host, (connections, sent) in after.items():
        was = before.get(host, (0, 0))
        if connections != was[0] or sent != was[1]:
            moved.append(HostEgress(host, connections - was[0], sent - was[1]))
    return moved


__all__ = ["COALESCE", "READY_FOR", "SAMPLE_INTERVAL", "SHORT_WINDOW", "Accounting", "Meter", "Totals", "Window"]
