"""The processes of a running Airflow stack, read from ``/proc``: which belong to a process
group or lie below a process, what each one runs, and, when a stop needs SIGKILL, what each
leftover was doing before it (kernel state, Python stacks through ``py-spy``, the tails of
the components' logs). Used by :mod:`llm_router_devkit.stack`, whose stop reports them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # the process ended meanwhile
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces or parentheses.
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, their children, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (parent := parent_of(int(entry.name))) is not None:
            children.setdefault(parent, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


def describe(pids: list[int]) -> list[str]:
    """``pid: command line`` of each process."""
    out = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            cmd = "?"
        out.append(f"{pid}: {cmd[:120]}")
    return out


#: Bounds of what :func:`diagnose` gathers: a stuck stop must explain itself in a failure
#: message, and must not make that message (or the stop) unbounded.
PY_SPY_TIMEOUT_S = 10.0  # one ``py-spy dump``; a dump takes well under a second
DIAGNOSE_BUDGET_S = 40.0  # every dump of one stop together
STACK_CHARS = 2500  # of one process's Python stacks


def _proc_field(pid: int, name: str) -> str:
    try:
        return Path(f"/proc/{pid}/{name}").read_text(errors="replace").strip()
    except OSError:
        return "?"


def proc_state(pid: int) -> str:
    """``state S wchan do_wait threads 3``: what the kernel says process ``pid`` is doing
    (``wchan``: the kernel function it sleeps in, e.g. ``do_wait`` in waitpid,
    ``pipe_read``, ``futex_do_wait`` on a lock)."""
    status = _proc_field(pid, "status")
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    state = fields.get("State", "?").strip()
    threads = fields.get("Threads", "?").strip()
    return f"state {state} wchan {_proc_field(pid, 'wchan') or '-'} threads {threads}"


def py_spy() -> str | None:
    """The ``py-spy`` executable (beside this interpreter or on PATH), or None."""
    return shutil.which("py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}"
                                       f"{os.environ.get('PATH', '')}")


def python_stacks(pid: int, timeout_s: float = PY_SPY_TIMEOUT_S) -> str:
    """Every thread's Python stack in process ``pid`` (``py-spy dump``, which reads them
    from outside: no signal handler has to run, so it works on a process stuck in a lock
    or a wait), or why there are none. At most :data:`STACK_CHARS` characters."""
    exe = py_spy()
    if exe is None:
        return "(no Python stacks: py-spy is not installed; pip install py-spy)"
    try:
        done = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return f"(py-spy dump timed out after {timeout_s:.0f} s)"
    text = (done.stdout + done.stderr).strip()
    if done.returncode != 0:  # e.g. the group's sh, no Python: the error, not its backtrace
        return f"(py-spy: {text.splitlines()[0] if text else f'exit {done.returncode}'})"
    return text if len(text) <= STACK_CHARS else text[:STACK_CHARS] + "\n[... cut]"


@dataclass(frozen=True)
class Leftover:
    """What one process left after SIGTERM was doing: ``head``, its command line, kernel
    state and parent; ``stacks``, its Python stacks (or why there are none)."""

    head: str
    stacks: str

    def __str__(self) -> str:
        return f"{self.head}\n{self.stacks}"


def diagnose(pids: list[int], budget_s: float = DIAGNOSE_BUDGET_S) -> dict[int, Leftover]:
    """What each process of ``pids`` is stuck in: command line, kernel state and wait
    channel, Python stacks. Run before SIGKILL, while there is still something to look at.
    The dumps stop when ``budget_s`` is spent (the rest get their state only)."""
    deadline = time.monotonic() + budget_s
    out: dict[int, Leftover] = {}
    for pid, line in zip(pids, describe(pids), strict=True):
        # the kernel's view first: py-spy's ptrace attach wakes a sleeping process, which
        # then shows as running (R) until the loaded machine schedules it back to sleep
        head = f"== {line}\n   {proc_state(pid)} ppid {parent_of(pid)}"
        remaining = deadline - time.monotonic()
        stacks = (python_stacks(pid, min(PY_SPY_TIMEOUT_S, remaining)) if remaining > 1.0
                  else "(no Python stacks: the diagnosis's time budget is spent)")
        out[pid] = Leftover(head, stacks)
    return out


def render(diagnosis: dict[int, Leftover]) -> str:
    """:func:`diagnose`'s findings as text, each process's stacks written once: a process
    whose stacks are another's (e.g. eight workers stuck alike) refers to the first."""
    seen: dict[str, int] = {}  # stacks with the pid masked -> the first process with them
    parts = []
    for pid, left in diagnosis.items():
        masked = re.sub(rf"\b{pid}\b", "PID", left.stacks)
        stacks = (f"(the same Python stacks as {seen[masked]})" if masked in seen
                  else left.stacks)
        seen.setdefault(masked, pid)
        parts.append(f"{left.head}\n{stacks}")
    return "\n".join(parts)


#: Airflow 3.3's LocalExecutor shutdown race, as ``py-spy dump`` shows it. The scheduler's
#: SIGTERM handler raises SystemExit (``SchedulerJobRunner._exit_gracefully``); raised at the
#: bytecode right after ``SynchronizedBase.__enter__`` (a Python method) has acquired the
#: lock of the executor's ``_unread_messages`` counter, it leaves ``__enter__`` before the
#: ``with`` block is entered, so ``__exit__`` never runs and the scheduler holds the lock
#: for good. ``LocalExecutor.end()`` then puts one None per worker and joins them; a worker
#: that dequeues a workload instead of a None waits for that lock (``_run_worker``'s ``with
#: unread_messages``) forever, ignoring SIGTERM (forked workers inherit the scheduler's
#: handler, which does nothing in a child), and the scheduler joins it forever.
_RACE_SCHEDULER = re.compile(r"^\s*(?:\S+\.)?join \(multiprocessing/process\.py:\d+\)\n"
                             r"\s*(?:\S+\.)?end \(airflow/executors/local_executor\.py:\d+\)",
                             re.MULTILINE)
_RACE_WORKER = re.compile(r"^\s*SynchronizedBase\.__enter__ \(multiprocessing/sharedctypes\.py"
                          r":\d+\)\n\s*_run_worker \(airflow/executors/local_executor\.py:\d+\)",
                          re.MULTILINE)


def local_executor_race(diagnosis: dict[int, Leftover], scheduler: int, leader: int
                        ) -> str | None:
    """The explanation of :data:`_RACE_SCHEDULER`'s race if ``diagnosis`` (of the processes
    left after SIGTERM) shows exactly it: the scheduler joining its workers in
    ``LocalExecutor.end()``, at least one worker, every worker (a child of the scheduler)
    waiting in ``_run_worker`` for the counter's lock, and nothing else left but the group
    leader (which waits for its children). None otherwise, and without py-spy's stacks."""
    workers = [pid for pid in diagnosis if pid not in (scheduler, leader)]
    if (scheduler not in diagnosis or not workers
            or not _RACE_SCHEDULER.search(diagnosis[scheduler].stacks)
            or any(parent_of(pid) != scheduler
                   or not _RACE_WORKER.search(diagnosis[pid].stacks)
                   for pid in workers)):
        return None
    return (f"Airflow LocalExecutor shutdown race: the scheduler ({scheduler}) joins "
            f"{len(workers)} worker(s) {workers} in LocalExecutor.end(), each waiting in "
            "_run_worker for the _unread_messages lock, which the scheduler's SIGTERM "
            "handler left held (its SystemExit was raised inside "
            "SynchronizedBase.__enter__, so __exit__ never ran); the workers ignore SIGTERM "
            "and only SIGKILL ends them")
