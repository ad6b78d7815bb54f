"""The Lua scripts, assembled from the ``lua/`` files: key prelude + libraries + operation.

Each operation becomes one script, registered once per client and called by SHA (redis-py
falls back to SCRIPT LOAD on NOSCRIPT). Sync and async clients register the same text.
Which per-model keys an operation declares (:func:`model_keys`) is read from its Lua: the
key functions of ``keys.MODEL_KEYS`` it calls, so a script cannot touch one it does not
declare (the prelude binds only those).

Lua allows a function at most 200 local variables in scope at once, and a script's
libraries all live in its main function: a library keeps its own constants and helpers
in a ``do ... end`` block and declares before it only the names other files use
(``lib/kinds.lua``, ``lib/finish.lua``). ``admit`` loads every library and had none to
spare before those two did so.

A library's functions that an operation never calls are left out of its script
(:func:`_prune`): Redis runs a script's whole main chunk on every call, and each function
it defines is a closure made and collected again per call (about 0.2 µs each; ``admit``
loaded 32 it never calls, ~15 % of an empty call).
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from importlib import resources

from airflow_llm_router.engine.keys import MODEL_KEYS, lua_key_prelude

__all__ = ["OPERATIONS", "model_keys", "script_source"]

#: Each operation and the libraries it uses, in load order (each call pays for the Lua it
#: carries: setting up unused libraries cost ~10 µs a call on the Redis thread).
_LIBRARIES: dict[str, tuple[str, ...]] = {
    "admit": ("prelude", "budget", "effective", "guard", "model_state", "kinds", "capacity",
              "speed", "fair", "reports", "finish", "anyorder", "listed", "waiters", "history"),
    "complete": ("prelude", "budget", "history", "health", "effective", "guard", "kinds",
                 "speed"),
    "heartbeat": ("prelude",),
    "sent": ("prelude",),
    "set_quota": ("prelude", "history", "guard", "speed"),
    "delete_quota": ("prelude", "guard"),
    "start_recovery": ("prelude", "guard"),
    "master_moved": ("prelude", "guard"),
    "stats": ("prelude", "budget", "effective", "guard", "model_state", "kinds"),
    "cancel": ("prelude",),
    "backlog": ("prelude", "reports"),
    "set_budget": ("prelude",),
    "history": ("prelude", "history"),
    "pubsub_mode": ("prelude",),
}
OPERATIONS = tuple(_LIBRARIES)


def _read(name: str) -> str:
    return resources.files("airflow_llm_router.engine").joinpath("lua").joinpath(name).read_text()


@cache
def _body(operation: str) -> str:
    if operation not in OPERATIONS:
        raise KeyError(f"unknown router operation {operation!r}")
    parts = [_read(f"lib/{lib}.lua") for lib in _LIBRARIES[operation]]
    parts.append(_read(f"{operation}.lua"))
    return _prune("\n".join(parts))


_COMMENT = re.compile(r"--[^\n]*")
_STRING = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")
#: Words that open (function, if, do, repeat) or close (end, until) a Lua block.
_BLOCK = re.compile(r"\b(function|if|do|repeat|end|until)\b")
#: A library-level function: defined at the start of a line, named or a table's field.
_DEFINED = re.compile(r"^(?:local\s+)?function\s+([A-Za-z_][\w.]*)\s*\(")
#: A forward declaration (``local a, b``): names it, does not use them.
_FORWARD = re.compile(r"^local\s+\w+(?:\s*,\s*\w+)*\s*$")


def _prune(text: str) -> str:
    """``text`` without the functions defined at the start of a line that nothing else in
    it names (outside comments and strings), repeatedly: what a script never calls."""
    lines = text.split("\n")
    code = [_COMMENT.sub("", _STRING.sub("''", line)) for line in lines]
    spans = _functions(lines, code)
    names = {name for name, _, _ in spans}
    # how often each function's name appears on each line; a forward declaration names a
    # function without using it
    occurs = [_named(line, names) for line in code]
    calls = Counter[str]()
    for k, counted in enumerate(occurs):
        if not _FORWARD.match(code[k]):
            calls.update(counted)
    # the mentions of each function's name in its own lines (its definition, recursion):
    # unused once no others are left
    inside = [sum(occurs[k][name] for k in range(first, last + 1))
              for name, first, last in spans]
    dropped: set[int] = set()
    changed = True
    while changed:  # dropping a function can leave the ones only it called unused
        changed = False
        for (name, first, last), own in zip(spans, inside, strict=True):
            if first in dropped or calls[name] != own:
                continue
            changed = True
            for k in range(first, last + 1):
                dropped.add(k)
                if not _FORWARD.match(code[k]):
                    calls.subtract(occurs[k])
    return "\n".join(line for k, line in enumerate(lines) if k not in dropped)


def _functions(lines: list[str], code: list[str]) -> list[tuple[str, int, int]]:
    """The functions defined at the start of a line: (name, first line, last line);
    ``code`` is ``lines`` without comments and strings."""
    spans: list[tuple[str, int, int]] = []
    depth, open_at = 0, None
    for k, line in enumerate(code):
        found = _DEFINED.match(lines[k]) if open_at is None else None
        if found:
            open_at = (found.group(1), k, depth)
        for word in _BLOCK.findall(line):
            depth += -1 if word in ("end", "until") else 1
        if open_at is not None and depth == open_at[2]:
            spans.append((open_at[0], open_at[1], k))
            open_at = None
    if depth != 0 or open_at is not None:
        raise ValueError("unbalanced Lua blocks: the scripts cannot be assembled")
    return spans


#: A name as Lua code uses it: an identifier, or a table's fields after it (``SPEED.at``);
#: not part of another name or field.
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _named(line: str, names: set[str]) -> Counter[str]:
    """How often each of ``names`` is named on ``line``: ``SPEED.at.x`` names ``SPEED``,
    ``SPEED.at`` and ``SPEED.at.x``."""
    found = Counter[str]()
    for token in _NAME.findall(line):
        parts = token.split(".")
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            if prefix in names:
                found[prefix] += 1
    return found


_KEY_CALL = re.compile(r"\b(" + "|".join(MODEL_KEYS) + r")\(")


@cache
def model_keys(operation: str) -> tuple[str, ...]:
    """The per-model keys (names of ``keys.MODEL_KEYS``, in its order) that ``operation``'s
    Lua calls for: what it declares in ``KEYS`` for each model a call may touch."""
    used = set(_KEY_CALL.findall(_COMMENT.sub("", _body(operation))))
    return tuple(name for name in MODEL_KEYS if name in used)


@cache
def script_source(operation: str) -> str:
    """The full Lua text of one operation."""
    return lua_key_prelude(model_keys(operation)) + _body(operation)
