"""Estimates per task kind: learned per (model, kind), trusted after a few calls, bounded in
number and forgotten after a day (lib/kinds.lua), against real Redis."""

from __future__ import annotations

import math
import statistics
from statistics import NormalDist

import pytest
import redis

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.keys import RouterKeys
from airflow_llm_router.engine.types import Admission, Wait

BIG = {"rpm": 100_000, "tpm": 10**9, "max_concurrency": 10_000, "expected_output_tokens": 100}


def _calls(router: RouterClient, kind: str | None, outputs: list[int], model: str = "a",
           ) -> None:
    for out in outputs:
        lease = router.admit(input_tokens=10, models=[model], kind=kind)
        assert isinstance(lease, Admission)
        router.complete(lease.lease_id, 10, out)


def _reserved(router: RouterClient, kind: str | None, model: str = "a") -> int:
    """Output tokens one admission of ``kind`` reserves now (left in flight)."""
    before = router.stats().models[model].tokens
    lease = router.admit(input_tokens=10, models=[model], kind=kind)
    assert isinstance(lease, Admission)
    return router.stats().models[model].tokens - before - 10


def test_each_kind_reserves_its_own_percentile(router: RouterClient) -> None:
    router.set_quota("a", BIG)
    router.set_quota("b", BIG)
    _calls(router, "summary", [20] * 10)
    _calls(router, "essay", [800] * 10)
    stats = router.stats().models["a"]
    assert stats.output_estimate == 800  # the model's mix: the essays' share is > 5 %
    assert {k: (v.output_estimate, v.observed) for k, v in stats.kinds.items()} == {
        "summary": (20, 10), "essay": (800, 10)}
    assert stats.kinds["summary"].latency_ms is not None
    # the first essays wrote far past the model's estimate then (20): the mean excess
    # rose, and every estimated reservation carries it
    extra = math.ceil(stats.excess_tokens)
    assert extra > 0
    assert _reserved(router, "summary") == 20 + extra
    assert _reserved(router, "essay") == 800 + extra
    assert _reserved(router, None) == 800 + extra
    # a kind learned on one model says nothing of another
    assert _reserved(router, "summary", model="b") == 100
    assert router.stats().models["b"].kinds == {}


def test_a_new_kind_reserves_at_least_the_models_estimate_until_trusted(
        router: RouterClient) -> None:
    router.set_quota("a", {**BIG, "expected_output_tokens": 500})
    _calls(router, None, [500] * 10)
    _calls(router, "short", [5] * 7)
    assert router.stats().models["a"].excess_tokens == 0  # nothing wrote past its reservation
    assert _reserved(router, "short") == 500  # 7 calls: not yet its own
    _calls(router, "short", [5])
    assert _reserved(router, "short") == 5  # 8 calls: trusted


def test_calls_writing_past_their_reservation_raise_the_next_ones(
        router: RouterClient) -> None:
    """The mean excess (EWMA, alpha 0.05, 0 for calls within their reservation) is added to
    every reservation the engine estimates, and decays as calls keep within theirs."""
    router.set_quota("a", BIG)  # prior: 100 output tokens
    _calls(router, None, [100] * 20)
    assert router.stats().models["a"].excess_tokens == 0
    _calls(router, None, [300])  # reserved 10 + 100, used 10 + 300: 200 past it
    assert router.stats().models["a"].excess_tokens == pytest.approx(10.0)  # 0.05 x 200
    assert _reserved(router, None) == 100 + 10  # the P95 is still 100
    _calls(router, None, [100] * 20)
    decayed = router.stats().models["a"].excess_tokens
    assert decayed == pytest.approx(10.0 * 0.95 ** 20, abs=0.01)
    # a caller's own estimate is its own: nothing is added to it
    before = router.stats().models["a"].tokens
    assert isinstance(router.admit(50, models=["a"]), Admission)
    assert router.stats().models["a"].tokens - before == 50


def test_kinds_per_model_are_bounded_and_expire(router: RouterClient, redis_url: str,
                                                namespace: str) -> None:
    router.set_quota("a", BIG)
    for k in range(33):
        _calls(router, f"k{k}", [k + 1])
    kinds = router.stats().models["a"].kinds
    assert len(kinds) == 32 and "k0" not in kinds and "k32" in kinds  # least recent gone
    keys = RouterKeys(namespace)
    r = redis.Redis.from_url(redis_url)
    try:
        kind_hash = keys.model("K_KIND", "a")
        assert not r.hexists(kind_hash, "w|k0")  # its observations went with it
        assert r.hget(kind_hash, "w|k32") == b"33"  # kept in the model's hash: no key per kind
        assert r.hget(kind_hash, "o|k32") == b"33"
        assert 0 < r.pttl(kind_hash) <= 86_400_000  # forgotten a day after last seen
    finally:
        r.close()


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"kind": ""}, "kind"),
    ({"kind": "x" * 101}, "kind"),
    ({"kind": "line\nbreak"}, "kind"),
    ({"request_id": "a\x1fb"}, "request_id"),
])
def test_bad_kind_or_request_id_names_the_field(router: RouterClient, kwargs: dict,
                                                field: str) -> None:
    router.set_quota("a", BIG)
    with pytest.raises(ValueError, match=field):
        router.admit(input_tokens=10, **kwargs)
    assert router.stats().models["a"].requests == 0


def test_before_a_models_first_answer_four_estimated_calls_go(router: RouterClient) -> None:
    """The prior (10 output tokens) is all the engine knows until an answer settles, and
    may be far off: requests that leave the output to the engine go while fewer than 4
    calls of the model are in flight. The first answer ends it."""
    router.set_quota("a", {"rpm": 100, "tpm": 100_000, "max_concurrency": 100,
                           "expected_output_tokens": 10})
    router.set_quota("b", {"rpm": 100, "tpm": 100_000, "max_concurrency": 100,
                           "expected_output_tokens": 10})
    first = [router.admit(input_tokens=10, models=["a"]) for _ in range(4)]
    assert all(isinstance(x, Admission) for x in first)
    held = router.admit(input_tokens=10, models=["a"])
    assert isinstance(held, Wait) and held.reason == "warming"
    # a caller's own estimate is not held: it is the caller's, not the engine's guess
    assert isinstance(router.admit(110, models=["a"]), Admission)
    router.complete(first[0].lease_id, 10, 120)  # the first answer: the model is warm
    assert router.stats().models["a"].output_estimate == 120
    assert all(isinstance(router.admit(input_tokens=10, models=["a"]), Admission)
               for _ in range(10))
    # a model whose answers carry no token counts warms with its first completion too
    lone = [router.admit(input_tokens=10, models=["b"]) for _ in range(4)]
    assert isinstance(router.admit(input_tokens=10, models=["b"]), Wait)
    router.complete(lone[0].lease_id)  # tokens unknown
    assert isinstance(router.admit(input_tokens=10, models=["b"]), Admission)


def test_a_models_first_short_answers_do_not_undercut_its_prior(router: RouterClient) -> None:
    """The first answers to come back are the short ones (a long answer is still being
    written): until 16 have settled, the model's estimate is never below the quota's prior,
    so a burst admitted on the first few does not overrun the token window when its long
    answers settle. Then the model's own percentile decides, below the prior too."""
    router.set_quota("a", {**BIG, "expected_output_tokens": 500})
    _calls(router, None, [100] * 15)
    assert router.stats().models["a"].output_estimate == 500
    assert _reserved(router, None) == 500
    _calls(router, None, [100])
    assert router.stats().models["a"].output_estimate == 100
    # longer answers than the prior raise the estimate at once
    router.set_quota("b", {**BIG, "expected_output_tokens": 50})
    _calls(router, None, [400], model="b")
    assert router.stats().models["b"].output_estimate == 400


def test_the_advice_weighs_the_backlogs_kinds_with_what_was_learned(
        router: RouterClient) -> None:
    router.set_quota("a", {**BIG, "expected_output_tokens": 500})
    _calls(router, "summary", [20] * 10)
    _calls(router, "essay", [800] * 10)
    summaries = router.advice(backlog=100, backlog_kinds={"summary": 100}).models["a"]
    essays = router.advice(backlog=100, backlog_kinds={"essay": 100}).models["a"]
    assert summaries.tokens_per_call == 20 and essays.tokens_per_call == 800
    both = router.advice(backlog=100, backlog_kinds={"summary": 50, "essay": 50})
    assert both.models["a"].tokens_per_call == 410


def test_the_largest_overrun_lately_is_kept_free_in_the_token_window(
        router: RouterClient) -> None:
    """The provider counts a call's real tokens from its send: a window that admission fills
    to its limit with reservations is overrun by the one long answer among its calls. So
    the largest overrun of one call lately stays free for requests whose output the engine
    estimates; a caller's own estimate needs no such room."""
    router.set_quota("a", BIG)
    _calls(router, None, [100] * 20)
    _calls(router, None, [600])  # reserved 10 + 100, used 10 + 600: 500 past it
    m = router.stats().models["a"]
    assert m.excess_max_tokens == pytest.approx(500, abs=1)  # halves each minute since
    need = 10 + m.output_estimate + math.ceil(m.excess_tokens)
    router.set_quota("a", {**BIG, "tpm": m.tokens + need + 400})
    held = router.admit(input_tokens=10, models=["a"])  # fits, but not with 500 kept free
    assert isinstance(held, Wait) and held.reason == "tpm", held
    assert isinstance(router.admit(need, models=["a"]), Admission)


def test_the_output_tail_is_kept_free_in_the_token_window(router: RouterClient) -> None:
    """The answers that take a full token window past the provider's limit are the rare long
    ones, which a percentile of 64 does not see and the largest overrun lately may not have
    met yet: the engine fits a lognormal to the last 64 outputs and keeps free what its tail
    (one answer in about 700) writes past a request's reservation. Before 64 answers the
    sample is the short ones that came back first: the tail is then at least 3x the
    estimate."""
    router.set_quota("a", {**BIG, "expected_output_tokens": 2000})
    # longest first: no answer runs past its reservation, so the largest overrun keeps 0
    outputs = sorted((round(400 * math.exp(0.6 * NormalDist().inv_cdf((k + 0.5) / 64)))
                      for k in range(64)), reverse=True)
    _calls(router, None, outputs[:32])
    early = router.stats().models["a"]
    assert early.output_tail_tokens >= 3 * early.output_estimate
    _calls(router, None, outputs[32:])
    m = router.stats().models["a"]
    assert m.excess_max_tokens == 0 and m.excess_tokens == 0
    logs = [math.log(x) for x in outputs]
    assert m.output_tail_tokens == pytest.approx(
        math.exp(statistics.fmean(logs) + 3.0 * statistics.stdev(logs)), abs=1)
    head = math.ceil(m.output_tail_tokens) - m.output_estimate
    assert head > 1000  # about 2,450 tokens of tail against an estimate of about 1,050
    need = 10 + m.output_estimate
    router.set_quota("a", {**BIG, "tpm": m.tokens + need + head - 1})
    held = router.admit(input_tokens=10, models=["a"])
    assert isinstance(held, Wait) and held.reason == "tpm", held
    assert isinstance(router.admit(need, models=["a"]), Admission)  # the caller's own count
    router.set_quota("a", {**BIG, "tpm": m.tokens + 2 * need + head})
    assert isinstance(router.admit(input_tokens=10, models=["a"]), Admission)
