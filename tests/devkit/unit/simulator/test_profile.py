"""Profile validation, the default models, and loading from a JSON file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from llm_router_devkit.simulator.profile import SimulatorProfile


def test_default_has_ten_models_spanning_seconds_to_minutes() -> None:
    profile = SimulatorProfile.default()
    assert len(profile.models) == 10
    medians = sorted(m.median_s for m in profile.models)
    assert medians[0] <= 2 and medians[-1] >= 30
    assert max(m.max_s for m in profile.models) == 120
    assert min(m.min_s for m in profile.models) <= 1
    assert any(m.max_concurrency is None for m in profile.models)
    assert profile.window_s == 60 and profile.scaled_window_s == 60


def test_time_scale_divides_the_window() -> None:
    assert SimulatorProfile.default(time_scale=60).scaled_window_s == pytest.approx(1.0)


def test_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    profile = SimulatorProfile.default(time_scale=60, seed=3, error_rate=0.1)
    path.write_text(profile.to_json())
    assert SimulatorProfile.from_file(path) == profile


def test_minimal_json_uses_defaults() -> None:
    profile = SimulatorProfile.from_json('{"models": [{"name": "m", "median_s": 2}]}')
    model = profile.models[0]
    assert (model.rpm, model.tpm, model.max_concurrency) == (None, None, None)
    assert profile.time_scale == 1.0


def test_with_overrides_ignores_none() -> None:
    profile = SimulatorProfile.default().with_overrides(time_scale=600, seed=None)
    assert (profile.time_scale, profile.seed) == (600, 0)


def _model(**changes: Any) -> dict[str, Any]:
    return {"name": "m", "median_s": 2.0, **changes}


@pytest.mark.parametrize(
    "data",
    [
        {"models": []},
        {"time_scale": 0, "models": [_model()]},
        {"window_s": -1, "models": [_model()]},
        {"error_rate": 0.6, "timeout_rate": 0.5, "models": [_model()]},
        {"error_rate": 0.4, "timeout_rate": 0.3, "truncate_rate": 0.4, "models": [_model()]},
        {"truncate_rate": -0.1, "models": [_model()]},
        {"models": [_model(), _model()]},
        {"models": [_model(median_s=200)]},
        {"models": [_model(min_s=3, max_s=2)]},
        {"models": [_model(rpm=0)]},
        {"models": [_model(output_tokens_min=10, output_tokens_max=5)]},
        {"models": [_model(colour="red")]},
        {"unknown": 1, "models": [_model()]},
    ],
)
def test_invalid_profiles_are_rejected(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        SimulatorProfile.model_validate(data)
