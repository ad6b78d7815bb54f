"""Start a server as a child process and wait until it serves: the devkit's private
``redis-server`` and the simulator process.

The child's output goes to a log file, whose last lines the error carries when the child
exits or does not answer, so a failed start explains itself. A child whose start does not
complete is killed, whatever ended the wait: its exit, the timeout, or a
``KeyboardInterrupt`` (Ctrl-C, a SIGTERM under
:func:`~llm_router_devkit.interrupt.sigterm_as_interrupt`) or a test's timeout arriving
meanwhile. The caller holds no handle on the child until the start returns, so nothing
else would stop it, and a server does not end with its parent.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

__all__ = ["ChildExited", "ChildServer", "log_tail", "start_child", "stop_child"]

#: how many of its log's last lines an error about a child carries
TAIL_LINES = 20


class ChildExited(RuntimeError):
    """A child exited before it served; ``log_tail`` holds the last lines of its log."""

    def __init__(self, what: str, returncode: int, log_tail: str) -> None:
        super().__init__(f"{what} exited with {returncode}; its log ends:\n{log_tail}")
        self.returncode = returncode
        self.log_tail = log_tail


#: how much of a log's end is read for its last lines (a component's log can be large)
TAIL_BYTES = 200_000


def log_tail(log: Path, lines: int = TAIL_LINES, width: int | None = None) -> str:
    """The last ``lines`` lines of ``log`` ('' if there is none), each cut to ``width``
    characters if given."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_BYTES))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(line[:width] for line in text.splitlines()[-lines:])


def start_child(command: Sequence[str], *, log: Path, ready: Callable[[int], bool],
                what: str, timeout_s: float, interval_s: float = 0.025,
                start_new_session: bool = False) -> subprocess.Popen[bytes]:
    """Run ``command`` with its output (stdout and stderr) written to ``log`` and return it
    once ``ready(pid)`` is true; ``ready`` is asked every ``interval_s`` seconds.

    :param what: names the child in errors ("redis-server on port 41233").
    :param start_new_session: run the child in a session of its own (a Ctrl-C in the
        terminal then reaches only the caller, which stops the child after its clean-up).
    :raises ChildExited: the child exited first.
    :raises RuntimeError: ``ready`` stayed false for ``timeout_s`` seconds (the child is
        killed; the message carries its log's last lines).
    """
    with log.open("wb") as out:
        proc = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=start_new_session)
        try:  # at once: from here on, an exception must not leave the child running
            out.close()  # the child writes to its own copy
            _wait_ready(proc, log, ready, what, timeout_s, interval_s)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    return proc


def stop_child(proc: subprocess.Popen[bytes] | None, timeout_s: float = 10) -> None:
    """Stop a child that may still run: SIGTERM, then SIGKILL after ``timeout_s``."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_ChildT = TypeVar("_ChildT", bound="ChildServer")


class ChildServer:
    """A server in a child process (:func:`start_child`) with a temporary directory of its
    own (its config, its log); stopping it removes the directory. A context manager."""

    _proc: subprocess.Popen[bytes] | None = None
    _dir: tempfile.TemporaryDirectory[str] | None = None

    def start(self: _ChildT) -> _ChildT:
        raise NotImplementedError

    def stop(self) -> None:
        stop_child(self._proc)
        self._proc = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self: _ChildT) -> _ChildT:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _wait_ready(proc: subprocess.Popen[bytes], log: Path, ready: Callable[[int], bool],
                what: str, timeout_s: float, interval_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise ChildExited(what, proc.returncode, log_tail(log))
        if ready(proc.pid):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer within {timeout_s:g} s; its log "
                               f"ends:\n{log_tail(log)}")
        time.sleep(interval_s)
