"""The benchmarks measure the router as deployed: no benchmark passes a routing setting
(``ROUTING_FIELDS``) other than its default, whether as a ``RouterSettings`` argument, a
connection's extra or any other keyword or key of that name."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_llm_router.engine.types import ROUTING_FIELDS, RouterSettings

BENCH = Path(__file__).resolve().parents[3] / "bench"
DEFAULTS = RouterSettings()
#: The settings that are not routing (types.py says why): a new setting must be put on
#: one side or the other.
NOT_ROUTING = {"namespace", "guard_ms", "guard_share", "http_hop_ms", "lease_ttl_s",
               "replicas_to_wait", "replica_wait_ms"}


def _is_default(field: str, value: ast.expr) -> bool:
    """``value`` is the field's default: a literal equal to it, or
    ``RouterSettings().<field>``."""
    try:
        return bool(ast.literal_eval(value) == getattr(DEFAULTS, field))
    except ValueError:
        pass
    return (isinstance(value, ast.Attribute) and value.attr == field
            and isinstance(value.value, ast.Call) and not value.value.args
            and not value.value.keywords
            and getattr(value.value.func, "id", None) == "RouterSettings")


def routing_set(source: str, name: str = "<source>") -> Iterator[str]:
    """Where ``source`` passes a routing setting other than its default:
    ``"<name>:<line>: <field>"`` for each keyword argument, dict key or subscript store of a
    routing field's name, and each ``**`` expansion into ``RouterSettings``."""
    for node in ast.walk(ast.parse(source)):
        pairs: list[tuple[str, ast.expr | None]] = []
        if isinstance(node, ast.Call):
            pairs += [(k.arg, k.value) for k in node.keywords if k.arg in ROUTING_FIELDS]
            if getattr(node.func, "id", None) == "RouterSettings":
                pairs += [("**", None) for k in node.keywords if k.arg is None]
        elif isinstance(node, ast.Dict):
            pairs += [(k.value, v) for k, v in zip(node.keys, node.values, strict=True)
                      if isinstance(k, ast.Constant) and k.value in ROUTING_FIELDS]
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                key = getattr(target, "slice", None)
                if (isinstance(target, ast.Subscript) and isinstance(key, ast.Constant)
                        and key.value in ROUTING_FIELDS):
                    pairs.append((key.value, node.value))
        for field, value in pairs:
            if value is None or not _is_default(field, value):
                yield f"{name}:{node.lineno}: {field}"


def test_every_setting_is_routing_or_not() -> None:
    fields = set(RouterSettings.model_fields)
    assert fields >= ROUTING_FIELDS
    assert fields - ROUTING_FIELDS == NOT_ROUTING, (
        "a new router setting: add it to ROUTING_FIELDS (engine/types.py) if it decides "
        "which model a request takes or when it waits, else to NOT_ROUTING here")


@pytest.mark.parametrize("source", [
    "RouterSettings(namespace='x', starve_ms=5000)",
    "conn = {'extra': {'namespace': 'x', 'hot_share': 1.0}}",
    "extra['jitter'] = 0",
    "RouterSettings(**overrides)",
    "RouterSettings(namespace='x', max_wait_ms=args.max_wait)",
])
def test_the_check_finds_a_routing_setting_passed(source: str) -> None:
    assert list(routing_set(source))


@pytest.mark.parametrize("source", [
    "RouterSettings(namespace='x', lease_ttl_s=60, guard_ms=250)",
    "conn = {'extra': {'namespace': 'x', 'hot_share': 0.8}}",
    "RouterSettings(namespace='x', starve_ms=RouterSettings().starve_ms)",
])
def test_a_default_or_a_setting_that_is_not_routing_passes(source: str) -> None:
    assert not list(routing_set(source))


def test_no_benchmark_sets_a_routing_setting_a_deployment_does_not_have() -> None:
    files = sorted(p for p in BENCH.rglob("*.py") if "results" not in p.parts)
    assert len(files) > 20, BENCH  # the benchmarks were found
    found = [hit for p in files
             for hit in routing_set(p.read_text(), str(p.relative_to(BENCH.parent)))]
    assert not found, (
        "a benchmark must run the router at a deployment's defaults (ROUTING_FIELDS): "
        f"drop these or change the default for everyone: {found}")


# --- Airflow as deployed: the product-path harness (bench.e2e and the devkit's stack) ---

#: The stack's settings that say where things are and who logs in, not how Airflow runs:
#: a deployment sets each of them too, to its own values.
PLACEMENT = {
    "AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW__CORE__EXECUTOR", "AIRFLOW__CORE__PARALLELISM",
    "AIRFLOW__CORE__LOAD_EXAMPLES", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
    "AIRFLOW__API__HOST", "AIRFLOW__API__PORT", "AIRFLOW__API__BASE_URL",
    "AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS",
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE",
}
#: Settings a deployment runs at Airflow's defaults and a harness is tempted to change:
#: the log level (deployments log INFO) and the API server's workers.
NEVER_SET = {"AIRFLOW__LOGGING__LOGGING_LEVEL", "AIRFLOW__API__WORKERS"}


def _airflow_settings(tmp_path: Path) -> dict[str, str]:
    """What the product-path benchmark's stack gives Airflow (``AirflowStack.env`` with
    ``bench.e2e``'s additions), without starting it."""
    from bench.e2e.services import airflow_settings
    from llm_router_devkit.stack import AirflowStack

    stack = AirflowStack(home=tmp_path, dags_folder=tmp_path, sql_alchemy_conn="postgresql://",
                         connections={}, extra_env=airflow_settings(20))
    return {k: v for k, v in stack.env().items() if k.startswith("AIRFLOW__")}


def test_the_product_path_runs_airflow_at_its_defaults(tmp_path: Path) -> None:
    from bench.e2e.services import airflow_settings
    from llm_router_devkit.stack import WORKAROUNDS

    settings = _airflow_settings(tmp_path)
    assert set(settings) >= PLACEMENT  # the environment was read
    assert not NEVER_SET & set(settings)
    documented = set(WORKAROUNDS) | set(airflow_settings(20))
    assert set(settings) - PLACEMENT <= documented, (
        "a setting beyond Airflow's defaults: drop it, or put it in the stack's "
        "WORKAROUNDS (or bench.e2e's airflow_settings) with the reason")


def test_each_setting_the_harness_needs_is_explained_in_the_method() -> None:
    from bench.e2e.services import airflow_settings
    from llm_router_devkit.stack import WORKAROUNDS

    method = (BENCH.parent / "docs" / "benchmarks.md").read_text()
    missing = [k for k in (*WORKAROUNDS, *airflow_settings(20)) if k not in method]
    assert not missing, f"docs/benchmarks.md, 'The method', must say why: {missing}"


def quota_writes(source: str, name: str = "<source>") -> Iterator[str]:
    """Where ``source`` writes quotas into Redis itself (a router client's ``set_quota``,
    ``delete_quota``, ``sync_quotas``), past the quota store."""
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"set_quota", "delete_quota", "sync_quotas"}):
            yield f"{name}:{node.lineno}: {node.func.attr}"


@pytest.mark.parametrize(("source", "hits"), [
    ("router.set_quota('m', q)", 1), ("svc.router.delete_quota('m')", 1),
    ("quotas.put('m', q, actor='a')", 0), ("quotas.load(qs, actor='a')", 0),
])
def test_the_check_finds_a_quota_written_past_the_store(source: str, hits: int) -> None:
    assert len(list(quota_writes(source))) == hits


def test_the_product_path_loads_its_quotas_as_a_deployment_does() -> None:
    files = sorted((BENCH / "e2e").glob("*.py"))
    assert any(p.name == "services.py" for p in files), BENCH
    found = [hit for p in files
             for hit in quota_writes(p.read_text(), str(p.relative_to(BENCH.parent)))]
    assert not found, (
        "bench.e2e sets quotas through its QuotaStore (stored, audited, pushed with the "
        f"sync marker), as 'llm-router quotas load' does: {found}")
