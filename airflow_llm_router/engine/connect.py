"""Redis clients for the router: one node, a Redis Cluster or a master that Sentinel
watches, blocking or asyncio, built from a URL or from settings, in one place.

Every key of a namespace shares one hash tag (``keys.py``), so each script runs on the one
node that owns the namespace's slot: the engine needs nothing of a cluster but that
redis-py's cluster client routes a script by its keys, and that a ``PUBLISH`` (the release
channel) reaches the subscribers on every node, which Redis Cluster does. With Sentinel the
client asks the sentinels for the current master and follows a failover, and a router
client holds its windows when its connections reach a new master (``failover.py``).

URLs::

    redis://[user:password@]host:port/db            one node (also rediss://, unix://)
    redis+cluster://[user:password@]host:port[,host:port...]
                                                    a cluster, from any of its nodes: each
                                                    is tried in turn, so one node down does
                                                    not stop a new client (rediss+cluster://
                                                    with TLS)
    redis+sentinel://[user:password@]host:port[,host:port...]/master[/db]
                                                    the master named ``master``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

from airflow_llm_router.engine.failover import MasterWatch, connection_class

__all__ = ["RedisTarget", "async_redis", "sync_redis", "target_from_url"]

Mode = Literal["node", "cluster", "sentinel"]

#: Connections an asyncio client may open per node: the async engine merges concurrent
#: operations into few calls, so a few dozen serve hundreds of waiting coroutines.
ASYNC_MAX_CONNECTIONS = 32


@dataclass(frozen=True)
class RedisTarget:
    """Where the router's Redis is and how to log in.

    :param mode: ``node`` (one server), ``cluster`` (Redis Cluster: ``host:port`` is any
        node, ``cluster_nodes`` more of them, tried in turn when a client starts) or
        ``sentinel`` (``sentinels`` are asked for the master ``sentinel_master``).
    :param options: what every connection gets: ``username``, ``password``, ``db`` (0 for a
        cluster), ``socket_timeout``, ``socket_connect_timeout``, ``ssl*``.
    :param sentinel_options: what the connections to the sentinels get (their own
        ``password``, ``username``), if they differ.
    """

    mode: Mode = "node"
    host: str = "127.0.0.1"
    port: int = 6379
    options: dict[str, Any] = field(default_factory=dict)
    sentinel_master: str | None = None
    sentinels: tuple[tuple[str, int], ...] = ()
    sentinel_options: dict[str, Any] = field(default_factory=dict)
    url: str | None = None
    cluster_nodes: tuple[tuple[str, int], ...] = ()


def target_from_url(url: str) -> RedisTarget:
    """The target a URL names (see the module's docstring).

    :raises ValueError: naming what is wrong with the URL and the form it should take.
    """
    scheme, _, rest = url.partition("://")
    if not rest:
        raise ValueError(f"redis url {url!r}: expected scheme://..., e.g. "
                         "redis://127.0.0.1:6379/0 or redis+cluster://127.0.0.1:7000")
    base, _, kind = scheme.partition("+")
    if base not in ("redis", "rediss", "unix") or kind not in ("", "cluster", "sentinel"):
        raise ValueError(f"redis url {url!r}: unknown scheme {scheme!r}; use redis://, "
                         "rediss://, unix://, redis+cluster:// or redis+sentinel://")
    if not kind:
        return RedisTarget(url=url)
    if base == "unix":
        raise ValueError(f"redis url {url!r}: a cluster or sentinels are reached over TCP, "
                         "not a unix socket")
    if kind == "cluster":
        if "," in rest.partition("/")[0].rpartition("@")[2]:
            return _cluster_target(url, base, rest)
        return RedisTarget(mode="cluster", url=f"{base}://{rest}")
    return _sentinel_target(url, base, rest)


def _host_ports(url: str, hosts: str, what: str) -> list[tuple[str, int]]:
    found = []
    for hostport in hosts.split(","):
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"redis url {url!r}: {what} {hostport!r} is not host:port")
        found.append((host, int(port)))
    return found


def _credentials(base: str, creds: str) -> dict[str, Any]:
    user, _, password = creds.partition(":")
    options: dict[str, Any] = {}
    if user:
        options["username"] = unquote(user)
    if password:
        options["password"] = unquote(password)
    if base == "rediss":
        options["ssl"] = True
    return options


def _cluster_target(url: str, base: str, rest: str) -> RedisTarget:
    """``redis+cluster://`` with several nodes: the first is ``host:port``, the others
    ``cluster_nodes``."""
    parts = urlsplit(f"{base}://{rest}")
    creds, _, hosts = parts.netloc.rpartition("@")
    if parts.path.strip("/") not in ("", "0"):
        raise ValueError(f"redis url {url!r}: a Redis Cluster has database 0 only; "
                         "remove the path, as redis+cluster://host:7000,host:7001")
    nodes = _host_ports(url, hosts, "node")
    return RedisTarget(mode="cluster", host=nodes[0][0], port=nodes[0][1],
                       options=_credentials(base, creds), cluster_nodes=tuple(nodes[1:]))


def _sentinel_target(url: str, base: str, rest: str) -> RedisTarget:
    parts = urlsplit(f"{base}://{rest}")
    creds, _, hosts = parts.netloc.rpartition("@")
    path = [p for p in parts.path.split("/") if p]
    if not path or len(path) > 2:
        raise ValueError(f"redis url {url!r}: name the master, as "
                         "redis+sentinel://host:26379[,host:26379]/mymaster[/db]")
    sentinels = _host_ports(url, hosts, "sentinel")
    if len(path) == 2 and not path[1].isdigit():
        raise ValueError(f"redis url {url!r}: the database after the master must be a number")
    options: dict[str, Any] = {"db": int(path[1]) if len(path) == 2 else 0,
                               **_credentials(base, creds)}
    return RedisTarget(mode="sentinel", host=sentinels[0][0], port=sentinels[0][1],
                       options=options, sentinel_master=path[0], sentinels=tuple(sentinels))


def _sentinels(target: RedisTarget) -> list[tuple[str, int]]:
    return list(target.sentinels) or [(target.host, target.port)]


def sync_redis(target: RedisTarget) -> Any:
    """A blocking client: ``redis.Redis``, ``RedisCluster`` or Sentinel's master client."""
    if target.mode == "cluster":
        if target.url:
            return RedisCluster.from_url(target.url, **target.options)
        return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in _nodes(target)],
                            **_cluster(target.options))
    if target.mode == "sentinel":
        assert target.sentinel_master is not None
        sentinel = Sentinel(_sentinels(target), sentinel_kwargs=_sentinel_kwargs(target),
                            **target.options)
        return sentinel.master_for(target.sentinel_master, **_watched(target, asyncio=False))
    if target.url:
        return redis.Redis.from_url(target.url, **target.options)
    return redis.Redis(host=target.host, port=target.port, **target.options)


def async_redis(target: RedisTarget, max_connections: int = ASYNC_MAX_CONNECTIONS) -> Any:
    """An asyncio client of the same kind; a single node gets a blocking pool of
    ``max_connections`` (a coroutine waits for a free connection instead of failing)."""
    if target.mode == "cluster":
        if target.url:
            return AsyncRedisCluster.from_url(target.url, max_connections=max_connections,
                                              **target.options)
        return AsyncRedisCluster(
            startup_nodes=[AsyncClusterNode(h, p) for h, p in _nodes(target)],
            max_connections=max_connections, **_cluster(target.options))
    if target.mode == "sentinel":
        assert target.sentinel_master is not None
        sentinel = AsyncSentinel(_sentinels(target), sentinel_kwargs=_sentinel_kwargs(target),
                                 **target.options)
        return sentinel.master_for(target.sentinel_master, max_connections=max_connections,
                                   **_watched(target, asyncio=True))
    if target.url:
        pool = aioredis.BlockingConnectionPool.from_url(
            target.url, max_connections=max_connections, timeout=None, **target.options)
    else:
        pool = aioredis.BlockingConnectionPool(host=target.host, port=target.port,
                                               max_connections=max_connections, timeout=None,
                                               **target.options)
    return aioredis.Redis(connection_pool=pool)


def _watched(target: RedisTarget, *, asyncio: bool) -> dict[str, Any]:
    """A Sentinel master's connections watch which master they reach: a router client on
    them holds its windows when that changes (:mod:`~airflow_llm_router.engine.failover`)."""
    return {"connection_class": connection_class(asyncio, bool(target.options.get("ssl"))),
            "master_watch": MasterWatch()}


def _nodes(target: RedisTarget) -> list[tuple[str, int]]:
    """A cluster's startup nodes: ``host:port`` first, then ``cluster_nodes``."""
    first = (target.host, target.port)
    return [first, *(n for n in target.cluster_nodes if n != first)]


def _cluster(options: dict[str, Any]) -> dict[str, Any]:
    """A cluster has one database: ``db`` 0 is dropped (others are refused earlier)."""
    return {k: v for k, v in options.items() if k != "db"}


def _sentinel_kwargs(target: RedisTarget) -> dict[str, Any]:
    """How to reach the sentinels: their own credentials, the master's timeouts and TLS."""
    shared = {k: v for k, v in target.options.items()
              if k.startswith("ssl") or k.startswith("socket_")}
    return {**shared, **target.sentinel_options}
