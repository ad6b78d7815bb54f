"""The code in the README and docs/ works as written: a reader copies it first.

The README's engine example runs whole, in a fresh interpreter, with the connection its
shell block exports (only the namespace is made unique, so the run leaves nothing behind).
Every Python block of the docs parses, and every name it imports from the provider or the
devkit exists there: modules move and names go, and a snippet is where that shows last.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_llm_router.engine import RouterClient, RouterSettings

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def _blocks(path: Path, language: str) -> list[tuple[int, str]]:
    text = path.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(2))
            for m in FENCE.finditer(text) if m.group(1) == language]


def _section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


PYTHON_BLOCKS = [pytest.param(path, line, code, id=f"{path.name}:{line}")
                 for path in DOCS for line, code in _blocks(path, "python")]
OUR_PACKAGES = ("airflow_llm_router", "llm_router_devkit")


def test_the_docs_hold_python_snippets() -> None:
    assert len(PYTHON_BLOCKS) >= 10


@pytest.mark.parametrize(("path", "line", "code"), PYTHON_BLOCKS)
def test_a_snippet_parses_and_imports_only_what_exists(path: Path, line: int,
                                                        code: str) -> None:
    tree = ast.parse(code, f"{path.name}:{line}")
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
    assert missing == [], f"{path.name}:{line} imports names that do not exist"


def _exported_connection(shell: str) -> tuple[str, dict[str, Any]]:
    """The ``export NAME='json'`` of a README shell block, as the shell would read it."""
    (word,) = [w for w in shlex.split(shell, comments=True) if w.startswith("AIRFLOW_CONN_")]
    name, _, value = word.partition("=")
    return name, json.loads(value)


def test_the_readme_engine_example_runs_as_written(namespace: str, redis_url: str) -> None:
    section = _section(ROOT / "README.md", "## Use the engine")
    ((_, shell),) = _blocks_of(section, "bash")
    ((_, code),) = _blocks_of(section, "python")
    name, connection = _exported_connection(shell)
    assert connection["conn_type"] == "llm_router"
    connection["extra"] = {**dict(connection.get("extra") or {}), "namespace": namespace}
    env = {**os.environ, name: json.dumps(connection)}
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, text=True,
                         capture_output=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "call gpt-small now"  # after Airflow's logs
    client = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    stats = client.stats().models["gpt-small"]
    assert stats.in_flight == 0  # the example settled the lease it took


def _blocks_of(text: str, language: str) -> list[tuple[int, str]]:
    return [(text.count("\n", 0, m.start()) + 1, m.group(2))
            for m in FENCE.finditer(text) if m.group(1) == language]
