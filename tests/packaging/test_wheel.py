"""The installed provider holds only what production runs: the wheel's files and imports."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_llm_router"


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(ROOT)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    (wheel,) = out.glob("airflow_llm_router-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_wheel_holds_the_provider_alone(wheel_files: list[str]) -> None:
    outside = [f for f in wheel_files
               if not f.startswith(("airflow_llm_router/", "airflow_llm_router-"))]
    assert outside == []
    devkit = [f for f in wheel_files
              if any(part in f for part in ("simulator", "/demo/", "devkit", "stack.py"))]
    assert devkit == []


def test_the_wheel_carries_the_lua_scripts_and_the_plugin_page(wheel_files: list[str]) -> None:
    assert "airflow_llm_router/engine/lua/admit.lua" in wheel_files
    assert "airflow_llm_router/engine/lua/lib/capacity.lua" in wheel_files
    assert "airflow_llm_router/plugins/static/index.html" in wheel_files
    assert any(f.endswith("entry_points.txt") for f in wheel_files)


def test_the_wheel_says_it_is_typed_and_carries_its_license(wheel_files: list[str]) -> None:
    """Type checkers read the provider's hints only with ``py.typed`` (PEP 561); the
    Apache-2.0 licence the metadata declares travels with the code."""
    assert "airflow_llm_router/py.typed" in wheel_files
    assert any(f.endswith(".dist-info/licenses/LICENSE") for f in wheel_files)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_provider_module_imports_the_devkit() -> None:
    offenders = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in PACKAGE.rglob("*.py")
        for name in _imports(path)
        if name == "llm_router_devkit" or name.startswith("llm_router_devkit.")
    )
    assert offenders == []
