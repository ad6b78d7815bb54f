"""``scripts/test`` stops at the first step that fails, before the suite: run on a copy of
the checkout's scripts whose tools are stand-ins that record they ran."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _checkout(tmp_path: Path, litellm_venv: str) -> Path:
    """A copy of ``scripts/test`` beside stand-in services, LiteLLM set-up (running
    ``litellm_venv``) and virtualenv (each of its tools writes its name to ``ran``)."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test", root / "scripts" / "test")
    _tool(root / "scripts" / "services.sh", "exit 0")
    _tool(root / "scripts" / "litellm_venv.sh", litellm_venv)
    for name in ("python", "pip", "ruff", "mypy"):
        _tool(root / ".venv" / "bin" / name, f'echo {name} >> "{root}/ran"')
    # the suite's stand-in also notes the LiteLLM virtualenv it was given
    _tool(root / ".venv" / "bin" / "python",
          f'echo python >> "{root}/ran"; echo "$LLMR_LITELLM_VENV" > "{root}/litellm"')
    return root


def _run(root: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LLMR_LITELLM_VENV", "LLMR_VENV")}
    return subprocess.run(["bash", str(root / "scripts" / "test")], env=env, cwd=root,
                           capture_output=True, text=True, timeout=60, check=False)


def test_a_litellm_virtualenv_that_cannot_be_made_stops_the_run(tmp_path: Path) -> None:
    root = _checkout(tmp_path, 'echo "error: could not install litellm" >&2; exit 2')
    done = _run(root)
    assert done.returncode == 2, done
    assert "error: could not install litellm" in done.stderr
    assert (root / "ran").read_text().split() == ["pip"]  # nothing after the set-up


def test_a_made_litellm_virtualenv_is_used_and_the_suite_runs(tmp_path: Path) -> None:
    root = _checkout(tmp_path, f'echo "{tmp_path}/litellm"')
    done = _run(root)
    assert done.returncode == 0, done
    assert (root / "ran").read_text().split() == ["pip", "ruff", "mypy", "python"]
    assert (root / "litellm").read_text() == f"{tmp_path}/litellm\n"
