"""The simulator in a process of its own (:class:`SimulatorProcess`): a start that does
not complete leaves no process behind."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from llm_router_devkit.simulator import SimulatorProcess, SimulatorProfile
from tests.devkit.integration.interrupting_child import interrupting_child, running

pytestmark = pytest.mark.timeout(60)


def test_it_serves_and_stops() -> None:
    with SimulatorProcess(SimulatorProfile.default()) as sim:
        assert httpx.get(f"{sim.url}/health", timeout=10).status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{sim.url}/health", timeout=10)


def test_an_interrupt_while_it_starts_leaves_it_not_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with interrupting_child(tmp_path / "python") as pid_file:
        monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
        sim = SimulatorProcess(SimulatorProfile.default())
        with pytest.raises(KeyboardInterrupt):
            sim.start()
        monkeypatch.undo()
        assert not running(int(pid_file.read_text()))
