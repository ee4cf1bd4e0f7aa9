"""JSON values from a config file checked against, and converted to, the config fields' types.

Generic on purpose: any field a config class gains is accepted from a file
with no change here. Scalars, ``Literal``, unions, ``list[...]``,
``dict[str, ...]`` and msgspec structs (``Limits``: an object of its fields,
unknown ones refused) are understood; a type only code can give (a
callable) is refused with a message saying so.
"""

from __future__ import annotations

import json
import os
import sys
import types
import typing
from typing import Any, Final

import msgspec
from lovia.exceptions import UserError

_hint_cache: dict[type, dict[str, Any]] = {}


def hints(cls: type) -> dict[str, Any]:
    """The field types of a config or struct class, each resolved on its own.

    Not ``typing.get_type_hints``: it fails for the whole class when one
    type mentions a name known only to type checkers (lovia's approval
    predicate does); such a field is left unchecked (``Any``) here.
    """
    if cls not in _hint_cache:
        found: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            namespace = vars(sys.modules[klass.__module__]) if klass.__module__ in sys.modules else {}
            for name, annotation in vars(klass).get("__annotations__", {}).items():
                if isinstance(annotation, str):
                    try:
                        annotation = eval(annotation, dict(namespace))  # noqa: S307 - our own classes' annotations
                    except Exception:  # noqa: BLE001 - a name only type checkers know
                        annotation = Any
                found[name] = annotation
        _hint_cache[cls] = found
    return _hint_cache[cls]


class _Mismatch(Exception):
    """A JSON value that does not fit a type (message says what was wanted)."""


def convert(value: Any, hint: Any, where: str) -> Any:
    try:
        return _fit(value, hint, where)
    except _Mismatch as exc:
        raise UserError(
            f"{where} must be {exc}, got {json.dumps(value, default=repr)[:80]}",
            hint="Fix the value in the file (docs/options.md lists each option's type).",
        ) from None


def _fit(value: Any, hint: Any, where: str) -> Any:  # noqa: C901 - one case per kind of type
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin is typing.Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _fit(value, options[0], where)
        for option in options:
            try:
                return _fit(value, option, where)
            except (_Mismatch, UserError):
                continue
        raise _Mismatch(_describe(hint))
    if origin is typing.Literal:
        if value in args and not isinstance(value, bool):
            return value
        raise _Mismatch(_describe(hint))
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
        # A dict source may hold paths (Path("/srv"), in args too): as strings.
        if isinstance(value, os.PathLike) and isinstance(path := os.fspath(value), str):
            return path
    elif origin is os.PathLike or hint is os.PathLike:
        if isinstance(value, os.PathLike):
            return value
    elif origin is list:
        if isinstance(value, list):
            return [_fit(v, args[0] if args else Any, where) for v in value]
    elif origin is dict:
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {k: _fit(v, args[1] if len(args) > 1 else Any, where) for k, v in value.items()}
    elif isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        if isinstance(value, dict):
            return _struct(value, hint, where)
    raise _Mismatch(_describe(hint))


def _struct(value: dict[str, Any], cls: type[msgspec.Struct], where: str) -> Any:
    known = cls.__struct_fields__
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise UserError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}", hint=f"Known: {', '.join(known)}.")
    types_of = hints(cls)
    return cls(**{k: convert(v, types_of.get(k, Any), f"{where}.{k}") for k, v in value.items()})


# Callables and the like: only Python code can give one.
_CODE_ONLY: Final = "a value only code can give (pass it to load_servers() as an option)"


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None):
        return "null"
    if origin is typing.Literal:
        return " or ".join(json.dumps(a) for a in args)
    if origin is typing.Union or origin is types.UnionType:
        kinds = [_describe(a) for a in args]
        return " or ".join([k for k in kinds if k != _CODE_ONLY] or [_CODE_ONLY])
    if origin is list:
        plural = {str: "strings", int: "integers", float: "numbers"}
        return f"a list of {plural.get(args[0], _describe(args[0])) if args else 'values'}"
    if origin is dict:
        return "an object"
    simple = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if hint in simple:
        return simple[hint]
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        return f"an object of {', '.join(hint.__struct_fields__)}"
    return _CODE_ONLY


__all__ = ["convert", "hints"]
