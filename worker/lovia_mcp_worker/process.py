"""The worker's process class, started from a ``multiprocess`` forkserver.

Defined at module level in the worker package (which the forkserver
preloads) so the process object pickles by reference: a class built inside a
function would be pickled by value and rebuilt in every worker, which costs
memory and time there.

multiprocessing's preparation data also tells a child to re-import the
parent's ``__main__`` (the "safe importing of main module" rule). A worker
needs nothing from it, and importing it would run an unguarded script again
and pay its import time on every worker start, so those entries are dropped.
"""

from __future__ import annotations

import io
import os
from typing import Any

from multiprocess import forkserver, popen_forkserver, spawn, util
from multiprocess.context import ForkServerProcess, reduction, set_spawning_popen


class _Popen(popen_forkserver.Popen):  # type: ignore[misc]
    def _launch(self, process_obj: Any) -> None:
        # popen_forkserver.Popen._launch, minus the main-module entries.
        prep_data = spawn.get_preparation_data(process_obj._name)
        prep_data.pop("init_main_from_path", None)
        prep_data.pop("init_main_from_name", None)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class WorkerProcess(ForkServerProcess):  # type: ignore[misc]
    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _Popen(process_obj)


__all__ = ["WorkerProcess"]
