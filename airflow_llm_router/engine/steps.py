"""The steps a router operation yields to its client: a Lua script or a plain command.

A vocabulary of their own, apart from the policy that yields them (``core.py``), because
everything that runs or rewrites steps needs it and none of the policy: the two clients,
the merger of concurrent list calls (``merger.py``), the failover's ``WAIT``
(``failover.py``) and the quota restore (``restore.py``).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["DURABLE_OPS", "Command", "Script", "Step"]

T = TypeVar("T")


@dataclass(frozen=True)
class Script:
    """Run one of the router's Lua operations with these ARGV (after the settings).

    List operations (admit, complete, heartbeat, sent) carry their ``items`` instead: one
    JSON list, one reply entry per item, so a client may merge concurrent calls.
    ``models``: every model whose keys the call may touch (declared in ``KEYS``).
    """

    op: str
    args: tuple[Any, ...] = ()
    items: tuple[Any, ...] | None = None
    models: tuple[str, ...] = ()

    def argv(self) -> tuple[Any, ...]:
        if self.items is None:
            return self.args
        return (json.dumps(self.items, separators=(",", ":")),)


#: Operations whose writes a failover must not lose: with ``replicas_to_wait``, the client
#: sends each with a ``WAIT`` on the same connection (:meth:`RouterCore.replicated`).
DURABLE_OPS = frozenset({"admit", "set_quota", "delete_quota", "set_budget"})


@dataclass(frozen=True)
class Command:
    """Run one plain Redis command."""

    args: tuple[Any, ...]


Step = Generator[Script | Command, Any, T]
