"""Which models finish the last waiting prompts soonest: hand-computed cases."""

from __future__ import annotations

from airflow_llm_router.solver.tail import tail_models

# (latency s, rate calls/s)
FAST, MEDIUM, SLOW = (1.0, 10.0), (4.0, 10.0), (20.0, 2.0)


def test_few_prompts_left_skip_the_slow_model() -> None:
    # W=20: fast alone 20/10 + 1 = 3 s; + medium 20/20 + 4 = 5 s; + slow 20/22 + 20 = 20.9 s
    assert tail_models({"fast": FAST, "medium": MEDIUM, "slow": SLOW}, 20) == {"fast"}


def test_many_prompts_left_use_the_medium_model_too() -> None:
    # W=200: fast 21 s; fast+medium 10 + 4 = 14 s; all 200/22 + 20 = 29.1 s
    assert tail_models({"fast": FAST, "medium": MEDIUM, "slow": SLOW}, 200) == {"fast",
                                                                                 "medium"}


def test_a_long_queue_keeps_every_model() -> None:
    # W=5000: fast+medium 250 + 4 = 254 s; all 5000/22 + 20 = 247.3 s: the slow one pays
    assert tail_models({"fast": FAST, "medium": MEDIUM, "slow": SLOW}, 5000) is None


def test_unknown_or_disabled_models_do_not_count() -> None:
    models = {"fast": FAST, "slow": SLOW, "new": (None, 50.0), "off": (0.5, 0.0)}
    assert tail_models(models, 20) == {"fast"}  # the unknown one is not chosen blind
    assert tail_models({"fast": FAST, "new": (None, 50.0)}, 20) is None  # nothing to compare
    assert tail_models({"fast": FAST}, 20) is None  # one model: nothing to choose
    assert tail_models({"fast": FAST, "slow": SLOW}, 0) is None  # nothing waiting
