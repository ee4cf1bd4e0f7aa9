"""``python -m lovia_mcp``: the ``lovia-mcp`` command (see :mod:`lovia_mcp.cli`)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
