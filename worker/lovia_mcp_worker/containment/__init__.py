"""A generation's processes: launched with limits, watched, killed as a whole.

- ``launch``: a stdio server's environment, cwd, rlimits, own session and
  parent-death signal;
- ``proctree``: a process tree by parentage, found, signalled and reaped;
- ``guard``: a generation's tree, watched and killed (the psutil watch);
- ``cgroup``, ``cgroup_layout``: a cgroup per generation, kernel-enforced
  limits, and cleanup after dead workers;
- ``usage``: a generation's tree read over a call's window (CPU, the
  kernel's peak memory), cheaply enough for every call;
- ``machine``: the kernel's facts (each sandbox backend's own, seccomp,
  cgroups), as ``lovia-mcp doctor`` reports them.

Which of these a generation gets, and its teardown, is the session's
(``session.contain``).
"""

__all__: list[str] = []
