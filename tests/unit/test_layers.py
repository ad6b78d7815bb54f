"""Imports run one way: from a higher layer of the provider to a lower one, never back.

The table below is the architecture (``docs/architecture.md`` explains it). Each module of
``airflow_llm_router`` belongs to the layer of its top-level package or module; a module may
import from its own package and from lower layers; the three packages of layer 1 are
independent of each other. The command line (``cli/``) is the top layer: nothing imports it.
Every ``__main__`` module is an entry point, above everything.
Imports inside functions count too: a late import hides a cycle, it does not remove it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_llm_router"

#: top-level package or module of ``airflow_llm_router`` -> layer (0 = foundation)
LAYERS: dict[str, int] = {
    "__init__": 0, "exceptions": 0, "names": 0, "tokens": 0, "coalesce": 0, "pg": 0,
    "cli_parser": 0, "llm_call": 0,
    "get_provider_info": 0,
    "engine": 1, "store": 1, "backend": 1,
    "quotas": 2, "metrics": 2,
    "solver": 3,
    "hooks": 4,
    "triggers": 5,
    "operators": 6, "sensors": 6, "web": 6,
    "plugins": 7,
    "cli": 8,
}
ENTRY_POINT = 99
#: layer-1 packages must not import each other
INDEPENDENT = {"engine", "store", "backend"}


def _part(module: str) -> str | None:
    """The top-level part of ``airflow_llm_router.<part>...``, or None for other modules."""
    head, _, rest = module.partition(".")
    if head != "airflow_llm_router":
        return None
    return rest.split(".")[0] if rest else "__init__"


def _is_module(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


def _imports(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "airflow_llm_router":  # a submodule, or a name of the root
                found += [(node.lineno, f"airflow_llm_router.{a.name}" if _is_module(a.name)
                           else "airflow_llm_router") for a in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


def _violations() -> list[str]:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        part = rel.parts[0].removesuffix(".py")
        if part not in LAYERS:
            problems.append(f"{rel}: {part!r} has no layer in LAYERS")
            continue
        layer = ENTRY_POINT if path.name == "__main__.py" else LAYERS[part]
        for line, name in _imports(path):
            target = _part(name)
            if target is None or target == part:
                continue
            if target not in LAYERS:
                problems.append(f"{rel}:{line} imports {name}: no layer for {target!r}")
            elif LAYERS[target] > layer:
                problems.append(f"{rel}:{line} (layer {layer}) imports {name} "
                                f"(layer {LAYERS[target]})")
            elif part in INDEPENDENT and target in INDEPENDENT:
                problems.append(f"{rel}:{line} imports {name}: layer-1 packages are "
                                "independent of each other")
    return problems


def test_imports_run_from_higher_layers_to_lower_ones() -> None:
    assert _violations() == []


@pytest.mark.parametrize("part", sorted(LAYERS))
def test_every_layer_entry_exists(part: str) -> None:
    assert (PACKAGE / part).is_dir() or (PACKAGE / f"{part}.py").is_file()
