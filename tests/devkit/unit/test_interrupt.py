"""SIGTERM as an interrupt: raised where the main thread is, or, while an event loop runs
there, between two steps of its tasks."""

from __future__ import annotations

import asyncio
import signal

import pytest

from llm_router_devkit.interrupt import Terminated, sigterm_as_interrupt


def test_sigterm_raises_terminated_where_the_main_thread_is() -> None:
    with pytest.raises(Terminated), sigterm_as_interrupt():
        signal.raise_signal(signal.SIGTERM)


def test_sigterm_while_an_event_loop_runs_stops_it_between_steps() -> None:
    """``dag.test()`` runs a trigger inline under ``asyncio.run()``. A SIGTERM raised inside
    the task that happened to run (in the demo, mid-write of a Redis command) cut its step
    short, and asyncio raised the interrupt out of the loop again from each task it reached;
    the second exit cut the shutdown short and the loop closed with the drain still
    unwinding ("coroutine ignored GeneratorExit" on stderr, claims left claimed). Raised
    between steps, it stops the loop once and ``asyncio.run()`` cancels the task, whose
    clean-up runs to its end."""
    steps: list[str] = []

    async def drain() -> None:
        try:
            signal.raise_signal(signal.SIGTERM)  # its handler runs before this returns
            steps.append("the step went on")
            await asyncio.Event().wait()  # until asyncio.run()'s shutdown cancels it
        finally:
            await asyncio.sleep(0)  # a clean-up that awaits, as a drain's does
            steps.append("cleaned up")

    with pytest.raises(Terminated), sigterm_as_interrupt():
        asyncio.run(drain())
    assert steps == ["the step went on", "cleaned up"]
