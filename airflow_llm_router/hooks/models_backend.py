"""The Models Backend connection: base URL, timeout, auth and field names in one place."""

from __future__ import annotations

from typing import Any

import httpx
from airflow.sdk import BaseHook

from airflow_llm_router.backend import BackendConfig, BackendFields

__all__ = ["ModelsBackendHook", "backend_config"]


def backend_config(conn: Any) -> BackendConfig:
    """Build the call settings from a ``models_backend`` (or ``http``) connection.

    ``host`` holds the base URL (``http://backend:8080``) or a bare host with ``schema``
    (http/https) and ``port``; the password, if set, is sent as a bearer token; the extra may
    set ``timeout_s``, ``headers``, ``single_path``, ``batch_path`` and ``fields``.
    """
    host = conn.host or "127.0.0.1"
    if "://" in host:
        base_url = host
    else:
        scheme = conn.schema or "http"
        base_url = f"{scheme}://{host}" + (f":{conn.port}" if conn.port else "")
    extra = dict(conn.extra_dejson)
    headers = dict(extra.pop("headers", {}) or {})
    if conn.password:
        headers.setdefault("Authorization", f"Bearer {conn.password}")
    known = {k: extra[k] for k in ("single_path", "batch_path", "timeout_s") if k in extra}
    fields = BackendFields(**(extra.get("fields") or {}))
    return BackendConfig(base_url=base_url.rstrip("/"), headers=headers, fields=fields,
                         **known)


class ModelsBackendHook(BaseHook):
    """Reach the team's Models Backend (``POST /single``, ``POST /batch``).

    :param backend_conn_id: a ``models_backend`` connection.
    """

    conn_name_attr = "backend_conn_id"
    default_conn_name = "models_backend_default"
    conn_type = "models_backend"
    hook_name = "LLM Models Backend (HTTP)"

    def __init__(self, backend_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.backend_conn_id = backend_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["login"],
            "relabeling": {"host": "Base URL", "password": "Bearer token"},
            "placeholders": {
                "host": "http://models-backend:8080",
                "extra": '{"timeout_s": 300, "headers": {}, "fields": {"answer": "answer"}}',
            },
        }

    def get_config(self) -> BackendConfig:
        return backend_config(self.get_connection(self.backend_conn_id))

    async def aget_config(self) -> BackendConfig:
        """The same, without blocking the event loop (for triggers)."""
        return backend_config(await self.aget_connection(self.backend_conn_id))

    def test_connection(self) -> tuple[bool, str]:
        config = self.get_config()
        try:
            response = httpx.get(config.base_url + "/health", headers=config.headers,
                                 timeout=10)
        except httpx.HTTPError as err:
            return False, f"cannot reach {config.base_url}: {err}"
        return response.status_code < 500, f"{config.base_url} answered {response.status_code}"
