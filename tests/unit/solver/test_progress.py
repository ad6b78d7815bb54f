"""The solver's progress line (solver/upkeep.py)."""

from __future__ import annotations

from airflow_llm_router.solver.upkeep import Progress


def test_the_progress_line_counts_the_prompts_not_yet_called() -> None:
    assert Progress(total=10, done=3, solved=2, calling=4).line() == \
        "solving: 3/10 done (2 solved), 4 calls in flight, 3 waiting"


def test_losing_hedged_calls_that_outlast_their_prompts_make_no_negative_count() -> None:
    """Every prompt done, two losing calls of hedged prompts still running (seen in a W3
    run's log as '-2 waiting')."""
    assert Progress(total=10, done=10, solved=10, calling=2).line() == \
        "solving: 10/10 done (10 solved), 2 calls in flight, 0 waiting"
