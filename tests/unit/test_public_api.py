"""The devkit and the benchmarks use the provider as any user would: through its faces.

A face is the provider's root package, one of its packages (``airflow_llm_router.engine``)
or ``airflow_llm_router.exceptions``; its public names are those in its ``__all__``, listed
in docs/architecture.md ("What each package exports"). An import of any other module of the
provider, or of a name a face does not list, fails here, naming the file and line.
Exceptions come from ``airflow_llm_router.exceptions`` alone.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_llm_router"
CLIENTS = ("devkit", "bench")

#: files or folders of the clients that may reach past the faces, and why
EXEMPT: dict[str, str] = {
    "bench/admission": "the engine micro-benchmark times the policy and the Lua scripts "
                       "one by one, below the clients",
    "bench/budget_cost.py": "compares the Lua scripts' cost at two commits by swapping "
                            "the engine's script loader",
    "bench/backlog_plans.py": "explains the task store's own statements with EXPLAIN, "
                              "composed as the store composes them",
    "bench/backlog.py": "counts the backlog beside the claimers as a drain's report does, "
                        "with the drain's cap and spacing",
}


def _face_path(module: str) -> Path | None:
    """The file of ``module`` if it is a face, else None."""
    parts = module.split(".")
    if parts[0] != "airflow_llm_router" or len(parts) > 2:
        return None
    if len(parts) == 1:
        return PACKAGE / "__init__.py"
    if parts[1] == "exceptions":
        return PACKAGE / "exceptions.py"
    path = PACKAGE / parts[1] / "__init__.py"
    return path if path.is_file() else None


def _public(module: str) -> set[str]:
    """The names in the face's ``__all__`` (read, not imported)."""
    path = _face_path(module)
    assert path is not None, module
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def _faces() -> list[str]:
    return ["airflow_llm_router", "airflow_llm_router.exceptions", *(
        f"airflow_llm_router.{path.parent.name}" for path in sorted(PACKAGE.glob("*/__init__.py")))]


def _problems(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    problems = []
    for node in ast.walk(ast.parse(path.read_text(), rel)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("airflow_llm_router") and not _face_path(alias.name):
                    problems.append(f"{rel}:{node.lineno} imports {alias.name}: not a face")
        elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
              and node.module.split(".")[0] == "airflow_llm_router"):
            if _face_path(node.module) is None:
                problems.append(f"{rel}:{node.lineno} imports from {node.module}: not a face")
                continue
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                if alias.name not in _public(node.module) and not (
                        node.module == "airflow_llm_router" and _face_path(name)):
                    problems.append(f"{rel}:{node.lineno} imports {name}: not in "
                                    f"{node.module}.__all__")
    return problems


def _client_files() -> list[Path]:
    return [path for client in CLIENTS for path in sorted((ROOT / client).rglob("*.py"))
            if "results" not in path.relative_to(ROOT).parts
            and not any(path.relative_to(ROOT).as_posix().startswith(e) for e in EXEMPT)]


def test_devkit_and_bench_import_only_public_names() -> None:
    files = _client_files()
    assert len(files) > 50  # the walk found the clients
    assert [p for path in files for p in _problems(path)] == []


@pytest.mark.parametrize("exempt", sorted(EXEMPT))
def test_every_exemption_names_a_file_that_exists(exempt: str) -> None:
    assert (ROOT / exempt).exists()


def test_faces_hand_on_no_exception() -> None:
    errors = _public("airflow_llm_router.exceptions")
    assert errors, "exceptions.py lists its errors in __all__"
    assert {face: sorted(_public(face) & errors) for face in _faces()
            if face != "airflow_llm_router.exceptions" and _public(face) & errors} == {}


def test_the_architecture_doc_lists_what_each_face_exports() -> None:
    """Each row of the doc's table is ``| `face` | `name`, `name`, ... |``."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("## What each package exports", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(airflow_llm_router[\w.]*)` \| ([^|]*) \|", section, re.M)
    listed = {face: set(re.findall(r"`([^`]+)`", names)) for face, names in rows}
    assert listed == {face: _public(face) for face in _faces() if _public(face)}
