"""The pure parts of the admission benchmark: percentiles, targets and the median run."""

from __future__ import annotations

import math

from bench.admission.model import TARGET_BATCH_RATE, TARGET_SINGLE_P99_MS, TARGET_SINGLE_RATE, pct
from bench.admission.report import _meets, _spread


def test_nearest_rank_percentile() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert pct(values, 50) == 3.0
    assert pct(values, 99) == 5.0 and pct(values, 0) == 1.0
    assert pct(list(range(1, 101)), 99) == 99
    assert math.isnan(pct([], 50))


def test_targets_judge_single_calls_by_rate_and_p99_batches_by_rate() -> None:
    assert _meets(1, TARGET_SINGLE_RATE, TARGET_SINGLE_P99_MS * 0.9)
    assert not _meets(1, TARGET_SINGLE_RATE, TARGET_SINGLE_P99_MS)  # p99 must be under
    assert not _meets(1, TARGET_SINGLE_RATE - 1, 0.1)
    assert _meets(64, TARGET_BATCH_RATE, 1000.0) and not _meets(64, TARGET_BATCH_RATE - 1, 0)


def test_spread_is_median_with_range() -> None:
    assert _spread([3.0, 1.0, 2.0], ".1f") == "2.0 (1.0, 3.0)"
