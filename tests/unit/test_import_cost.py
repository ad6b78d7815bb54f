"""What a task's start pays for: every task process of a DAG loads every plugin and imports
its DAG file, so what the plugin module and the operator and sensor modules import at
their top is paid by every task (the drain's lead, sensor and mapped solvers), on the path
from the DAG run's start to the first call. The solving triggers, the solver and its HTTP
client (aiohttp) load when a solving task runs; the plugin's app (FastAPI and the routes)
when the API server first reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Loaded by a task that runs a solver, never by importing the DAG-facing modules.
DEFERRED = ("aiohttp", "airflow_llm_router.backend", "airflow_llm_router.solver.runner",
            "airflow_llm_router.triggers.solve")

PROBE = """
import json, runpy, sys
import airflow.sdk
before = set(sys.modules)
{body}
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _imported(body: str, home: Path) -> set[str]:
    """The modules that ``body`` imports in a fresh interpreter, Airflow's SDK loaded first
    (a task process has it already)."""
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    done = subprocess.run([sys.executable, "-c", PROBE.format(body=body)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def _loaded(modules: set[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


def test_the_operator_and_sensor_modules_do_not_load_the_solver(tmp_path: Path) -> None:
    modules = _imported("import airflow_llm_router.operators.solve, "
                        "airflow_llm_router.operators.prompts, "
                        "airflow_llm_router.sensors.backpressure, "
                        "airflow_llm_router.triggers.backlog", tmp_path)
    assert "airflow_llm_router.operators.solve" in modules  # the probe saw the import
    assert [name for name in DEFERRED if _loaded(modules, name)] == []


def test_parsing_the_drain_dag_does_not_load_the_solver(tmp_path: Path) -> None:
    dag_file = ROOT / "example_dags" / "llm_router_drain.py"
    modules = _imported(f"runpy.run_path({str(dag_file)!r})", tmp_path)
    assert "airflow_llm_router.sensors.backpressure" in modules
    assert [name for name in DEFERRED if _loaded(modules, name)] == []


def test_the_solving_trigger_loads_the_solver_when_it_is_built(tmp_path: Path) -> None:
    modules = _imported("from airflow_llm_router.triggers import DrainTrigger",
                        tmp_path)
    assert _loaded(modules, "aiohttp")  # the probe tells a deferred import from a missing one


def test_loading_the_plugin_builds_no_app(tmp_path: Path) -> None:
    modules = _imported("import airflow_llm_router.plugins.llm_router", tmp_path)
    assert "airflow_llm_router.plugins.llm_router" in modules
    heavy = ("fastapi", "airflow_llm_router.web", *DEFERRED)
    assert [name for name in heavy if _loaded(modules, name)] == []


def test_the_plugins_app_is_built_on_the_first_read_and_kept(tmp_path: Path) -> None:
    modules = _imported(
        "from airflow_llm_router.plugins.llm_router import LLMRouterPlugin as P\n"
        "apps = P.fastapi_apps\n"
        "assert apps is P().fastapi_apps, 'one app, however it is read'\n"
        "assert [a['url_prefix'] for a in apps] == ['/llm-router']\n"
        "assert type(apps[0]['app']).__name__ == 'FastAPI'", tmp_path)
    assert _loaded(modules, "fastapi")
