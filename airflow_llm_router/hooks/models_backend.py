"""The Models Backend connection: base URL, timeout, auth and field names in one place."""

from __future__ import annotations

from typing import Any

import httpx
from airflow.sdk import BaseHook
from pydantic import BaseModel, ValidationError

from airflow_llm_router.backend import BackendConfig, BackendFields
from airflow_llm_router.exceptions import ConnectionConfigError

__all__ = ["ModelsBackendHook", "backend_config"]


def backend_config(conn: Any) -> BackendConfig:
    """Build the call settings from a ``models_backend`` (or ``http``) connection.

    ``host`` holds the base URL (``http://backend:8080``) or a bare host with ``schema``
    (http/https) and ``port``; the password, if set, is sent as a bearer token; the extra may
    set ``timeout_s``, ``headers``, ``single_path``, ``batch_path``, ``fields``,
    ``max_output_tokens`` (the default output cap of every call) and
    ``rate_limit_headers`` (read the backend's rate-limit headers; default true).
    """
    host = conn.host or "127.0.0.1"
    if "://" in host:
        base_url = host
    else:
        scheme = conn.schema or "http"
        base_url = f"{scheme}://{host}" + (f":{conn.port}" if conn.port else "")
    extra = dict(conn.extra_dejson)
    conn_id = str(getattr(conn, "conn_id", None) or "models_backend")
    headers = extra.pop("headers", {}) or {}
    if not isinstance(headers, dict):
        raise ConnectionConfigError(conn_id, "extra.headers", "give a JSON object of "
                                    "header names to values")
    headers = {str(k): str(v) for k, v in headers.items()}
    if conn.password:
        headers.setdefault("Authorization", f"Bearer {conn.password}")
    settings = ("single_path", "batch_path", "timeout_s", "max_output_tokens",
                "rate_limit_headers")
    unknown = sorted(set(extra) - {*settings, "fields"})
    if unknown:
        raise ConnectionConfigError(conn_id, f"extra.{unknown[0]}", "not a setting of a "
                                    "models_backend connection; use headers, fields, "
                                    + ", ".join(settings))
    known = {k: extra[k] for k in settings if k in extra}
    names = extra.get("fields") or {}
    if not isinstance(names, dict):
        raise ConnectionConfigError(conn_id, "extra.fields", "give a JSON object mapping "
                                    f"field names ({', '.join(BackendFields.model_fields)})")
    try:
        fields = BackendFields(**names)
    except ValidationError as err:
        raise _config_error(conn_id, "extra.fields", err, BackendFields) from None
    try:
        return BackendConfig(base_url=base_url.rstrip("/"), headers=headers, fields=fields,
                             **known)
    except ValidationError as err:
        raise _config_error(conn_id, "extra", err, BackendConfig) from None


def _config_error(conn_id: str, where: str, err: ValidationError,
                  model: type[BaseModel]) -> ConnectionConfigError:
    """The first problem of ``err`` as the field and the fix (never the value: a header
    may hold a secret)."""
    first = err.errors()[0]
    field = ".".join([where, *(str(p) for p in first["loc"])])
    if first["type"] == "extra_forbidden":
        return ConnectionConfigError(conn_id, field, "unknown; known: "
                                     + ", ".join(model.model_fields))
    return ConnectionConfigError(conn_id, field, first["msg"])


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
