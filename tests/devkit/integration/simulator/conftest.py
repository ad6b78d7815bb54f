"""Simulator servers on free ports, one per test, built from small inline profiles."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llm_router_devkit.simulator import SimulatorProfile, SimulatorServer
from tests.devkit.integration.simulator.helpers import ServeFactory


@pytest.fixture
def serve() -> Iterator[ServeFactory]:
    """Start a simulator for a profile given as keyword arguments; stopped after the test."""
    servers: list[SimulatorServer] = []

    def start(**profile: Any) -> SimulatorServer:
        server = SimulatorServer(SimulatorProfile.model_validate(profile))
        servers.append(server.start())
        return server

    yield start
    for server in servers:
        server.stop()
