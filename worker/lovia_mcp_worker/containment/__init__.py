"""A generation's processes: launched with limits, watched, killed as a whole.

- ``launch``: a stdio server's environment, cwd, rlimits and own session;
- ``proctree``: a process tree by parentage, found, signalled and reaped;
- ``guard``: a generation's tree, watched and killed (the psutil watch);
- ``cgroup``, ``cgroup_layout``: a cgroup per generation, kernel-enforced
  limits, and cleanup after dead workers;
- ``machine``: the kernel's facts (user namespaces, Landlock, seccomp,
  cgroups, bwrap), as ``lovia-mcp doctor`` reports them;
- ``contain``: one generation's containment: its tree, the limit watch, the
  kill at its end.
"""

__all__: list[str] = []
