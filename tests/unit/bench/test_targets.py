"""The targets table of docs/benchmarks.md is made from bench/baselines/ (bench/targets.py),
and each baseline holds what backs its figure (bench/baselines.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import baselines, targets
from bench.baselines import Baseline, Check, dump, load, load_all, record
from bench.direct import _parser, baseline_mismatch


def _baseline(target: str = "w9", **changes: object) -> Baseline:
    fields: dict[str, object] = {
        "target": target, "title": "W9", "measure": "makespan", "unit": "s",
        "command": "python -m bench.direct --workload W1 --warm --runs 1", "commit": "abc1234",
        "date": "2026-11-28", "machine": "2 CPUs", "runs": (24.0, 23.0, 25.0),
        "statistic": "median", "figure": 24.0, "goal": ">= 90 % of the reference",
        "goal_op": ">=", "goal_limit": 0.9, "reference": "reference", "reference_s": 21.0,
        **changes}
    return Baseline(**fields)  # type: ignore[arg-type]


def test_the_docs_table_is_the_baselines() -> None:
    """What holds docs/benchmarks.md to the measurements: edit a baseline (or the doc's
    table) and this fails until ``python -m bench.targets --write``."""
    assert targets.main(["--check"]) == 0


def test_every_baseline_backs_its_figure() -> None:
    found = load_all()
    assert {"w1", "w2", "w3", "w4", "arrival-cold", "arrival-warm"} <= {b.target for b in found}
    for b in found:
        assert b.command and b.commit and b.date and b.machine and b.runs


def test_a_figure_is_judged_as_a_share_of_the_reference(tmp_path: Path) -> None:
    short = _baseline()  # 21 / 24 = 87.5 %
    assert baselines.share(short) == pytest.approx(0.875)
    assert short.met({}) is False
    assert _baseline(reference_s=21.6).met({}) is True  # 90.0 % exactly
    assert _baseline(also=(Check("429s", 1, "<=", 0),), reference_s=23.0).met({}) is False
    assert _baseline(goal="", goal_op="", goal_limit=None).met({}) is None


def test_versus_judges_another_target_against_this_one() -> None:
    as_is = _baseline("as-is", runs=(1000.0,), figure=1000.0, reference="", reference_s=None,
                      goal_op="<=", goal_limit=0.1, versus="w9")
    assert as_is.met({"w9": _baseline()}) is True  # 24 / 1000
    assert as_is.met({"w9": _baseline(runs=(200.0,), figure=200.0)}) is False


def test_a_bad_baseline_is_refused_naming_the_field_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "w9.json"
    path.write_text(dump(_baseline(figure=23.0)))  # not the median of the runs
    with pytest.raises(ValueError, match=r"w9.json: field 'figure'.*median of the runs is 24"):
        load(path)
    path.write_text(dump(_baseline(statistic="mean")))
    with pytest.raises(ValueError, match=r"field 'statistic'.*use one of median"):
        load(path)
    data = json.loads(dump(_baseline()))
    path.write_text(json.dumps({**data, "figures": 1}))
    with pytest.raises(ValueError, match=r"unknown field.*figures"):
        load(path)
    path.write_text(json.dumps({"target": "w9", "runs": [1]}))
    with pytest.raises(ValueError, match=r"missing field\(s\) title, measure, unit, command"):
        load(path)
    path.write_text(dump(_baseline("w8")))
    with pytest.raises(ValueError, match=r"field 'target'.*the file's name, 'w9'"):
        load(path)


def test_check_fails_when_the_doc_differs_and_write_mends_it(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    (tmp_path / "w9.json").write_text(dump(_baseline()))
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Doc\n\n{targets.BEGIN}\n| old |\n{targets.END}\n\nafter\n")
    args = ["--baselines", str(tmp_path), "--doc", str(doc)]
    assert targets.main([*args, "--check"]) == 1
    assert "run python -m bench.targets --write" in capsys.readouterr().err
    assert targets.main([*args, "--write"]) == 0
    assert targets.main([*args, "--check"]) == 0
    text = doc.read_text()
    assert text.startswith("# Doc\n\n") and text.endswith("\n\nafter\n")
    row = text.splitlines()[5]
    assert row.startswith("| W9 | >= 90 % of the reference | 24 s (median of 3) = **87.5 %**")
    assert "| **no** | 24, 23, 25 | `python -m bench.direct --workload W1 --warm --runs 1` |" \
        in row
    doc.write_text("no markers\n")
    assert targets.main([*args, "--check"]) == 2
    assert "has no targets table" in capsys.readouterr().err


def test_record_keeps_the_goal_and_takes_the_new_runs(tmp_path: Path) -> None:
    (tmp_path / "w9.json").write_text(dump(_baseline(note="the old runs' note")))
    path = record("w9", [22.0, 21.5, 23.456789], "python -m bench.direct --workload W1",
                  also=[Check("429s", 0, "<=", 0)], directory=tmp_path)
    got = load(path)
    assert got.runs == (22.0, 21.5, 23.457) and got.figure == 22.0
    assert (got.goal_limit, got.reference_s) == (0.9, 21.0)
    assert got.command == "python -m bench.direct --workload W1" and got.note == ""
    assert got.also == (Check("429s", 0, "<=", 0),)
    assert got.machine.startswith(f"{os.cpu_count()} CPUs")
    with pytest.raises(ValueError, match=r"no baseline .*w7.json; the targets are w9"):
        record("w7", [1.0], "x", directory=tmp_path)


def test_a_refresh_keeps_the_options_its_reference_holds_for() -> None:
    warm = _parser().parse_args(["--workload", "W1", "--warm", "--runs", "5"])
    assert baseline_mismatch(warm) is None
    cold = _parser().parse_args(["--workload", "W1", "--runs", "5"])
    assert "run with its --warm or without --baseline" in (baseline_mismatch(cold) or "")
    seeded = _parser().parse_args(["--workload", "W1", "--warm", "--seed", "2"])
    assert "--seed" in (baseline_mismatch(seeded) or "")
