"""Router quotas for the demo: the simulator's provider limits, on the same (scaled) window."""

from __future__ import annotations

from typing import Any

from llm_router_devkit.simulator.profile import SimulatorProfile

__all__ = ["UNLIMITED", "router_quotas"]

#: Stands for a limit the provider does not set (the router needs a number).
UNLIMITED = 1_000_000_000


def router_quotas(profile: SimulatorProfile) -> dict[str, dict[str, Any]]:
    """One quota per model: rpm, tpm and max_concurrency equal to the provider's (a null
    limit becomes :data:`UNLIMITED`), over the simulator's wall-clock window
    (``window_s / time_scale``), so the router's targets are exactly the backend's limits.

    The first output-token estimate is twice the model's mean (conservative until the
    engine has learned the real P95 from settled calls). The latency prior is the model's
    median latency (wall clock), what a platform team would configure from the provider's
    figures: the advice and the engine's finish-time choice of model use it until the
    first calls are observed.
    """
    window = profile.scaled_window_s
    return {
        m.name: {
            "rpm": m.rpm or UNLIMITED,
            "tpm": m.tpm or UNLIMITED,
            "max_concurrency": m.max_concurrency or UNLIMITED,
            "window_s": window,
            "expected_output_tokens": min(2 * m.output_tokens_mean, m.output_tokens_max),
            "expected_latency_s": m.median_s * profile.slowdown / profile.time_scale,
        }
        for m in profile.models
    }
