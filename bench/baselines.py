"""The measurements behind the figures the docs quote: one small JSON file per target in
``bench/baselines/``, read by ``python -m bench.targets`` (the table in docs/benchmarks.md)
and refreshed by :func:`record`, which a benchmark calls when given ``--baseline``.

Raw runs are not kept (``bench/out/`` is ignored by git). A baseline is what a reader needs
to trust a figure and to measure it again: the command, the commit and date it ran at, the
machine, each run's figure, the statistic taken over the runs, and the goal it is judged
against. A figure judged against a reference schedule (``reference_s``: the yardstick of
docs/benchmarks.md) is given as a share of the reference's speed, ``reference_s / figure``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, replace
from pathlib import Path

__all__ = ["DIR", "Baseline", "Check", "load", "load_all", "machine", "record", "share"]

#: One ``<target>.json`` per target.
DIR = Path(__file__).resolve().parent / "baselines"
#: How the figure is taken over the runs. ``quietest``: the run in which other processes
#: used the least CPU (the engine's capacity on the machine), which only the benchmark
#: knows: its figure is given, and must be one of the runs.
STATISTICS = ("median", "p95", "max", "min", "quietest")
OPS = (">=", "<=", "<")


@dataclass(frozen=True)
class Check:
    """A condition the figure's goal also needs, measured on the same runs (a call's 99th
    percentile below a limit; no 429 in any run)."""

    name: str
    value: float
    op: str
    limit: float
    unit: str = ""

    def met(self) -> bool:
        return _holds(self.value, self.op, self.limit)


@dataclass(frozen=True)
class Baseline:
    """One target's measurement. ``goal_op``/``goal_limit`` judge the figure, or its share
    of the reference's speed when ``reference_s`` is set; no goal: a figure only."""

    target: str
    title: str
    measure: str
    unit: str
    command: str
    commit: str
    date: str
    machine: str
    runs: tuple[float, ...]
    statistic: str
    figure: float
    goal: str = ""
    goal_op: str = ""
    goal_limit: float | None = None
    reference: str = ""
    reference_s: float | None = None
    versus: str = ""
    also: tuple[Check, ...] = ()
    note: str = ""

    def judged(self, others: dict[str, Baseline]) -> float:
        """What the goal judges: the figure, its share of the reference's speed, or (with
        ``versus``) the other target's figure as a fraction of this one."""
        if self.versus:
            if self.versus not in others:
                raise ValueError(f"{self.target}: field 'versus' names {self.versus!r}, "
                                 "which has no baseline; name one of bench/baselines/")
            return others[self.versus].figure / self.figure
        return share(self) if self.reference_s is not None else self.figure

    def met(self, others: dict[str, Baseline]) -> bool | None:
        """Whether the goal is met (None: the baseline has none)."""
        if self.goal_limit is None:
            return None
        return (_holds(self.judged(others), self.goal_op, self.goal_limit)
                and all(c.met() for c in self.also))


def share(b: Baseline) -> float:
    """The figure as a share of the reference's speed (1.0: as fast as the reference)."""
    if b.reference_s is None:
        raise ValueError(f"{b.target}: no reference_s to compare the figure with")
    return b.reference_s / b.figure


def _holds(value: float, op: str, limit: float) -> bool:
    # a share is shown to a tenth of a percent: judge what is shown, not what rounding hides
    value = round(value, 6)
    return value >= limit if op == ">=" else value <= limit if op == "<=" else value < limit


def statistic(name: str, runs: Sequence[float]) -> float:
    """``median``, ``p95`` (nearest rank), ``max`` or ``min`` of ``runs``."""
    ordered = sorted(runs)
    if name == "median":
        return float(statistics.median(ordered))
    if name == "p95":
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]
    return ordered[-1] if name == "max" else ordered[0]


def load(path: Path) -> Baseline:
    """Read and check one baseline; a ValueError names the file, the field and the fix."""
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err}); fix the file or re-run its command "
                         "with --baseline") from err
    known = {f for f in Baseline.__dataclass_fields__}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{path}: unknown field(s) {', '.join(unknown)}; the fields are "
                         f"{', '.join(sorted(known))}")
    required = [name for name, f in Baseline.__dataclass_fields__.items()
                if f.default is MISSING]
    missing = [name for name in required if name not in raw]
    if missing:
        raise ValueError(f"{path}: missing field(s) {', '.join(missing)}; every baseline "
                         f"has {', '.join(required)}")
    try:
        b = Baseline(**{**raw, "runs": tuple(float(x) for x in raw["runs"]),
                        "also": tuple(Check(**c) for c in raw.get("also", ()))})
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: {err}; 'runs' is a list of numbers and each of 'also' "
                         "has name, value, op, limit (and unit)") from err
    _check(path, b)
    return b


def _check(path: Path, b: Baseline) -> None:
    def bad(fieldname: str, fix: str) -> ValueError:
        return ValueError(f"{path}: field '{fieldname}': {fix}")

    if b.target != path.stem:
        raise bad("target", f"is {b.target!r}; it must be the file's name, {path.stem!r}")
    if not b.runs:
        raise bad("runs", "is empty; give each run's figure")
    if b.statistic not in STATISTICS:
        raise bad("statistic", f"is {b.statistic!r}; use one of {', '.join(STATISTICS)}")
    if b.statistic == "quietest":
        if b.figure not in b.runs:
            raise bad("figure", "a quietest run's figure must be one of the runs")
    elif not math.isclose(b.figure, statistic(b.statistic, b.runs), abs_tol=5e-4):
        raise bad("figure", f"is {b.figure}, but the {b.statistic} of the runs is "
                  f"{statistic(b.statistic, b.runs)}; write that (or re-run with --baseline)")
    if (b.goal_limit is None) != (not b.goal_op) or (b.goal_op and b.goal_op not in OPS):
        raise bad("goal_op", f"give goal_op (one of {', '.join(OPS)}) and goal_limit "
                  "together, or neither")
    if b.goal_limit is not None and not b.goal:
        raise bad("goal", "say the goal in words, as the table shows it")
    for c in b.also:
        if c.op not in OPS:
            raise bad("also", f"{c.name}: op {c.op!r}; use one of {', '.join(OPS)}")


def load_all(directory: Path = DIR) -> list[Baseline]:
    """Every baseline, in the order the table lists them (by file name)."""
    return [load(p) for p in sorted(directory.glob("*.json"))]


def machine() -> str:
    """A line on the machine that ran: its CPUs and what else it was doing."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load1, load5, _ = os.getloadavg()
    return (f"{os.cpu_count()} CPUs{f' ({model})' if model else ''}; load average "
            f"{load1:.2f} (1 min), {load5:.2f} (5 min) at the end")


def _commit(root: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" with uncommitted changes" if dirty else "")


def record(target: str, runs: Sequence[float], command: str, *,
           also: Sequence[Check] = (), root: Path | None = None,
           directory: Path = DIR) -> Path:
    """Refresh ``target``'s baseline with new runs measured by ``command`` (at the commit of
    ``root``, default this checkout): its goal, reference and wording stay; the runs, the
    figure (the baseline's statistic over them), the checks, the commit, the date and the
    machine are the new measurement's. Returns the file written."""
    path = directory / f"{target}.json"
    if not path.is_file():
        raise ValueError(f"--baseline: no baseline {path}; the targets are "
                         f"{', '.join(p.stem for p in sorted(directory.glob('*.json')))}")
    old = load(path)
    if old.statistic == "quietest":
        raise ValueError(f"--baseline: {path} takes the quietest run, which this benchmark "
                         "does not tell apart; edit the file from its report")
    kept = tuple(round(float(x), 3) for x in runs)
    new = replace(old, runs=kept, command=command, also=tuple(also),
                  figure=round(statistic(old.statistic, kept), 3),
                  commit=_commit(root or Path(__file__).resolve().parents[1]),
                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  machine=machine(), note="")
    path.write_text(dump(new))
    return path


def dump(b: Baseline) -> str:
    """A baseline as its file holds it: fields in a fixed order, empty ones left out."""
    data = {k: v for k, v in asdict(b).items() if v not in ("", None, (), [], {})}
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"
