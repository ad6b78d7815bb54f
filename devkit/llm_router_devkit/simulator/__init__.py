"""A simulated Models Backend: ``/single`` and ``/batch`` with provider limits and faults.

Used by the demo, the tests and the benchmark to check, from the backend's side, that the
router keeps each model's traffic under its limits. Never used by production DAGs.
See ``docs/simulator.md``.
"""

from __future__ import annotations

from airflow_llm_router import count_input_tokens
from llm_router_devkit.simulator.app import create_app
from llm_router_devkit.simulator.profile import ModelProfile, ProviderLimits, SimulatorProfile
from llm_router_devkit.simulator.provider import SimulatedBackend
from llm_router_devkit.simulator.server import SimulatorProcess, SimulatorServer

__all__ = [
    "ModelProfile",
    "ProviderLimits",
    "SimulatedBackend",
    "SimulatorProcess",
    "SimulatorProfile",
    "SimulatorServer",
    "count_input_tokens",
    "create_app",
]
