"""``python -m lovia_mcp``: the ``lovia-mcp`` command (see :mod:`lovia_mcp.cli.main`)."""

from .cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
