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
"""

from __future__ import annotations

import re
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


def _body(operation: str) -> str:
    if operation not in OPERATIONS:
        raise KeyError(f"unknown router operation {operation!r}")
    parts = [_read(f"lib/{lib}.lua") for lib in _LIBRARIES[operation]]
    parts.append(_read(f"{operation}.lua"))
    return "\n".join(parts)


_COMMENT = re.compile(r"--[^\n]*")
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
