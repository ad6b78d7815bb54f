"""SIGTERM stops a command line the way Ctrl-C does, for the demo and every benchmark.

Python's default for SIGTERM ends the process at once, so nothing it started is stopped:
a ``timeout``, a CI runner cancelling a job or a plain ``kill`` left the private
redis-server, the simulator process, an API server or an Airflow stack running. Under
:func:`sigterm_as_interrupt` a SIGTERM raises :class:`Terminated` in the main thread instead,
a :class:`KeyboardInterrupt`, so the same ``with`` blocks, ``ExitStack`` callbacks and
``except KeyboardInterrupt`` handlers that stop the services on Ctrl-C run for it too;
:func:`interrupted` then names the signal in one line and gives the shell's status for it
(130 for Ctrl-C, 143 for SIGTERM).

A SIGTERM that arrives while the main thread runs an asyncio event loop (a trigger run
inline by ``dag.test()``, a benchmark's drain) is raised by a callback on the loop's next
turn, between two steps of its tasks, not inside the task whose code was running. Raised
inside a task, an interrupt cuts a step short anywhere (the demo's cut a Redis command half
written) and leaves the loop again from every task it then reaches (each that awaited the
one it hit: there, the callers of that batched command); the second exit cut
``asyncio.run()``'s shutdown short, the loop closed with the drain still handing back its
claims, and the drain's coroutine, collected later, printed "coroutine ignored
GeneratorExit" (its clean-up awaited after being closed). Raised between steps, it stops
the loop once; ``asyncio.run()``'s shutdown then cancels every task and lets each finish
its clean-up before the loop closes (and always turns the loop again to do so, so the raise
is never left undelivered there).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["SIGINT_STATUS", "SIGTERM_STATUS", "Terminated", "interrupted",
           "sigterm_as_interrupt"]

#: The exit status after Ctrl-C, as a shell reports a process SIGINT ended (128 + 2).
SIGINT_STATUS = 128 + signal.SIGINT
#: The exit status after SIGTERM, as a shell reports a process SIGTERM ended (128 + 15).
SIGTERM_STATUS = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """A SIGTERM, raised where the main thread was: a KeyboardInterrupt so that whatever
    unwinds for Ctrl-C unwinds for it too."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread.

    Only the first SIGTERM raises: one sent again while the services are being stopped
    (a supervisor repeating its request) would cut that clean-up short and leave them
    running, which is what the handler is there to prevent. While an event loop runs in the
    main thread, the loop's next turn raises it (see the module's docstring); the previous
    handler is put back on the way out.
    """
    raised = False

    def handler(signum: int, frame: Any) -> None:
        nonlocal raised
        if raised:
            return
        raised = True
        err = Terminated(f"signal {signum}")
        loop = _running_loop()
        if loop is None:
            raise err
        loop.call_soon_threadsafe(_raise, err)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread (the main one, in a signal handler), if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _raise(err: BaseException) -> None:
    """A loop callback that raises ``err``: asyncio lets an interrupt raised by a callback
    out of the loop."""
    raise err


def interrupted(err: KeyboardInterrupt, stopped: str = "services stopped") -> int:
    """Say on stderr, in one line after a blank one, that the run was interrupted (Ctrl-C)
    or terminated (SIGTERM) and that ``stopped``; the exit status for it, 130 or 143."""
    if isinstance(err, Terminated):
        print(f"\nterminated; {stopped}", file=sys.stderr, flush=True)
        return SIGTERM_STATUS
    print(f"\ninterrupted; {stopped}", file=sys.stderr, flush=True)
    return SIGINT_STATUS
