"""Helpers shared by the simulator's HTTP tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llm_router_devkit.simulator import SimulatorServer

ServeFactory = Callable[..., SimulatorServer]


def model(name: str, **fields: Any) -> dict[str, Any]:
    """A model with a fixed latency (sigma 0, no tail) unless told otherwise."""
    median = fields.pop("median_s", 1.0)
    return {
        "name": name,
        "median_s": median,
        "sigma": 0.0,
        "min_s": median,
        "max_s": median,
        "tail_rate": 0.0,
        "token_elasticity": 0.0,
        **fields,
    }
