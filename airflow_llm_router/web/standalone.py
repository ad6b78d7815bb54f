"""The HTTP API outside the Airflow API server: its app, from Airflow connections.

The bearer token is the password of an Airflow connection (any type; ``generic`` fits), so
it lives where Airflow keeps secrets (metadata database, environment, a secrets backend)
and rotating it means editing that connection and restarting the server. The router's
Redis, the task store and the quota store come from the same connections the DAGs use.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from airflow.sdk import BaseHook
from fastapi import FastAPI

from airflow_llm_router.exceptions import ConnectionConfigError
from airflow_llm_router.quotas.config import QuotaConfig
from airflow_llm_router.web.app import create_app
from airflow_llm_router.web.auth import token_access
from airflow_llm_router.web.openai_compat import (
    DEFAULT_MAX_BODY_BYTES,
    OpenAIEndpoint,
    backend_source,
    install,
    read_backend,
)
from airflow_llm_router.web.service import QuotaService
from airflow_llm_router.web.sources import router_source, task_store_source

__all__ = ["MIN_TOKEN_CHARS", "Standalone", "read_token"]

#: Shortest token accepted: a guessable token would open the quotas to anyone.
MIN_TOKEN_CHARS = 16


def read_token(conn_id: str) -> str:
    """The bearer token: the password of connection ``conn_id``.

    :raises ConnectionConfigError: no password, or a short one (the message names the
        connection and the field, never the value).
    """
    token = BaseHook.get_connection(conn_id).password or ""
    if len(token) < MIN_TOKEN_CHARS:
        held = "no token" if not token else f"a token shorter than {MIN_TOKEN_CHARS} characters"
        raise ConnectionConfigError(
            conn_id, "password", f"holds {held}: put the API's bearer token there (e.g. "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return token


@dataclass(frozen=True)
class Standalone:
    """Where the standalone API's parts come from (the command line's options)."""

    token_conn_id: str = "llm_router_api"
    router_conn_id: str = "llm_router_default"
    namespace: str | None = None
    postgres_conn_id: str = "postgres_default"
    store_schema: str = "llm_router"
    store_table: str = "tasks"
    #: the quota tables' place (the ``[llm_router]`` config's, as for the plugin)
    quotas: QuotaConfig = field(default_factory=QuotaConfig)
    #: the ``models_backend`` connection (any protocol) behind ``/v1/chat/completions``
    #: (None: the OpenAI-compatible endpoint is not served)
    backend_conn_id: str | None = None
    #: the longest an OpenAI-compatible request waits for room before its 429
    max_wait_s: float = 30.0
    #: the largest body of an OpenAI-compatible request
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    @classmethod
    def from_config(cls, config: QuotaConfig) -> Standalone:
        """The ``[llm_router]`` config's connections and stores (what the plugin uses)."""
        return cls(router_conn_id=config.router_conn_id,
                   postgres_conn_id=config.postgres_conn_id,
                   store_schema=config.task_schema, store_table=config.task_table,
                   quotas=config)

    def quota_service(self) -> QuotaService:
        """The quota routes' store and router, on this API's connections."""
        config = replace(self.quotas, router_conn_id=self.router_conn_id,
                         postgres_conn_id=self.postgres_conn_id)
        return QuotaService.from_config(config, self.namespace)

    def app(self, token: str | None = None) -> FastAPI:
        """The app, with ``token`` or the one of :attr:`token_conn_id`; with a backend
        connection, the OpenAI-compatible endpoint too."""
        app = create_app(
            access=token_access(token or read_token(self.token_conn_id)),
            router=router_source(self.router_conn_id, self.namespace),
            task_store=task_store_source(self.postgres_conn_id, self.store_schema,
                                         self.store_table),
            service=self.quota_service)
        if self.backend_conn_id is not None:
            install(app, OpenAIEndpoint(backend=backend_source(self.backend_conn_id),
                                        max_wait_s=self.max_wait_s,
                                        max_body_bytes=self.max_body_bytes))
        return app

    async def check_backend(self) -> None:
        """Read the backend connection once (so a missing or invalid one fails at start)."""
        if self.backend_conn_id is not None:
            await read_backend(self.backend_conn_id)

    async def check_router(self) -> str:
        """Reach the router's Redis once (so a wrong connection fails at start, not at the
        first request); returns the namespace."""
        client = await router_source(self.router_conn_id, self.namespace).get()
        try:
            await client.redis.ping()
            return client.settings.namespace
        finally:
            await client.aclose()
