"""No window over target across a Sentinel failover: the recovery hold when a client's
connection reaches another master.

Sentinel promotes the replica, and the old master goes on taking writes from the clients
still connected to it until Sentinel demotes it (seconds later: measured ~11 s), when its
data is replaced by the new master's. What those clients admitted in between is sent to
the provider and unknown to the new master: its windows count less than was sent, and it
would admit a whole window's worth again at once (measured 18 429s in a 30-call window).

So each Sentinel-managed connection of a router client asks the server it just reached for
its identity (``run_id`` from ``INFO server``, one call per connect). A connection that
reached another master than before, or reaches one other than the client's last, has been
writing elsewhere: before anything else runs on it, it runs ``master_moved.lua``, which
starts the recovery hold (``K_RECOVER``) for the namespaces of the clients on that
connection pool. From then on, each connection of the pool still on the old master leaves
it when next checked out (``connect``, which the pool calls on every checkout) and moves
over too: without that, a busy pool's new connections reached the new master while its
old ones went on admitting on the old one, and once the hold ended both admitted a whole
window (measured 40 429s, 69 calls in a 40-call window, in one of three loaded runs).
Each client that moves over restarts the hold, so it ends one window +
guard after the last client left the old master, whose admissions then have all left their
windows; admission goes on at ``recovery_share`` meanwhile (0 by default: a pause of about
one window, not more).
"""

# redis-py's connection classes are untyped: the calls to their methods are checked as Any
# mypy: disable-error-code="no-untyped-call"
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio.sentinel as async_sentinel
import redis.sentinel as sync_sentinel
from redis.exceptions import ConnectionError as RedisConnectionError

from airflow_llm_router.engine.core import RouterCore
from airflow_llm_router.engine.scripts import script_source
from airflow_llm_router.engine.steps import Script

__all__ = ["MasterWatch", "connection_class", "watch_master"]

log = logging.getLogger(__name__)

_RUN_ID = re.compile(r"run_id:(\w+)")


@dataclass
class MasterWatch:
    """What the connections of one Sentinel-managed pool share: the master they last
    reached and the holds to start when one reaches another (one per router namespace
    using the pool: its ``EVAL`` arguments)."""

    master: str | None = None
    holds: list[tuple[Any, ...]] = field(default_factory=list)
    #: how many times a connection found a new master and started the holds
    moves: int = 0

    def add(self, core: RouterCore) -> None:
        action = Script("master_moved")
        keys = core.script_keys(action)
        self.holds.append(("EVAL", script_source("master_moved"), len(keys), *keys,
                           core.settings_arg))

    def left(self, run_id: str | None) -> bool:
        """Whether a connection on the master ``run_id`` is on one its pool has left: another
        connection of the pool has reached a newer master since, so what this one admits
        would be written where the new master never sees it (while both take writes, its
        windows and the new master's would each admit a whole window)."""
        return run_id is not None and self.master is not None and run_id != self.master

    def moved(self, before: str | None, now: str) -> bool:
        """Record that a connection, last on ``before`` (None: new), reached ``now``;
        whether it has moved to another master."""
        moved = (before is not None and before != now) or (
            self.master is not None and self.master != now)
        self.master = now
        if moved:
            self.moves += 1
        return moved


def _run_id(info: Any) -> str:
    text = info.decode() if isinstance(info, bytes) else str(info)
    found = _RUN_ID.search(text)
    if found is None:
        raise RedisConnectionError("the master's INFO has no run_id")
    return found.group(1)


def _say(conn: Any, held: int) -> None:
    log.warning("Redis master changed (now %s:%s): admissions held for one window in %d "
                "router namespace(s), as the old master's last admissions are unknown "
                "to this one", conn.host, conn.port, held)


class _SyncWatched(sync_sentinel.SentinelManagedConnection):
    def __init__(self, **kwargs: Any) -> None:
        self.master_watch: MasterWatch = kwargs.pop("master_watch")
        self.master_run_id: str | None = None
        super().__init__(**kwargs)

    def connect(self) -> None:
        # the pool checks a connection out through connect(): one still on the old master
        # leaves it now, rather than writing there until the old master is demoted
        if self._sock is not None and self.master_watch.left(self.master_run_id):
            self.disconnect()
        super().connect()

    def connect_to(self, address: Any) -> None:
        super().connect_to(address)
        try:
            self.send_command("INFO", "server")
            now = _run_id(self.read_response())
            if self.master_watch.moved(self.master_run_id, now):
                for hold in self.master_watch.holds:
                    self.send_command(*hold)
                    self.read_response()
                _say(self, len(self.master_watch.holds))
            self.master_run_id = now
        except BaseException:
            self.disconnect()
            raise


class _AsyncWatched(async_sentinel.SentinelManagedConnection):
    def __init__(self, **kwargs: Any) -> None:
        self.master_watch: MasterWatch = kwargs.pop("master_watch")
        self.master_run_id: str | None = None
        super().__init__(**kwargs)

    async def connect(self) -> None:
        # as _SyncWatched.connect: a connection still on the old master leaves it
        if self.is_connected and self.master_watch.left(self.master_run_id):
            await self.disconnect()
        await super().connect()

    async def connect_to(self, address: Any) -> None:
        await super().connect_to(address)
        try:
            await self.send_command("INFO", "server")
            now = _run_id(await self.read_response())
            if self.master_watch.moved(self.master_run_id, now):
                for hold in self.master_watch.holds:
                    await self.send_command(*hold)
                    await self.read_response()
                _say(self, len(self.master_watch.holds))
            self.master_run_id = now
        except BaseException:
            await self.disconnect()
            raise


class _SyncWatchedSSL(_SyncWatched, sync_sentinel.SentinelManagedSSLConnection):
    pass


class _AsyncWatchedSSL(_AsyncWatched, async_sentinel.SentinelManagedSSLConnection):
    pass


def connection_class(asyncio: bool, ssl: bool) -> type:
    """The Sentinel-managed connection class that watches its master."""
    if asyncio:
        return _AsyncWatchedSSL if ssl else _AsyncWatched
    return _SyncWatchedSSL if ssl else _SyncWatched


def watch_master(client: Any, core: RouterCore) -> None:
    """Hold ``core``'s namespace when a connection of ``client`` reaches a new master (a
    client from :mod:`~airflow_llm_router.engine.connect` on Sentinel; others: nothing)."""
    pool = getattr(client, "connection_pool", None)
    watch = getattr(pool, "connection_kwargs", {}).get("master_watch")
    if isinstance(watch, MasterWatch):
        watch.add(core)
