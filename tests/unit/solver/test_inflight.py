"""The drain's prompts in flight: each that ends is reported once, as it ends, and leaves
the set, however many are in flight (the drain no longer waits on the whole set for each
answer)."""

from __future__ import annotations

import asyncio

from airflow_llm_router.solver.inflight import InFlight


async def test_each_task_is_reported_once_when_it_ends() -> None:
    gates = [asyncio.Event() for _ in range(5)]

    async def prompt(k: int) -> int:
        await gates[k].wait()
        return k

    tasks = [asyncio.create_task(prompt(k)) for k in range(5)]
    ended: InFlight[int] = InFlight()
    ended.add(tasks)
    assert await ended.wait(0.05) == []  # none ended: the wait times out empty
    gates[3].set()
    gates[1].set()
    got = await ended.wait(5.0)
    got += await ended.wait(0.05) if len(got) < 2 else []
    assert sorted(t.result() for t in got) == [1, 3]
    for gate in gates:
        gate.set()
    seen: list[asyncio.Task[int]] = []
    while len(seen) < 3:
        seen += await ended.wait(5.0)
    assert sorted(t.result() for t in seen) == [0, 2, 4]
    assert await ended.wait(0.05) == []


async def test_a_task_that_ended_before_it_was_watched_is_reported() -> None:
    async def quick() -> str:
        return "done"

    task = asyncio.create_task(quick())
    await task
    ended: InFlight[str] = InFlight()
    ended.add([task])
    assert await ended.wait(5.0) == [task]


async def test_a_wait_cancelled_as_a_task_ends_is_cancelled() -> None:
    # the drain's cancellation (a SIGTERM, the trigger's end) must not be lost when it comes
    # as the wait ends: asyncio.wait_for loses it before Python 3.12 (the drain then ran on)
    lost = []
    for steps in range(8):  # cancel at each point of the end's path through the loop
        gate = asyncio.Event()

        async def prompt(gate: asyncio.Event = gate) -> None:
            await gate.wait()

        task = asyncio.create_task(prompt())
        flight: InFlight[None] = InFlight()
        flight.add([task])
        waiting = asyncio.create_task(flight.wait(10.0))
        await asyncio.sleep(0)
        gate.set()
        for _ in range(steps):
            await asyncio.sleep(0)
        if waiting.done():  # the wait ended before the cancellation: nothing to lose
            continue
        waiting.cancel()
        try:
            await waiting
            lost.append(steps)
        except asyncio.CancelledError:
            pass
    assert lost == []
