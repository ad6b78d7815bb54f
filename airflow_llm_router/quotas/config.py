"""Where the quota store lives and which router it feeds, from Airflow's configuration.

Looked up in this order: the ``llm_router`` connection's extra (``quota_postgres_conn_id``,
``quota_schema``, ``quota_table``), the ``[llm_router]`` section of the Airflow config
(``router_conn_id``, ``postgres_conn_id``, ``quota_schema``, ``quota_table``), then the
defaults below. Only connection ids travel here; the secrets stay in the connections.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.pg import dsn_from_connection
from airflow_llm_router.quotas.quota_store import QuotaStore

SECTION = "llm_router"


@dataclass(frozen=True)
class QuotaConfig:
    """Connection ids and table names of the quota store.

    :param restore: let router clients built by ``RouterHook`` restore quotas from this
        store when Redis has lost them (``[llm_router] restore_quotas``).
    """

    router_conn_id: str = "llm_router_default"
    postgres_conn_id: str = "postgres_default"
    schema: str = "llm_router"
    table: str = "quotas"
    restore: bool = True
    #: the task store the quota page's backlog panel shows (on ``postgres_conn_id``)
    task_schema: str = "llm_router"
    task_table: str = "tasks"

    @classmethod
    def from_airflow(cls) -> QuotaConfig:
        """The ``[llm_router]`` options, defaults where unset."""
        from airflow.configuration import conf

        d = cls()
        return cls(
            router_conn_id=conf.get(SECTION, "router_conn_id", fallback=d.router_conn_id),
            postgres_conn_id=conf.get(SECTION, "postgres_conn_id",
                                      fallback=d.postgres_conn_id),
            schema=conf.get(SECTION, "quota_schema", fallback=d.schema),
            table=conf.get(SECTION, "quota_table", fallback=d.table),
            restore=conf.getboolean(SECTION, "restore_quotas", fallback=d.restore),
            task_schema=conf.get(SECTION, "task_schema", fallback=d.task_schema),
            task_table=conf.get(SECTION, "task_table", fallback=d.task_table),
        )

    def with_router_extra(self, extra: Mapping[str, Any]) -> QuotaConfig:
        """Overridden by a router connection's extra, which names its own quota store."""
        keys = {"quota_postgres_conn_id": "postgres_conn_id", "quota_schema": "schema",
                "quota_table": "table", "restore_quotas": "restore"}
        return replace(self, **{field: extra[key] for key, field in keys.items()
                                if extra.get(key) is not None})

    def open_store(self, router: RouterClient | None, postgres_conn: Any = None) -> QuotaStore:
        """The store on ``postgres_conn`` (an Airflow connection; looked up by
        ``postgres_conn_id`` if not given). The DSN is never logged."""
        if postgres_conn is None:
            from airflow.sdk import BaseHook

            postgres_conn = BaseHook.get_connection(self.postgres_conn_id)
        dsn = dsn_from_connection(postgres_conn)
        return QuotaStore(dsn, router, schema=self.schema, table=self.table)
