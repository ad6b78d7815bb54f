"""How ``bench/fidelity.py`` counts windows over a target from the strict backend's arrivals
(the scenarios themselves run on demand: ``python -m bench.fidelity``)."""

from __future__ import annotations

from bench.fidelity import over_target


def test_peaks_and_calls_ending_a_window_over_target() -> None:
    # [time, input, output, status]: four calls within 1 s, then one alone
    arrivals = [[0.0, 10, 90, 200], [0.2, 10, 90, 200], [0.4, 10, 90, 429],
                [0.9, 10, 90, 200], [2.5, 10, 990, 200]]
    # rpm 2: the third and fourth calls each end a window of 3 and 4 calls
    assert over_target(arrivals, 1.0, rpm=2, tpm=None) == (4, 1000, 2)
    # tpm 250: the same two (300 and 400 tokens), and the lone 1000-token call
    assert over_target(arrivals, 1.0, rpm=None, tpm=250) == (4, 1000, 3)
    # a call exactly one window after another no longer shares its window
    assert over_target([[0.0, 1, 0, 200], [1.0, 1, 0, 200]], 1.0, rpm=1, tpm=None) == (1, 1, 0)
