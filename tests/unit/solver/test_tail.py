"""Which models finish the last prompts soonest: hand-computed cases."""

from __future__ import annotations

from airflow_llm_router.solver.tail import ModelPace, tail_models

FAST, MEDIUM, SLOW = ModelPace(1.0, 10.0), ModelPace(4.0, 10.0), ModelPace(20.0, 2.0)
THREE = {"slow": SLOW, "fast": FAST, "medium": MEDIUM}


def test_few_prompts_left_skip_the_slow_models() -> None:
    # W=20: fast alone 20/10 + 1 = 3 s; + medium 20/20 + 4 = 5 s; + slow 20/22 + 20 = 20.9 s
    assert tail_models(THREE, 20) == ("fast",)


def test_more_prompts_left_use_the_medium_model_too_fastest_first() -> None:
    # W=200: fast 21 s; fast+medium 10 + 4 = 14 s; all 200/22 + 20 = 29.1 s
    assert tail_models(THREE, 200) == ("fast", "medium")


def test_a_long_backlog_keeps_every_model_and_the_fair_share() -> None:
    # W=5000: fast+medium 250 + 4 = 254 s; all 5000/22 + 20 = 247.3 s: the slow one pays
    assert tail_models(THREE, 5000) is None


def test_a_full_fast_model_widens_the_set_until_one_has_room() -> None:
    full = ModelPace(1.0, 10.0, room=False)
    assert tail_models({**THREE, "fast": full}, 20) == ("fast", "medium")


def test_unknown_or_disabled_models_do_not_count() -> None:
    models = {**THREE, "new": ModelPace(None, 50.0), "off": ModelPace(0.5, 0.0)}
    assert tail_models(models, 20) == ("fast",)  # the unknown one is not chosen blind
    assert tail_models({"fast": FAST, "new": ModelPace(None, 50.0)}, 20) is None
    assert tail_models({"fast": FAST}, 20) is None  # one model: nothing to choose
    assert tail_models(THREE, 0) is None  # nothing left
