"""The Airflow hook of the router: an Airflow connection in, a router client out."""

from __future__ import annotations

import logging
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook
from pydantic import ValidationError

from airflow_llm_router.engine import AsyncRouterClient, RouterClient
from airflow_llm_router.engine.connect import RedisTarget, async_redis, sync_redis
from airflow_llm_router.engine.restore import QuotaSource
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.exceptions import ConnectionConfigError
from airflow_llm_router.quotas.config import QuotaConfig

__all__ = ["RouterHook", "redis_kwargs", "redis_target", "router_settings"]

log = logging.getLogger(__name__)

_SSL_FIELDS = ("ssl", "ssl_cert_reqs", "ssl_ca_certs", "ssl_keyfile", "ssl_certfile",
               "ssl_check_hostname")

#: Seconds a Redis call may take before it fails. redis-py's own default (5 s) is short
#: for a Redis shared with other load; one failed call would end a whole drain.
SOCKET_TIMEOUT_S = 30.0


def redis_kwargs(conn: Any) -> dict[str, Any]:
    """``redis.Redis`` keyword arguments from an Airflow connection (``llm_router`` or
    ``redis`` type): host, port, login, password, and ``db``, ``socket_timeout`` and
    ``ssl*`` from the extra."""
    extra = conn.extra_dejson
    password = conn.password
    if str(password).lower() in ("none", "false", ""):
        password = None
    kwargs: dict[str, Any] = {
        "host": conn.host or "127.0.0.1",
        "port": _number(conn, "port", conn.port or 6379, int),
        "username": conn.login or None,
        "password": password,
        "db": _number(conn, "extra.db", extra.get("db", 0), int),
        "socket_timeout": _number(conn, "extra.socket_timeout",
                                  extra.get("socket_timeout", SOCKET_TIMEOUT_S), float),
        "socket_connect_timeout": 10.0,
    }
    kwargs.update({k: extra[k] for k in _SSL_FIELDS if k in extra})
    return kwargs


def redis_target(conn: Any) -> RedisTarget:
    """Where the connection's Redis is: one node (the default), a Redis Cluster (extra
    ``cluster: true``; host and port are any node; ``cluster_nodes``: ``["host:port",
    ...]``, more nodes a new client tries in turn when that one is down) or the master
    Sentinel watches (extra ``sentinel_master``: its name; ``sentinels``: ``["host:port",
    ...]``, default the connection's host and port; ``sentinel_password``,
    ``sentinel_username`` if the sentinels ask for their own)."""
    extra = conn.extra_dejson
    kwargs = redis_kwargs(conn)
    host, port = kwargs.pop("host"), kwargs.pop("port")
    cluster = extra.get("cluster", False)
    if not isinstance(cluster, bool):
        raise ConnectionConfigError(_conn_id(conn), "extra.cluster",
                                    f"{cluster!r} is not true or false")
    nodes = _host_ports(conn, "extra.cluster_nodes", extra.get("cluster_nodes"))
    if nodes and not cluster:
        raise ConnectionConfigError(_conn_id(conn), "extra.cluster_nodes",
                                    "startup nodes are for a Redis Cluster: add "
                                    "\"cluster\": true, or remove cluster_nodes")
    master = extra.get("sentinel_master")
    if master is not None and (not isinstance(master, str) or not master):
        raise ConnectionConfigError(_conn_id(conn), "extra.sentinel_master",
                                    f"{master!r} is not the name of a master (a string)")
    if cluster and master:
        raise ConnectionConfigError(_conn_id(conn), "extra.cluster",
                                    "a cluster or a Sentinel master, not both: remove "
                                    "cluster or sentinel_master")
    if cluster:
        if kwargs.get("db"):
            raise ConnectionConfigError(_conn_id(conn), "extra.db",
                                        f"{kwargs['db']!r}: a Redis Cluster has database 0 "
                                        "only; remove db")
        return RedisTarget(mode="cluster", host=host, port=port, options=kwargs,
                           cluster_nodes=tuple(nodes))
    if master:
        sentinels = _host_ports(conn, "extra.sentinels", extra.get("sentinels"))
        own = {k.removeprefix("sentinel_"): extra[k]
               for k in ("sentinel_password", "sentinel_username") if extra.get(k)}
        return RedisTarget(mode="sentinel", host=host, port=port, options=kwargs,
                           sentinel_master=master,
                           sentinels=tuple(sentinels) or ((host, port),),
                           sentinel_options=own)
    return RedisTarget(host=host, port=port, options=kwargs)


def _host_ports(conn: Any, field: str, values: Any) -> list[tuple[str, int]]:
    """``["host:port", ...]`` (or None) as pairs, or an error naming ``field``."""
    if values is None:
        return []
    if not isinstance(values, list):
        raise ConnectionConfigError(_conn_id(conn), field,
                                    f"{values!r} is not a list such as [\"host:port\"]")
    pairs = []
    for value in values:
        host, _, port = str(value).rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConnectionConfigError(_conn_id(conn), field,
                                        f"{value!r} is not 'host:port'")
        pairs.append((host, int(port)))
    return pairs


def router_settings(conn: Any, overrides: dict[str, Any]) -> RouterSettings:
    """Router settings from the connection's extra (any :class:`RouterSettings` field),
    overridden by the hook's own arguments."""
    extra = conn.extra_dejson
    fields = {k: extra[k] for k in RouterSettings.model_fields if k in extra}
    fields.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return RouterSettings(**fields)
    except ValidationError as err:
        first = err.errors()[0]
        name = ".".join(str(p) for p in first["loc"])
        raise ConnectionConfigError(_conn_id(conn), f"extra.{name}",
                                    f"{first.get('input')!r} is wrong: {first['msg']}") from None


def _conn_id(conn: Any) -> str:
    return str(getattr(conn, "conn_id", None) or "llm_router")


_KINDS = {int: "whole number", float: "number"}


def _number(conn: Any, field: str, value: Any, kind: type[int] | type[float]) -> Any:
    """``value`` as a non-negative ``kind``, or an error naming the connection's field."""
    try:
        number = kind(value)
    except (TypeError, ValueError):
        number = -1
    if number < 0:
        raise ConnectionConfigError(_conn_id(conn), field,
                                    f"{value!r} is not a {_KINDS[kind]} >= 0")
    return number


class RouterHook(BaseHook):
    """Talk to the router of one namespace through an Airflow connection.

    The connection holds the Redis address and credentials (secrets stay in Airflow) and,
    in its extra, the router settings such as ``{"namespace": "prod", "guard_ms": 50}``.

    The router's operations are on its :attr:`client` (a :class:`RouterClient`, built on
    first use)::

        router = RouterHook("llm_router_default").client
        router.set_quota("gpt-small", {"rpm": 600, "tpm": 200_000, "max_concurrency": 32})
        decision = router.admit(1200)
        router.complete(decision.lease_id, input_tokens=900, output_tokens=250)

    :param router_conn_id: an ``llm_router`` (or plain ``redis``) connection.
    :param namespace: overrides the connection's namespace.
    :param settings: overrides of other :class:`RouterSettings` fields.
    """

    conn_name_attr = "router_conn_id"
    default_conn_name = "llm_router_default"
    conn_type = "llm_router"
    hook_name = "LLM Router (Redis)"

    def __init__(
        self,
        router_conn_id: str = default_conn_name,
        *,
        namespace: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.router_conn_id = router_conn_id
        self._overrides = {**(settings or {}), "namespace": namespace}

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema"],
            "relabeling": {"host": "Redis host", "port": "Redis port", "login": "Redis user"},
            "placeholders": {
                "host": "127.0.0.1",
                "port": "6379",
                "extra": '{"namespace": "default", "db": 0, "guard_ms": 50}',
            },
        }

    @cached_property
    def client(self) -> RouterClient:
        """The sync client (built once per hook)."""
        conn = self.get_connection(self.router_conn_id)
        config = self._restore_from(conn)
        source = None
        if config is not None:
            try:
                source = _source(config, self.get_connection(config.postgres_conn_id))
            except Exception as err:  # no quota store: admissions work, restores can't
                _no_source(config, err)
        return RouterClient(sync_redis(redis_target(conn)),
                            router_settings(conn, self._overrides), quota_source=source)

    def get_conn(self) -> RouterClient:
        return self.client

    async def get_async_client(self) -> AsyncRouterClient:
        """An asyncio client (for triggers): the connection is looked up without blocking.
        The caller owns it and must ``await client.aclose()``."""
        conn = await self.aget_connection(self.router_conn_id)
        client = async_redis(redis_target(conn))
        config = self._restore_from(conn)
        source = None
        if config is not None:
            try:
                source = _source(config, await self.aget_connection(config.postgres_conn_id))
            except Exception as err:
                _no_source(config, err)
        return AsyncRouterClient(client, router_settings(conn, self._overrides),
                                 quota_source=source)

    @staticmethod
    def _restore_from(conn: Any) -> QuotaConfig | None:
        """The quota store that clients restore lost quotas from (the ``[llm_router]``
        config, overridden by the connection's extra), or None if restoring is off."""
        config = QuotaConfig.from_airflow().with_router_extra(conn.extra_dejson)
        return config if config.restore else None

    def test_connection(self) -> tuple[bool, str]:
        try:
            self.client.redis.ping()
            models = self.client.get_quotas()
        except Exception as err:  # the UI shows the message
            return False, f"cannot reach the router's Redis: {err}"
        return True, f"connected; {len(models)} model quota(s) in namespace " \
                     f"{self.client.settings.namespace!r}"


def _source(config: QuotaConfig, postgres_conn: Any) -> QuotaSource:
    return config.open_store(None, postgres_conn).durable


_TOLD_NO_SOURCE: set[str] = set()


def _no_source(config: QuotaConfig, err: Exception) -> None:
    """Say once per process that restoring is off: nothing is lost, it is a configuration."""
    if config.postgres_conn_id in _TOLD_NO_SOURCE:
        return
    _TOLD_NO_SOURCE.add(config.postgres_conn_id)
    log.info("no quota store connection %r (%s): quotas are read from Redis only, and "
             "restored from PostgreSQL after a Redis loss once that connection exists",
             config.postgres_conn_id, type(err).__name__)
