"""The Models Backend connection: protocol, base URL, timeout, auth and field names in one
place."""

from __future__ import annotations

from typing import Any

import httpx
from airflow.sdk import BaseHook
from pydantic import BaseModel, ValidationError

from airflow_llm_router.backend import BackendConfig, BackendFields
from airflow_llm_router.backend.protocols import PROTOCOLS, WireProtocol
from airflow_llm_router.exceptions import ConnectionConfigError

__all__ = ["ModelsBackendHook", "backend_config"]

#: settings that only one protocol takes
_ONLY = {"fields": "models_backend", "batch_path": "models_backend",
         "max_tokens_field": "openai"}


def backend_config(conn: Any) -> BackendConfig:
    """Build the call settings from a ``models_backend`` (or ``http``) connection.

    ``host`` holds the base URL (``http://backend:8080``) or a bare host with ``schema``
    (http/https) and ``port``; the password, if set, is the API key or token, sent as the
    protocol sends one (``Authorization: Bearer``, or Anthropic's ``x-api-key``); the
    extra may set ``protocol`` (``models_backend``, the default, ``openai`` or
    ``anthropic``), ``timeout_s``, ``headers``, ``single_path``, ``batch_path`` and
    ``fields`` (models_backend), ``max_tokens_field`` (openai), ``max_output_tokens`` (the
    default output cap of every call; anthropic requires it) and ``rate_limit_headers``
    (read the backend's rate-limit headers; default true). docs/backends.md shows each.
    """
    host = conn.host or "127.0.0.1"
    if "://" in host:
        base_url = host
    else:
        scheme = conn.schema or "http"
        base_url = f"{scheme}://{host}" + (f":{conn.port}" if conn.port else "")
    extra = dict(conn.extra_dejson)
    conn_id = str(getattr(conn, "conn_id", None) or "models_backend")
    wire = _protocol(conn_id, extra.pop("protocol", "models_backend"))
    headers = extra.pop("headers", {}) or {}
    if not isinstance(headers, dict):
        raise ConnectionConfigError(conn_id, "extra.headers", "give a JSON object of "
                                    "header names to values")
    headers = {str(k): str(v) for k, v in headers.items()}
    if conn.password:
        for name, value in wire.auth_headers(conn.password).items():
            headers.setdefault(name, value)
    _check_settings(conn_id, wire, extra)
    known = {k: extra[k] for k in _SETTINGS if k in extra}
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
                             protocol=wire.name, **known)
    except ValidationError as err:
        raise _config_error(conn_id, "extra", err, BackendConfig) from None


_SETTINGS = ("single_path", "batch_path", "timeout_s", "max_output_tokens",
             "rate_limit_headers", "max_tokens_field")


def _protocol(conn_id: str, name: object) -> WireProtocol:
    """The protocol ``extra.protocol`` names, or the error that lists the choices."""
    if not isinstance(name, str) or name not in PROTOCOLS:
        raise ConnectionConfigError(conn_id, "extra.protocol", f"is {name!r:.40}; give one "
                                    "of " + ", ".join(PROTOCOLS))
    return PROTOCOLS[name]


def _check_settings(conn_id: str, wire: WireProtocol, extra: dict[str, Any]) -> None:
    """Refuse settings no protocol has, settings of another protocol, and an
    ``anthropic`` connection without the output cap its API requires."""
    unknown = sorted(set(extra) - {*_SETTINGS, "fields"})
    if unknown:
        raise ConnectionConfigError(conn_id, f"extra.{unknown[0]}", "not a setting of a "
                                    "models_backend connection; use protocol, headers, "
                                    "fields, " + ", ".join(_SETTINGS))
    for name in sorted(extra):
        owner = _ONLY.get(name, wire.name)
        if owner != wire.name:
            raise ConnectionConfigError(conn_id, f"extra.{name}", f"only the {owner} "
                                        f"protocol takes it; this connection's protocol is "
                                        f"{wire.name}: remove it")
    if wire.name == "anthropic" and extra.get("max_output_tokens") is None:
        raise ConnectionConfigError(conn_id, "extra.max_output_tokens", "required by the "
                                    "anthropic protocol (its API needs max_tokens on every "
                                    "call); give the default output cap in tokens, e.g. "
                                    "1024")


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
    """Reach the backend that serves the models: the team's Models Backend (``POST
    /single``, ``POST /batch``), or an OpenAI- or Anthropic-style API (``extra.protocol``).

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
            "relabeling": {"host": "Base URL", "password": "API key or bearer token"},
            "placeholders": {
                "host": "http://models-backend:8080",
                "extra": '{"protocol": "models_backend", "timeout_s": 300, "headers": {}}',
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
