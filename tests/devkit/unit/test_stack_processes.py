"""What a real-stack stop reports when it needs SIGKILL (``llm_router_devkit.stack_processes``):
each leftover's kernel state and Python stacks, identical stacks written once, and Airflow's
LocalExecutor shutdown race named only when the stacks show exactly it. Real child
processes stand in for the stack's: the race's shape is given as ``py-spy dump`` prints it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llm_router_devkit.stack_processes import (
    Leftover,
    diagnose,
    local_executor_race,
    py_spy,
    render,
)

SCHEDULER_STACK = """Thread 101 (idle): "MainThread"
    _wait (multiprocessing/popen_fork.py:27)
    BaseProcess.join (multiprocessing/process.py:149)
    LocalExecutor.end (airflow/executors/local_executor.py:268)
    SchedulerJobRunner._execute (airflow/jobs/scheduler_job_runner.py:1658)"""
WORKER_STACK = """Thread {pid} (idle): "MainThread"
    SynchronizedBase.__enter__ (multiprocessing/sharedctypes.py:211)
    _run_worker (airflow/executors/local_executor.py:95)
    BaseProcess.run (multiprocessing/process.py:108)"""
IDLE_WORKER_STACK = """Thread {pid} (idle): "MainThread"
    SimpleQueue.get (multiprocessing/queues.py:364)
    _run_worker (airflow/executors/local_executor.py:81)"""


def _left(stacks: str) -> Leftover:
    """A leftover as :func:`diagnose` reports it, with these stacks."""
    return Leftover("== pid: airflow\n   state S", stacks)


def _kernel_state(pid: int) -> str:
    """The one-letter state in ``/proc/<pid>/stat`` (after the command name's parenthesis)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def children() -> Iterator[list[int]]:
    """Two sleeping Python children of this process (the stand-ins for its workers), each
    past its start-up (it said so) and asleep in the kernel's eyes before the test looks at
    it: on a loaded machine a child that has said "ready" can wait seconds to be scheduled
    into its sleep, and shows as running (R) meanwhile."""
    procs = [subprocess.Popen([sys.executable, "-c",
                               "import time; print('ready', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 30
        while _kernel_state(p.pid) != "S":
            assert time.monotonic() < deadline, f"child {p.pid} never went to sleep"
            time.sleep(0.01)  # polling the kernel's state: no event announces the sleep
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


def test_the_race_is_named_when_every_leftover_shows_it(children: list[int]) -> None:
    scheduler, leader = os.getpid(), 1
    diagnosis = {scheduler: _left(SCHEDULER_STACK),
                 **{pid: _left(WORKER_STACK.format(pid=pid)) for pid in children}}
    race = local_executor_race(diagnosis, scheduler, leader)
    assert race is not None and str(children) in race and "LocalExecutor.end()" in race


@pytest.mark.parametrize("change", ["a worker waits for work", "the scheduler is elsewhere",
                                    "no worker is left", "a worker is not the scheduler's"])
def test_anything_else_is_not_the_race(children: list[int], change: str) -> None:
    scheduler, leader = os.getpid(), 1
    diagnosis = {scheduler: _left(SCHEDULER_STACK),
                 **{pid: _left(WORKER_STACK.format(pid=pid)) for pid in children}}
    if change == "a worker waits for work":
        diagnosis[children[1]] = _left(IDLE_WORKER_STACK.format(pid=children[1]))
    elif change == "the scheduler is elsewhere":
        diagnosis[scheduler] = _left(SCHEDULER_STACK.replace("LocalExecutor.end",
                                                             "LocalExecutor.sync"))
    elif change == "no worker is left":
        diagnosis = {scheduler: _left(SCHEDULER_STACK)}
    else:  # this process's parent is not the "scheduler" given
        scheduler = children[0]
        diagnosis = {scheduler: _left(SCHEDULER_STACK),
                     os.getpid(): _left(WORKER_STACK.format(pid=0))}
    assert local_executor_race(diagnosis, scheduler, leader) is None


def test_identical_stacks_are_written_once() -> None:
    first, second = (Leftover(f"== {pid}: airflow worker\n   state S",
                              WORKER_STACK.format(pid=pid)) for pid in (11, 12))
    text = render({11: first, 12: second})
    assert text.count("SynchronizedBase.__enter__") == 1
    assert "(the same Python stacks as 11)" in text


def test_a_leftover_is_described_by_its_kernel_state_and_stacks(children: list[int]) -> None:
    found = str(diagnose(children[:1])[children[0]])
    assert f"== {children[0]}: {sys.executable}" in found
    assert "state S" in found and f"ppid {os.getpid()}" in found
    if py_spy() is None:
        assert "py-spy is not installed" in found
    else:
        assert "<module> (<string>:1)" in found, found
