"""The package registries a lock covers, one module each, behind one interface.

- ``ecosystem``: the ``Ecosystem`` protocol (read a runner's command line,
  install, the folder the digest covers, the declared entry, the launch),
  the ``Runner`` it reads and the tools both share;
- ``pypi``: ``uvx``, ``uv tool run``, ``pipx run``; a venv, started isolated;
- ``npm``: ``npx``; a ``node_modules`` tree, started confined to it;
- ``registry``: the ecosystems by name (a new one is one module and one line).
"""

__all__: list[str] = []
