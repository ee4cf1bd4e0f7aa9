"""What a sandboxed command needs to read to run at all (the Landlock backend's read grants).

- :func:`runtime`: the command's folder and prefix (``bin/..``), a venv's base
  interpreter (``pyvenv.cfg``), its ``#!`` interpreter, also through
  ``/usr/bin/env NAME`` on the server's ``PATH``;
- :func:`script_tree`: the folder of a script named in the arguments, or its
  ``node_modules`` tree.

Never ``/`` or a home folder: a command or script there gets its own folder
(or file) only, so a ``~/bin/tool`` does not open the home directory.
"""

from __future__ import annotations

import os
import shutil


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def runtime(command: str, search_path: str | None, homes: list[str]) -> list[str]:
    """The folders a command needs to run: its own, its prefix, a venv's base, its ``#!`` interpreter's.

    Never ``/`` or a home folder (``homes``, with their ancestors): a command
    there gets its own folder only, or nothing.
    """
    homes = ["/", *(os.path.realpath(h) for h in homes if h)]
    out: list[str] = []
    seen: set[str] = set()

    def visit(cmd: str, depth: int) -> None:
        for p in dict.fromkeys((os.path.abspath(cmd), os.path.realpath(cmd))):
            if p in seen:
                continue
            seen.add(p)
            folder = os.path.dirname(p)
            prefix = os.path.dirname(folder) if os.path.basename(folder) in ("bin", "Scripts") else folder
            if any(_under(home, prefix) for home in homes):
                prefix = folder  # /bin/sh, ~/bin/tool: never the whole root or home for a prefix
            out.extend(d for d in (folder, prefix) if not any(_under(home, d) for home in homes))
            cfg = os.path.join(prefix, "pyvenv.cfg")
            try:
                with open(cfg) as f:
                    for line in f:
                        key, _, value = line.partition("=")
                        if key.strip() == "home" and depth < 2:
                            visit(os.path.join(value.strip(), "python"), depth + 1)
            except OSError:
                pass
        if depth < 2:
            try:
                with open(cmd, "rb") as f:
                    head = f.read(256)
            except OSError:
                return
            if head.startswith(b"#!"):
                words = [os.fsdecode(w) for w in head[2:].split(b"\n", 1)[0].split()]
                if words and words[0].startswith("/"):
                    visit(words[0], depth + 1)
                # "#!/usr/bin/env node": the interpreter is whichever PATH finds (nvm, a venv).
                named = [w for w in words[1:] if not w.startswith("-")]
                if words and os.path.basename(words[0]) == "env" and named:
                    found = shutil.which(named[0], path=search_path)
                    if found is not None:
                        visit(found, depth + 1)

    visit(command, 0)
    return out


def script_tree(arg: str, homes: list[str]) -> list[str]:
    """What a script named in the arguments needs to run: its folder, or its package tree.

    Only a *file* counts: a folder in the arguments (``/``, a data root handed
    to a file server) is the server's business, granted only through
    ``readable=`` or ``writable=``. A script inside ``node_modules`` gets the
    outermost ``node_modules`` (npm hoists its dependencies there). A script
    directly in ``/`` or a home folder gets itself only, not the folder.
    """
    if not os.path.isabs(arg) or not os.path.isfile(arg):
        return []
    folder = os.path.realpath(os.path.dirname(arg))
    tops = ["/", *(os.path.realpath(h) for h in homes if h)]
    out = [arg if any(_under(top, folder) for top in tops) else folder]
    for path in dict.fromkeys((os.path.abspath(arg), os.path.realpath(arg))):
        head, sep, _ = path.partition("/node_modules/")
        if sep:
            out.append(head + "/node_modules")
    return out


__all__ = ["runtime", "script_tree"]
