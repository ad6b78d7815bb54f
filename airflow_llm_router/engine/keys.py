"""Every Redis key and channel name the router uses, in one place.

All keys of one router namespace share the Redis Cluster hash tag ``{namespace}``, so every
script touches a single slot. Every key a script touches is declared to it in ``KEYS``
(:meth:`RouterKeys.script_keys`): the router-wide keys, then the per-model keys the
operation uses of each model the call may touch. During a slot migration Redis decides
from the declared keys whether a script may run on a node (all present), must be retried
(some missing: ``TRYAGAIN``) or asked elsewhere (none: ``ASK``), so a script never runs on
a node that holds only part of the state. :func:`lua_key_prelude` turns this module into
the Lua that binds the names from ``KEYS``, so the names are written once; a per-model key
of a model that was not declared raises instead of being touched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = [
    "MODEL_KEYS",
    "NAMESPACE_RE",
    "ROUTER_KEYS",
    "RouterKeys",
    "lease_model",
    "lua_key_prelude",
]

NAMESPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

#: Router-wide keys: attribute name in Lua -> key suffix.
ROUTER_KEYS: dict[str, str] = {
    "K_QUOTAS": "quotas",  # HASH model -> quota JSON
    # HASH lease id -> "<admitted ms>:<probe 0/1>:<request id>", then the kind and the
    #      reservation's cost when there are (lib/prelude.lua lease_record)
    "K_LEASES": "leases",
    "K_REQUESTS": "requests",  # HASH request id -> lease id (idempotent admission)
    "K_WAITERS": "waiters",  # ZSET request id -> rank (hot ahead of bulk, then first wait)
    "K_WAIT_INFO": "waitinfo",  # HASH request id -> waiter JSON
    "K_WAIT_DEADLINES": "waitdl",  # ZSET request id -> deadline ms (stale waiters drop out)
    "K_FAIR": "fair",  # HASH model -> virtual finish tag; "_V" -> virtual time
    "K_HEALTH": "health",  # HASH "<model>|cool|open|probe|fails|cause" -> value
    "K_STATS": "stats",  # HASH "<model>|<counter>" -> count
    "K_SEQ": "seq",  # STRING lease sequence
    # STRING when the quotas were last synced from their durable source (ms); absent after
    # Redis lost its data: tells a lost Redis from a deleted model
    "K_EPOCH": "epoch",
    # STRING when quotas were restored after Redis lost its data, or a client reached a
    #        new master (engine/failover.py) (ms, Redis clock); set
    #        with an expiry of the longest window + guard: while it lasts, each model whose
    #        window has not passed since is admitted at the recovery share
    "K_RECOVER": "recover",
    # HASH model -> learned output tokens per call (P95 of recent);
    #      "<model>|lat" -> learned latency per call, ms (mean of released 'ok' calls,
    #      each weighted by how recent it is: lib/kinds.lua)
    #      "<model>|latd" -> its mean deviation, ms (mean of |latency - mean|, same weights)
    #      "<model>|latw", "<model>|latt" -> the weight of the calls in them, and as of when
    "K_EST": "estimates",
    # HASH spend per budget period of each priced model and of the router-wide total ('*'):
    #      "<owner>|s|c|r" current period start ms, committed and reserved micro-dollars,
    #      "<owner>|ps|pc|pr" the period before; "*|b", "*|per" the router-wide budget
    #      (micro-dollars, period ms; absent: none, the total is kept per UTC day)
    "K_SPEND": "spend",
    # HASH backlog source (a task store's queue) -> "<tasks waiting there>:<until ms>": what
    #      the drains report of the work not yet claimed, so admission sees the whole
    #      backlog, not only the requests waiting in it (lib/finish.lua)
    "K_BACKLOG": "backlog",
    # ZSET model -> its likely latency, ms (lib/finish.lua; 'inf': nothing known of it):
    #      the order an any-model request tries the models in, kept as the estimates change
    #      so a request reads its head, not every model (lib/speed.lua, lib/anyorder.lua)
    "K_SPEED": "speed",
    # ZSET model -> its late point, ms (lib/finish.lua; 'inf': nothing known of it): with
    #      K_SPEED, the hedged latencies a caller that hedges late calls is ordered by
    "K_LATE": "late",
    # ZSET model -> its fair-share finish tag (K_FAIR's, or the virtual time it rejoins
    #      at): the fair-share order of an any-model request, read from its head
    "K_FAIRQ": "fairq",
    # ZSET model -> its likely latency, ms: the models parked out of K_FAIRQ, idle (their
    #      tags below the virtual time) and of a slower group than the one a request read
    #      the fair order for, so no request reads past them again (lib/anyorder.lua)
    "K_PARK": "park",
}

#: Per-model keys: Lua function name -> key infix (the model name follows it).
MODEL_KEYS: dict[str, str] = {
    "K_WIN": "win:",  # ZSET lease id -> admission time ms (the sliding-window log)
    "K_WTOK": "wtok:",  # HASH lease id -> "sum:in:out" tokens; "_s", "_i", "_o" totals
    "K_LIVE": "live:",  # ZSET lease id -> lease expiry ms (in-flight calls)
    "K_OBS": "obs:",  # LIST recent actual output tokens (newest first, capped)
    # HASH per task kind: "o|<kind>" output estimate, "l|<kind>" latency ms, "n|<kind>"
    #      outputs observed, "t|<kind>" last seen ms, "w|<kind>" its recent outputs
    #      (bounded, expiring: lib/kinds.lua)
    "K_KIND": "kinds:",
    # HASH traffic history: bucket number -> packed values (bounded, expiring:
    #      lib/history.lua)
    "K_HIST": "hist:",
}

RELEASED_CHANNEL = "released"

#: A lease id is "<model>#<number>" (admit.lua); the same rule as prelude.lua's split_model.
_LEASE_ID = re.compile(r"^(.*)#[0-9]+$", re.DOTALL)


def lease_model(lease_id: str) -> str | None:
    """The model of a lease id, or None for an id the scripts would not split either."""
    found = _LEASE_ID.match(lease_id)
    return found.group(1) if found else None


class RouterKeys:
    """Key and channel names of one router namespace."""

    def __init__(self, namespace: str) -> None:
        if not NAMESPACE_RE.match(namespace):
            raise ValueError(
                f"namespace {namespace!r} is not valid: use 1-64 letters, digits, '.', '_' "
                "or '-', starting with a letter or digit"
            )
        self.namespace = namespace
        self.prefix = f"llmr:{{{namespace}}}:"

    def router(self, name: str) -> str:
        return self.prefix + ROUTER_KEYS[name]

    def model(self, name: str, model: str) -> str:
        return self.prefix + MODEL_KEYS[name] + model

    def script_keys(self, model_keys: Sequence[str], models: Iterable[str]) -> list[str]:
        """``KEYS`` of one script call: every router-wide key, then ``model_keys`` (names of
        :data:`MODEL_KEYS`, in that order) of each of ``models``."""
        keys = [self.prefix + suffix for suffix in ROUTER_KEYS.values()]
        infixes = [self.prefix + MODEL_KEYS[name] for name in model_keys]
        for model in models:
            keys += [infix + model for infix in infixes]
        return keys

    @property
    def released_channel(self) -> str:
        """Pub/sub channel on which every release of capacity is announced."""
        return self.prefix + RELEASED_CHANNEL


def lua_key_prelude(model_keys: Sequence[str] = tuple(MODEL_KEYS)) -> str:
    """Lua that binds every key name from ``KEYS`` (laid out by
    :meth:`RouterKeys.script_keys` with the same ``model_keys``) and the set ``DECLARED`` of
    the models whose keys were passed. The per-model key functions raise for a model not
    in it: touching an undeclared key would let Redis run the script on a node that lacks
    it during a slot migration."""
    first = next(iter(ROUTER_KEYS.values()))
    lines = ["-- Generated from airflow_llm_router/engine/keys.py: key names live there.",
             f"local P = string.sub(KEYS[1], 1, -{len(first) + 1})"]
    for k, var in enumerate(ROUTER_KEYS, start=1):
        lines.append(f"local {var} = KEYS[{k}]")
    lines.append("local DECLARED = {}")
    if model_keys:
        start, infix = len(ROUTER_KEYS) + 1, MODEL_KEYS[model_keys[0]]
        lines += [
            f"for i = {start}, #KEYS, {len(model_keys)} do",
            f"  DECLARED[string.sub(KEYS[i], #P + {len(infix) + 1})] = true",
            "end",
            "local function declared(m)",
            "  if not DECLARED[m] then",
            "    error('llm-router: the keys of model ' .. m .. ' were not declared to this "
            "script')",
            "  end",
            "  return m",
            "end",
        ]
    for fn in model_keys:
        lines.append(f"local function {fn}(m) return P .. '{MODEL_KEYS[fn]}' .. declared(m) end")
    lines.append(f"local CHANNEL = P .. '{RELEASED_CHANNEL}'")
    return "\n".join(lines) + "\n"
