"""A simulated Models Backend: ``/single`` and ``/batch`` with provider limits and faults.

Used by the demo, the tests and the benchmark to check, from the backend's side, that the
router keeps each model's traffic under its limits. Never used by production DAGs.
See ``docs/simulator.md``.
"""

from __future__ import annotations

from airflow_llm_router.simulator.app import create_app
from airflow_llm_router.simulator.backend import SimulatedBackend
from airflow_llm_router.simulator.profile import ModelProfile, ProviderLimits, SimulatorProfile
from airflow_llm_router.simulator.server import SimulatorProcess, SimulatorServer
from airflow_llm_router.simulator.workload import count_input_tokens

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
