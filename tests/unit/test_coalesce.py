"""The coalescing primitive: one call per batch, each submitter its own result or error."""

from __future__ import annotations

import asyncio
import logging

import pytest

from airflow_llm_router.coalesce import Coalescer


class Recorder:
    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[tuple[str, list[int]]] = []
        self.fail = fail

    async def send(self, key: str, items: list[int]) -> list[int]:
        self.calls.append((key, list(items)))
        if self.fail is not None:
            raise self.fail
        return [i * 10 for i in items]


async def test_items_of_one_loop_turn_go_in_one_call_per_key() -> None:
    rec = Recorder()
    c: Coalescer[str, int, int] = Coalescer(rec.send)
    results = await asyncio.gather(*(c.submit("a" if i % 2 else "b", i) for i in range(6)))
    assert results == [0, 10, 20, 30, 40, 50]
    assert sorted(rec.calls) == [("a", [1, 3, 5]), ("b", [0, 2, 4])]
    assert c.calls == 2


async def test_max_size_splits_by_weight_and_a_heavy_item_goes_alone() -> None:
    rec = Recorder()
    c: Coalescer[str, int, int] = Coalescer(rec.send, max_size=4, size=lambda i: i)
    await asyncio.gather(*(c.submit("k", i) for i in (1, 2, 1, 3, 9, 1)))
    assert [items for _, items in rec.calls] == [[1, 2, 1], [3], [9], [1]]


async def test_delay_keeps_the_batch_open_for_later_submitters() -> None:
    rec = Recorder()
    c: Coalescer[str, int, int] = Coalescer(rec.send, delay_s=0.05)
    first = asyncio.ensure_future(c.submit("k", 1))
    await asyncio.sleep(0)  # a later loop turn, still within the delay
    second = asyncio.ensure_future(c.submit("k", 2))
    assert await asyncio.gather(first, second) == [10, 20]
    assert rec.calls == [("k", [1, 2])]


async def test_a_full_batch_is_sent_before_its_delay() -> None:
    rec = Recorder()
    c: Coalescer[str, int, int] = Coalescer(rec.send, delay_s=3600, max_size=2)
    assert await asyncio.wait_for(asyncio.gather(c.submit("k", 1), c.submit("k", 2)), 5) \
        == [10, 20]


async def test_every_submitter_of_a_failed_call_sees_the_error() -> None:
    c: Coalescer[str, int, int] = Coalescer(Recorder(fail=ConnectionError("down")).send)
    results = await asyncio.gather(c.submit("k", 1), c.submit("k", 2),
                                   return_exceptions=True)
    assert [type(r) for r in results] == [ConnectionError, ConnectionError]


async def test_a_short_reply_is_an_error_not_a_silent_loss() -> None:
    async def short(key: str, items: list[int]) -> list[int]:
        return items[:-1]

    c: Coalescer[str, int, int] = Coalescer(short)
    results = await asyncio.gather(c.submit("k", 1), c.submit("k", 2),
                                   return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)


async def test_fire_and_forget_failures_are_logged_once_per_call(
        caplog: pytest.LogCaptureFixture) -> None:
    c: Coalescer[str, int, int] = Coalescer(Recorder(fail=ConnectionError("down")).send,
                                            name="stamps")
    with caplog.at_level(logging.WARNING, logger="airflow_llm_router.coalesce"):
        futures = [c.submit_nowait("k", i) for i in range(3)]
        await c.aclose()
    assert all(isinstance(f.exception(), ConnectionError) for f in futures)
    warnings = [r for r in caplog.records if "stamps" in r.getMessage()]
    assert len(warnings) == 1 and "3 item(s)" in warnings[0].getMessage()


async def test_aclose_sends_open_batches_and_waits() -> None:
    rec = Recorder()
    c: Coalescer[str, int, int] = Coalescer(rec.send, delay_s=3600)
    future = c.submit_nowait("k", 7)
    assert c.pending == 1
    await c.aclose()
    assert future.result() == 70 and c.pending == 0


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="delay_s"):
        Coalescer(Recorder().send, delay_s=-1)
    with pytest.raises(ValueError, match="max_size"):
        Coalescer(Recorder().send, max_size=0)
