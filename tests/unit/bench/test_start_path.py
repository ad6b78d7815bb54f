"""The start path of a bench.e2e run: each step from the DAG run's start, on one clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.baselines import dump, load
from bench.e2e.start_path import STEPS, steps
from bench.targets import table
from tests.unit.bench.test_targets import _baseline

RESET = 1_000.0  # the simulator's reset, epoch s


def raw(**kw: Any) -> dict[str, Any]:
    run = {"run_id": "r1", "state": "success", "queued": 1_001.0, "start": 1_001.5,
           "end": 1_040.0}
    tis = [
        # a deferred task's resumption overwrites queued_dttm: not a step
        {"run_id": "r1", "task_id": "lead", "map_index": -1, "state": "success",
         "try_number": 1, "queued": 1_039.0, "start": 1_002.5, "end": 1_040.0},
        {"run_id": "r1", "task_id": "advise", "map_index": -1, "state": "success",
         "try_number": 1, "queued": 1_001.6, "start": 1_002.0, "end": 1_004.0},
    ]
    claims = [{"at": 1_003.25, "worker": "lead", "n": 100},
              {"at": 1_005.0, "worker": "solve", "n": 100}]
    return {"reset_epoch": RESET, "airflow": {"runs": [run], "task_instances": tis},
            "claims": claims, **kw}


def test_each_step_is_timed_from_the_dag_runs_start() -> None:
    got = steps(raw(), first_call_s=3.5)
    assert list(got) == list(STEPS)
    assert got == {"run started": 0.5, "lead started": 1.5, "first claim": 2.25,
                   "first call": 2.5}


def test_a_missing_record_leaves_its_step_empty() -> None:
    assert steps(raw(claims=[]), 3.5)["first claim"] is None
    empty = raw()
    empty["airflow"] = {"runs": [], "task_instances": []}
    assert steps(empty, 3.5) == dict.fromkeys(STEPS)


def test_the_product_path_heads_the_targets_table() -> None:
    rows = table([_baseline(t, title=t) for t in
                  ("admission-single", "w1", "first-call-cold", "product-w1")]).splitlines()
    assert [r.split(" | ")[0].lstrip("| ") for r in rows[2:]] == [
        "product-w1", "first-call-cold", "w1", "admission-single"]


def test_baselines_take_the_runs_from_the_dag_runs_start_and_the_first_claim(
        tmp_path: Path) -> None:
    from bench.e2e.__main__ import parse, record_baselines

    for target in ("product-w1", "product-w1-claim", "first-call-cold"):
        dump_baseline(tmp_path, target)
    out = tmp_path / "run"
    out.mkdir()
    (out / "command.txt").write_text("python -m bench.e2e --workloads W1 --runs 2\n")
    runs = [{"workload": "W1", "design": "router", "finished": True, "rejected_429": 0,
             "from_run_start_s": start, "from_first_claim_s": claim,
             "start_path": {"first call": first}}
            for start, claim, first in ((30.0, 26.0, 3.5), (32.0, 27.0, 4.5))]
    record_baselines(parse(["--baseline"]), runs, out, tmp_path)
    got = {t: load(tmp_path / f"{t}.json") for t in
           ("product-w1", "product-w1-claim", "first-call-cold")}
    assert got["product-w1"].runs == (30.0, 32.0) and got["product-w1"].figure == 31.0
    assert got["product-w1-claim"].runs == (26.0, 27.0)
    assert got["first-call-cold"].runs == (3.5, 4.5)
    assert got["product-w1"].command == "python -m bench.e2e --workloads W1 --runs 2"
    assert [(c.name, c.value) for c in got["product-w1"].also] == [("429s", 0)]


def test_a_run_cut_short_is_no_baseline(tmp_path: Path) -> None:
    from bench.e2e.__main__ import UsageError, parse, record_baselines

    cut = {"workload": "W1", "design": "router", "finished": False}
    with pytest.raises(UsageError, match="cut short"):
        record_baselines(parse(["--baseline"]), [cut], tmp_path, tmp_path)


def test_bad_input_ends_with_one_error_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.e2e.__main__ import main

    assert main(["--router-param", "fan_out", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --router-param 'fan_out': expected NAME=N, e.g. fan_out=4"]


def dump_baseline(directory: Path, target: str) -> None:
    (directory / f"{target}.json").write_text(dump(_baseline(target)))


def test_the_warm_up_run_is_not_measured() -> None:
    from bench.e2e.run import WARM_UP_RUN, _measured

    airflow = raw()["airflow"]
    warm = {"run_id": f"{WARM_UP_RUN}abc", "state": "success", "queued": 990.0,
            "start": 990.5, "end": 995.0}
    both = {"runs": [warm, *airflow["runs"]],
            "task_instances": [{**airflow["task_instances"][0], "run_id": warm["run_id"]},
                               *airflow["task_instances"]]}
    assert _measured(both) == airflow
    assert steps({**raw(), "airflow": _measured(both)}, 3.5)["run started"] == 0.5
