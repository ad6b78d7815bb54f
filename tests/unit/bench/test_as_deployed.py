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
