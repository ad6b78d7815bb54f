"""The Models Backend hook: base URL, auth, field names and timeouts from a connection."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_llm_router.exceptions import ConnectionConfigError
from airflow_llm_router.hooks.models_backend import ModelsBackendHook
from tests.integration.backends import serve_backend, small_profile


def _hook(monkeypatch: pytest.MonkeyPatch, **conn: Any) -> ModelsBackendHook:
    monkeypatch.setenv("AIRFLOW_CONN_BACKEND_TEST",
                       json.dumps({"conn_type": "models_backend", **conn}))
    return ModelsBackendHook("backend_test")


def test_base_url_auth_and_fields_from_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _hook(monkeypatch, host="backend.internal", schema="https", port=8443,
                 password="tok-123",
                 extra={"timeout_s": 12, "headers": {"X-Team": "search"},
                        "fields": {"answer": "text", "prompt": "input"}})
    config = hook.get_config()
    assert config.base_url == "https://backend.internal:8443"
    assert config.headers == {"X-Team": "search", "Authorization": "Bearer tok-123"}
    assert config.timeout_s == 12
    assert (config.fields.answer, config.fields.prompt, config.fields.model) == \
        ("text", "input", "model")


def test_a_full_url_in_host_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _hook(monkeypatch, host="http://10.0.0.5:9000/").get_config()
    assert config.base_url == "http://10.0.0.5:9000" and "Authorization" not in config.headers


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"fields": {"answr": "text"}}, r"extra\.fields\.answr: unknown; known: model, "),
        ({"fields": ["answer"]}, r"extra\.fields: give a JSON object"),
        ({"timeout_s": 0}, r"extra\.timeout_s: Input should be greater than 0"),
        ({"headers": "Bearer x"}, r"extra\.headers: give a JSON object"),
        ({"max_output_token": 5}, r"extra\.max_output_token: not a setting of a "
                                  r"models_backend connection; use protocol, headers, fields, "),
        ({"rate_limit_headers": "maybe"}, r"extra\.rate_limit_headers: Input should be a "
                                          r"valid boolean"),
    ],
)
def test_a_bad_extra_is_named_with_its_fix(monkeypatch: pytest.MonkeyPatch,
                                          extra: dict[str, Any], message: str) -> None:
    hook = _hook(monkeypatch, host="http://backend", password="tok-secret", extra=extra)
    with pytest.raises(ConnectionConfigError, match=message) as raised:
        hook.get_config()
    assert "tok-secret" not in str(raised.value) and "'backend_test'" in str(raised.value)


async def test_async_config_matches_the_sync_one(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _hook(monkeypatch, host="http://backend:1", extra={"single_path": "/v1/one"})
    assert await hook.aget_config() == hook.get_config()


def test_connection_test_reaches_a_live_backend(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str
) -> None:
    with serve_backend(small_profile(), monkeypatch, namespace, pg_dsn) as sim:
        hook = _hook(monkeypatch, host=sim.url)
        ok, message = hook.test_connection()
    assert ok and "answered 200" in message


def test_connection_test_reports_an_unreachable_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ok, message = _hook(monkeypatch, host="http://127.0.0.1:1").test_connection()
    assert not ok and "cannot reach http://127.0.0.1:1" in message


@pytest.mark.parametrize(
    ("protocol", "extra", "auth"),
    [
        ("models_backend", {}, {"Authorization": "Bearer key-1"}),
        ("openai", {"max_tokens_field": "max_completion_tokens"},
         {"Authorization": "Bearer key-1"}),
        ("anthropic", {"max_output_tokens": 1024}, {"x-api-key": "key-1"}),
    ],
)
def test_the_protocol_picks_how_the_key_is_sent(monkeypatch: pytest.MonkeyPatch, protocol: str,
                                              extra: dict[str, Any],
                                              auth: dict[str, str]) -> None:
    config = _hook(monkeypatch, host="https://api.example.com/v1", password="key-1",
                   extra={"protocol": protocol, **extra}).get_config()
    assert (config.protocol, config.headers) == (protocol, auth)
    assert config.single_path is None  # the protocol's own path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"protocol": "grpc"}, r"extra\.protocol: is 'grpc'; give one of models_backend, "
                               r"openai, anthropic"),
        ({"protocol": ["openai"]}, r"extra\.protocol: is \['openai'\]; give one of "),
        ({"protocol": "anthropic"}, r"extra\.max_output_tokens: required by the anthropic "
                                    r"protocol"),
        ({"protocol": "openai", "fields": {"answer": "text"}},
         r"extra\.fields: only the models_backend protocol takes it; this connection's "
         r"protocol is openai: remove it"),
        ({"max_tokens_field": "max_completion_tokens"},
         r"extra\.max_tokens_field: only the openai protocol takes it"),
        ({"protocol": "openai", "max_tokens_field": "max_output"},
         r"extra\.max_tokens_field: Input should be 'max_tokens' or 'max_completion_tokens'"),
    ],
)
def test_a_bad_protocol_setting_is_named_with_its_fix(monkeypatch: pytest.MonkeyPatch,
                                                      extra: dict[str, Any],
                                                      message: str) -> None:
    hook = _hook(monkeypatch, host="http://backend", password="tok-secret", extra=extra)
    with pytest.raises(ConnectionConfigError, match=message) as raised:
        hook.get_config()
    assert "tok-secret" not in str(raised.value)
