"""The code in the README and docs/ works as written: a reader copies it first.

Each page's Python blocks run, top to bottom in one namespace as a reader would run them,
against the real Redis and PostgreSQL, with the connections the docs tell an operator to
create (``llm_router_default`` on a namespace of its own, ``postgres_default`` on a
database of its own, so the defaults the snippets rely on land nowhere shared). The
``llm-router`` lines of the shell blocks run through the command's own entry point, beside
the quota file the docs show. The README's engine example also runs whole in a fresh
interpreter with the connection its shell block exports. A block that needs Airflow's task
context or a running stack says why on its fence (``<!-- snippet: skip ... -->``); those
reasons are listed here, so a new one is a visible choice. Every block, skipped or not,
parses and imports only names that exist.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from airflow_llm_router.engine import RouterClient, RouterSettings
from tests.conftest import POSTGRES_DSN
from tests.integration.docs.snippets import DOCS, ROOT, Block, blocks, commands, section

PYTHON = [block for path in DOCS for block in blocks(path, "python")]
PAGES = [pytest.param(path, id=path.name) for path in DOCS
         if any(b.skip is None for b in blocks(path, "python"))]
OUR_PACKAGES = ("airflow_llm_router", "llm_router_devkit")

#: The blocks not run, and why: each needs a stack no test fixture stands up cheaply.
SKIPPED = {
    "docs/http_api.md": "needs the standalone HTTP API and a backend running",
    "docs/openai_endpoint.md": "needs the standalone HTTP API in front of an OpenAI backend",
}


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """A PostgreSQL database of its own: the snippets use the default schemas."""
    name = f"llmr_docs_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield POSTGRES_DSN.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def connections(database: str, namespace: str, redis_url: str,
                monkeypatch: pytest.MonkeyPatch) -> str:
    """The connections the docs say to create; returns the router namespace."""
    host_port = redis_url.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DEFAULT", json.dumps(
        {"conn_type": "llm_router", "host": host, "port": int(port),
         "extra": {"namespace": namespace}}))
    for conn_id in ("POSTGRES_DEFAULT", "PG_QUOTAS"):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id}", database)
    # the commands read connections from here only (this test has no metadata database)
    monkeypatch.setenv("_AIRFLOW_PROCESS_CONTEXT", "client")
    return namespace


def test_the_docs_hold_python_snippets() -> None:
    assert len(PYTHON) >= 15 and len(PAGES) >= 8


def test_the_skipped_snippets_are_the_listed_ones() -> None:
    skipped = {str(b.path.relative_to(ROOT)): b.skip for b in PYTHON if b.skip is not None}
    assert skipped == SKIPPED


@pytest.mark.parametrize("path", PAGES)
def test_a_pages_python_runs_as_written(path: Path, connections: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    names: dict[str, Any] = {"__name__": f"docs.{path.stem}"}
    for block in blocks(path, "python"):
        if block.skip is None:
            exec(block.compiled(), names)  # the docs' own code, on purpose


def test_the_llm_router_commands_run_as_written(connections: str, tmp_path: Path,
                                                redis_url: str,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Beside ``quotas.yaml`` as docs/quotas_ui.md shows it; each line exits 0."""
    from airflow_llm_router.cli import main

    ((quota_file),) = [b.code for b in blocks(ROOT / "docs" / "quotas_ui.md", "yaml")
                       if "models:" in b.code]
    (tmp_path / "quotas.yaml").write_text(quota_file)
    monkeypatch.chdir(tmp_path)
    lines = commands("llm-router ")
    assert len(lines) >= 5
    for block, line in lines:
        assert main(shlex.split(line)[1:]) == 0, f"{block.where}: {line}"
    models = yaml.safe_load(quota_file)["models"]
    with closing(RouterClient.from_url(redis_url, RouterSettings(namespace=connections))) as client:
        assert set(client.get_quotas()) == set(models)  # loaded, then pruned to the file
    assert capsys.readouterr().out


@pytest.mark.parametrize("block", [pytest.param(b, id=b.where) for b in PYTHON])
def test_a_snippet_parses_and_imports_only_what_exists(block: Block) -> None:
    tree = ast.parse(block.code, block.where)
    missing = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith(OUR_PACKAGES):
            module = importlib.import_module(node.module)
            missing += [f"{node.module}.{alias.name}" for alias in node.names
                        if not hasattr(module, alias.name)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(OUR_PACKAGES):
                    importlib.import_module(alias.name)
    assert missing == [], f"{block.where} imports names that do not exist"


def _exported_connection(shell: str) -> tuple[str, dict[str, Any]]:
    """The ``export NAME='json'`` of a README shell block, as the shell would read it."""
    (word,) = [w for w in shlex.split(shell, comments=True) if w.startswith("AIRFLOW_CONN_")]
    name, _, value = word.partition("=")
    return name, json.loads(value)


def test_the_readme_engine_example_runs_as_written(namespace: str, redis_url: str) -> None:
    """In a fresh interpreter, with only the connection the README exports (its namespace
    made unique, so the run leaves nothing behind)."""
    text = section(ROOT / "README.md", "## Use the engine")
    readme = [b for b in blocks(ROOT / "README.md") if b.code in text]
    ((shell,), (code,)) = ([b.code for b in readme if b.language == lang]
                           for lang in ("bash", "python"))
    name, connection = _exported_connection(shell)
    assert connection["conn_type"] == "llm_router"
    connection["extra"] = {**dict(connection.get("extra") or {}), "namespace": namespace}
    env = {**os.environ, name: json.dumps(connection)}
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, text=True,
                         capture_output=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "call gpt-small now"  # after Airflow's logs
    with closing(RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))) as client:
        stats = client.stats().models["gpt-small"]
    assert stats.in_flight == 0  # the example settled the lease it took
