"""Loading quotas from a YAML/JSON file with the CLI, and the hook's restore source."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from airflow_llm_router.cli.quotas import main
from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.quota import ModelQuota
from airflow_llm_router.engine.types import Wait
from airflow_llm_router.exceptions import QuotaValidationError
from airflow_llm_router.hooks.router import RouterHook
from airflow_llm_router.quotas import QuotaStore, read_quota_file
from llm_router_devkit.api_server import standalone_api
from tests.conftest import delete_namespace

YAML = """\
models:
  gpt-small: {rpm: 600, tpm: 200000, max_concurrency: 32}
  openai/gpt-4o:
    rpm: 2
    tpm: 90000
    max_concurrency: 8
    weight: 2
    window_s: 30
"""


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str,
                pg_schema: str) -> None:
    """The default connections and the ``[llm_router]`` quota schema, as Airflow reads them."""
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DEFAULT", json.dumps(
        {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
         "extra": {"namespace": namespace}}))
    monkeypatch.setenv("AIRFLOW_CONN_POSTGRES_DEFAULT", pg_dsn)
    monkeypatch.setenv("AIRFLOW__LLM_ROUTER__QUOTA_SCHEMA", pg_schema)


def test_cli_loads_a_yaml_file(connections: None, tmp_path: Path, router: RouterClient,
                               pg_dsn: str, pg_schema: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "quotas.yaml"
    path.write_text(YAML)
    assert main(["load", str(path), "--actor", "deploy"]) == 0
    assert "2 change(s)" in capsys.readouterr().out
    assert router.get_quota("openai/gpt-4o") == ModelQuota(
        rpm=2, tpm=90_000, max_concurrency=8, weight=2.0, window_s=30)
    store = QuotaStore(pg_dsn, schema=pg_schema)
    assert sorted(store.quotas()) == ["gpt-small", "openai/gpt-4o"]
    assert {(a.actor, a.source, a.action) for a in store.audit()} == {
        ("deploy", "file", "create")}
    # loading the same file again changes nothing; --prune drops what the file lost
    assert main(["load", str(path)]) == 0
    assert len(store.audit()) == 2
    path.write_text(json.dumps({"gpt-small": {"rpm": 5, "tpm": 100, "max_concurrency": 1}}))
    json_path = path.rename(tmp_path / "quotas.json")
    assert main(["load", str(json_path), "--prune"]) == 0
    assert sorted(router.get_quotas()) == ["gpt-small"] == sorted(store.quotas())


def test_cli_refuses_a_bad_file_whole(connections: None, tmp_path: Path, router: RouterClient,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "quotas.yaml"
    path.write_text(YAML + "  broken: {rpm: -1, tpm: 5, max_concurrency: 1, burst: 3}\n"
                    "  'bad name': {rpm: 1, tpm: 1, max_concurrency: 1}\n")
    assert main(["load", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    # one problem per line, each naming the file, the model and the field; then one verdict
    assert lines[-1] == f"error: {path}: 3 problems (above); nothing was loaded"
    problems = lines[:-1]
    assert len(problems) == 3 and all(p.startswith(f"{path}: ") for p in problems)
    assert "broken: rpm: Input should be greater than 0" in problems[0]
    assert "broken: burst: " in problems[1] and "remove it" in problems[1]
    assert "'bad name' is not a valid model name" in problems[2]
    assert router.get_quotas() == {}


def test_cli_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for default in ("(default: llm_router_default)", "(default: postgres_default)",
                    "(default: llm_router)", "(default: quotas)"):
        assert default in out


@pytest.mark.parametrize(("argv", "message"), [
    (["bogus"], "argument command: invalid choice: 'bogus'"),
    (["load"], "the following arguments are required: file"),
    (["list", "--prune"], "unrecognized arguments: --prune"),
])
def test_a_command_line_mistake_is_one_error_line_and_exit_2(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), lines
    assert lines[0].endswith("(see --help)")


@pytest.mark.parametrize(("text", "message"), [
    ("models: [1, 2]", "expected a mapping of model names"),
    ("m: {rpm: '60', tpm: 1, max_concurrency: 1}", "m: rpm: Input should be a valid integer"),
    ("m: {rpm: 60, tpm: 1, max_concurrency: 1, window_s: 0}", "m: window_s"),
    ("m: [rpm]", "m: quota: expected a mapping"),
    ("{unclosed", "not valid YAML"),
])
def test_read_quota_file_names_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "quotas.yaml"
    path.write_text(text)
    with pytest.raises(QuotaValidationError, match=message.replace("[", r"\[")):
        read_quota_file(path)


def test_a_file_that_is_not_utf8_is_refused_with_the_fix(
        connections: None, tmp_path: Path, router: RouterClient,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "quotas.json"
    path.write_bytes(b"\xff\xfe" + '{"m": {"rpm": 5}}'.encode("utf-16-le"))
    assert main(["load", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert "not UTF-8 text (byte 0xff at offset 0); save the file as UTF-8" in err[0]
    assert router.get_quotas() == {}


def test_an_absurd_quota_in_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "quotas.yaml"
    path.write_text("m: {rpm: 1e40, tpm: 10000000000000000000000000000000000000000, "
                    "max_concurrency: 1}\n")
    with pytest.raises(QuotaValidationError, match=r"m: rpm: .* \| m: tpm: .*at most 10\^15"):
        read_quota_file(path)


def test_hook_clients_restore_from_the_quota_store(
        connections: None, pg_dsn: str, pg_schema: str, router: RouterClient,
        lose_redis: Callable[[], int]) -> None:
    store = QuotaStore(pg_dsn, router, schema=pg_schema)
    store.migrate()
    store.put("m", {"rpm": 2, "tpm": 1000, "max_concurrency": 5, "window_s": 30}, actor="a")
    lose_redis()
    client = RouterHook().client
    assert client.quota_source is not None
    decisions = [client.admit(10) for _ in range(3)]
    # the quota is back, and the calls sent just before the loss are unknown: every model
    # waits out one window (the recovery hold; RouterSettings.recovery_share)
    assert all(isinstance(d, Wait) and d.reason == "recovery" for d in decisions), decisions
    assert all(25_000 <= d.retry_after_ms <= 35_000 for d in decisions  # type: ignore[union-attr]
               ), decisions  # one window (30 s) + guard, jittered by 10 %
    assert client.stats().models["m"].quota is not None


async def test_hook_async_clients_restore_too(
        connections: None, pg_dsn: str, pg_schema: str, router: RouterClient,
        lose_redis: Callable[[], int]) -> None:
    store = QuotaStore(pg_dsn, router, schema=pg_schema)
    store.migrate()
    store.put("m", {"rpm": 1, "tpm": 1000, "max_concurrency": 5, "window_s": 30}, actor="a")
    lose_redis()
    client = await RouterHook().get_async_client()
    try:
        first = await client.admit(10)
        assert isinstance(first, Wait) and first.reason == "recovery", first
        assert (await client.stats()).models["m"].quota is not None
    finally:
        await client.aclose()


def test_restore_can_be_turned_off(connections: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__LLM_ROUTER__RESTORE_QUOTAS", "False")
    assert RouterHook().client.quota_source is None


def test_a_missing_connection_is_one_error_line_and_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--postgres-conn-id", "no_such_connection", "list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert "no_such_connection" in err[0] and "connections add" in err[0]


def test_an_unreachable_database_is_one_error_line_and_exit_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("AIRFLOW_CONN_PG_NOWHERE", f"postgresql://u@127.0.0.1:{port}/x")
    assert main(["--postgres-conn-id", "pg_nowhere", "list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: quota store: "), err
    assert "Connection refused" in err[0] and "Is the server running" in err[0]


def test_cli_shows_sets_and_clears_the_router_wide_budget(
        connections: None, router: RouterClient, pg_dsn: str, pg_schema: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate"]) == 0
    capsys.readouterr()
    assert main(["budget"]) == 0
    assert json.loads(capsys.readouterr().out) is None
    assert main(["budget", "--set", "2500000", "--period-s", "3600", "--actor", "ops"]) == 0
    assert "router-wide budget" in capsys.readouterr().out
    # stored, audited and pushed to the router's Redis at once
    applied = router.budget()
    assert applied is not None and applied.budget_micro_usd == 2_500_000
    assert applied.budget_period_s == 3600
    assert main(["budget"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["budget_micro_usd"] == 2_500_000 and shown["updated_by"] == "ops"
    assert main(["budget", "--clear"]) == 0
    assert router.budget() is None
    assert QuotaStore(pg_dsn, schema=pg_schema).budget_record() is None


@pytest.mark.parametrize(("argv", "names"), [
    (["budget", "--set", "-5"], "budget_micro_usd"),
    (["budget", "--set", "100", "--period-s", "0"], "budget_period_s"),
    (["budget", "--period-s", "60"], "--period-s"),
    (["budget", "--set", "100", "--clear"], "--clear"),
])
def test_a_bad_budget_is_one_error_line_and_exit_2(
        connections: None, router: RouterClient, argv: list[str], names: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    try:
        status = main(argv)
    except SystemExit as exit_:  # a usage mistake, caught by the parser
        status = int(exit_.code or 0)
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and names in err[0]
    assert router.budget() is None


def test_loading_into_a_new_schema_warns_of_no_loss(
        connections: None, tmp_path: Path, router: RouterClient,
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    # a new schema and a new Redis namespace: nothing was stored, so nothing was lost
    path = tmp_path / "quotas.yaml"
    path.write_text(YAML)
    with caplog.at_level("INFO"):
        assert main(["load", str(path)]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [], warnings
    out = capsys.readouterr().out
    assert out.splitlines() == ["create   gpt-small", "create   openai/gpt-4o",
                                f"2 change(s); 2 model(s) in {path}"], out


def test_the_command_logs_to_stderr_and_prints_to_stdout(
        connections: None, tmp_path: Path, namespace: str) -> None:
    path = tmp_path / "quotas.yaml"
    path.write_text(YAML)

    def load() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "airflow_llm_router.cli", "quotas", "load",
                               str(path)], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"),
                                   "AIRFLOW__CORE__UNIT_TEST_MODE": "False"})

    first = load()
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["create   gpt-small", "create   openai/gpt-4o",
                                         f"2 change(s); 2 model(s) in {path}"], first.stdout
    assert "Applied migration 1" in first.stderr and "had lost" not in first.stderr
    delete_namespace(namespace)  # Redis loses what it held: the next load says so, on stderr
    second = load()
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [f"0 change(s); 2 model(s) in {path}"], second.stdout
    assert "had lost 2 stored value(s)" in second.stderr, second.stderr


@pytest.mark.timeout(300)
def test_the_command_reads_connections_added_to_the_metadata_database(
        tmp_path: Path, namespace: str, pg_dsn: str, pg_schema: str) -> None:
    # no AIRFLOW_CONN_*: the connections live in Airflow's metadata database, added as the
    # docs say (airflow connections add), and the command finds them there
    home = tmp_path / "airflow"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
                "AIRFLOW__LLM_ROUTER__QUOTA_SCHEMA": pg_schema})
    airflow = str(Path(sys.executable).parent / "airflow")

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=env)
        assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
        return done

    run(airflow, "db", "migrate")
    run(airflow, "connections", "add", "llm_router_default", "--conn-json", json.dumps(
        {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
         "extra": {"namespace": namespace}}))
    run(airflow, "connections", "add", "postgres_default", "--conn-uri", pg_dsn)
    path = tmp_path / "quotas.yaml"
    path.write_text(YAML)
    llm_router = str(Path(sys.executable).parent / "llm-router")
    loaded = run(llm_router, "quotas", "load", str(path))
    assert loaded.stdout.splitlines()[-1] == f"2 change(s); 2 model(s) in {path}"
    listed = json.loads(run(llm_router, "quotas", "list").stdout)
    assert sorted(listed) == ["gpt-small", "openai/gpt-4o"]
    # the standalone API, started as python -m airflow_llm_router.web, finds its token and
    # both stores' connections there too
    token = secrets.token_urlsafe(24)
    run(airflow, "connections", "add", "llmr_api_token", "--conn-type", "generic",
        "--conn-password", token)
    with standalone_api(env, ["--token-conn-id", "llmr_api_token"], tmp_path / "api.log") \
            as url, httpx.Client(base_url=url, timeout=15,
                                 headers={"Authorization": f"Bearer {token}"}) as http:
        quotas = http.get("/quotas")
        assert quotas.status_code == 200, quotas.text
        models = quotas.json()["models"]
        assert {"gpt-small", "openai/gpt-4o"} <= {m["model"] for m in models}, models
        assert http.get("/backlog").status_code == 200  # the task store's connection
