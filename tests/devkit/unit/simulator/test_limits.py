"""The sliding window and its peaks, driven by a fake clock: exact, no sleeps."""

from __future__ import annotations

import random

import pytest

from llm_router_devkit.simulator.limits import (
    CONCURRENCY,
    RPM,
    TPM,
    ModelLimiter,
    SlidingWindow,
    retry_after_header,
)
from llm_router_devkit.simulator.profile import ProviderLimits


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def limiter(window_s: float = 1.0, **limits: int | None) -> tuple[ModelLimiter, FakeClock]:
    clock = FakeClock()
    return ModelLimiter(ProviderLimits(**limits), window_s=window_s, clock=clock), clock


def test_window_is_half_open_at_the_boundary() -> None:
    lim, clock = limiter(rpm=2)
    assert lim.offer(1).accepted  # t = 0
    clock.now = 0.5
    assert lim.offer(1).accepted
    clock.now = 0.99609375  # just before 0 leaves the window (0, 1]
    refused = lim.offer(1)
    assert (refused.accepted, refused.reason) == (False, RPM)
    assert refused.retry_after_s == pytest.approx(1.0 - 0.99609375)
    clock.now = 1.0  # the event at 0 stops counting at exactly 0 + W
    assert lim.offer(1).accepted
    clock.now = 1.25  # window (0.25, 1.25] holds 0.5 and 1.0
    assert lim.offer(1).reason == RPM


def test_rpm_retry_after_waits_for_the_oldest_that_must_leave() -> None:
    lim, clock = limiter(rpm=3)
    for t in (0.0, 0.25, 0.5):
        clock.now = t
        assert lim.offer(1).accepted
    clock.now = 0.75
    assert lim.offer(1).retry_after_s == pytest.approx(0.25)  # 0.0 leaves at 1.0
    lim.limits = ProviderLimits(rpm=2)  # lowered at run time: two must leave
    assert lim.offer(1).retry_after_s == pytest.approx(0.5)  # 0.25 leaves at 1.25


def test_tokens_are_charged_at_arrival_and_refusals_are_not_counted() -> None:
    lim, clock = limiter(tpm=100)
    assert lim.offer(60).accepted
    clock.now = 0.25
    refused = lim.offer(50)
    assert refused.reason == TPM
    assert refused.retry_after_s == pytest.approx(0.75)  # the 60 leave at 1.0
    assert lim.offer(40).accepted  # 60 + 40 == 100 fits exactly: the 50 was not charged
    clock.now = 0.5
    assert lim.offer(1).reason == TPM
    clock.now = 1.0
    assert lim.offer(60).accepted  # 40 + 60


def test_tpm_wait_frees_enough_tokens() -> None:
    lim, clock = limiter(tpm=100)
    for t, tokens in ((0.0, 30), (0.25, 30), (0.5, 30)):
        clock.now = t
        assert lim.offer(tokens).accepted
    clock.now = 0.75
    # 90 held, 60 more need 50 freed: the 30s at 0.0 and 0.25 must leave -> t = 1.25.
    assert lim.offer(60).retry_after_s == pytest.approx(0.5)


def test_request_larger_than_tpm_never_fits() -> None:
    lim, _ = limiter(window_s=2.0, tpm=10)
    refused = lim.offer(11)
    assert refused.reason == TPM
    assert refused.retry_after_s == pytest.approx(2.0)


def test_concurrency_slots_and_retry_after_from_expected_end() -> None:
    lim, clock = limiter(max_concurrency=2)
    first = lim.offer(1, expected_duration_s=0.5)
    second = lim.offer(1, expected_duration_s=0.25)
    assert first.accepted and second.accepted
    clock.now = 0.125
    refused = lim.offer(1)
    assert refused.reason == CONCURRENCY
    assert refused.retry_after_s == pytest.approx(0.125)  # the second ends at 0.25
    assert second.call_id is not None
    lim.release(second.call_id)
    lim.release(second.call_id)  # idempotent
    assert lim.offer(1).accepted
    assert lim.peaks.concurrency == 2


def test_first_reason_wins_and_retry_after_covers_every_limit() -> None:
    lim, clock = limiter(rpm=1, tpm=100, max_concurrency=1)
    assert lim.offer(100, expected_duration_s=3.0).accepted
    clock.now = 0.5
    refused = lim.offer(10)
    assert refused.reason == RPM
    assert refused.retry_after_s == pytest.approx(2.5)  # the slot frees only at 3.0


def test_unlimited_limits_accept_everything() -> None:
    lim, _ = limiter()
    assert all(lim.offer(10**6).accepted for _ in range(1000))
    assert lim.peaks.accepted_requests == 1000


def test_peaks_count_offered_traffic_including_refusals() -> None:
    lim, clock = limiter(rpm=2)
    for i in range(5):
        clock.now = i * 0.125
        lim.offer(10)
    peaks = lim.peaks
    assert (peaks.offered_requests, peaks.offered_tokens) == (5, 50)
    assert (peaks.accepted_requests, peaks.accepted_tokens) == (2, 20)


def test_peak_matches_brute_force_over_random_arrivals() -> None:
    rng = random.Random(7)
    window = 1.0
    lim, clock = limiter(window_s=window, rpm=5, tpm=400)
    arrivals: list[tuple[float, int]] = []
    t = 0.0
    for _ in range(2000):
        t += rng.expovariate(8.0)
        tokens = rng.randint(1, 100)
        clock.now = t
        lim.offer(tokens)
        arrivals.append((t, tokens))
    best_count = best_tokens = 0
    for end, _ in arrivals:
        inside = [tok for s, tok in arrivals if end - window < s <= end]
        best_count = max(best_count, len(inside))
        best_tokens = max(best_tokens, sum(inside))
    assert lim.peaks.offered_requests == best_count
    assert lim.peaks.offered_tokens == best_tokens
    assert lim.peaks.accepted_requests <= 5
    assert lim.peaks.accepted_tokens <= 400


def test_reset_forgets_windows_but_not_calls_in_flight() -> None:
    lim, _ = limiter(rpm=1, max_concurrency=5)
    assert lim.offer(1).accepted
    lim.reset()
    assert lim.peaks.offered_requests == 0
    assert lim.peaks.concurrency == 1
    assert lim.in_flight == 1
    assert lim.offer(1).accepted


def test_sliding_window_running_sums() -> None:
    window = SlidingWindow(1.0)
    for t in (0.0, 0.25, 0.5):
        window.add(t, 10)
    window.evict(1.25)
    assert (len(window), window.tokens) == (1, 10)
    assert window.wait_for_count(1.25, 2) == 0.0
    assert window.wait_for_tokens(1.25, 100, 90) == 0.0


@pytest.mark.parametrize(("seconds", "header"), [(0.001, "1"), (1.0, "1"), (1.01, "2")])
def test_retry_after_header_rounds_up_to_whole_seconds(seconds: float, header: str) -> None:
    assert retry_after_header(seconds) == header
