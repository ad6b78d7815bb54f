"""A stand-in for a server the devkit starts (``redis-server``, the simulator's Python) that
interrupts its starter the way Ctrl-C does, at a known moment: once the starter probes it,
so the starter is waiting for it to answer. It listens on its ``--port``, accepts the
first probe, writes its pid, sends SIGINT to its parent and never answers."""

from __future__ import annotations

import os
import signal
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["interrupting_child", "running", "sigint_as_in_a_terminal"]

_SCRIPT = '''#!{python}
import os, signal, socket, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
server = socket.create_server(("127.0.0.1", port))
probe, _ = server.accept()
with open({pid_file!r}, "w") as f:
    f.write(str(os.getpid()))
os.kill(os.getppid(), signal.SIGINT)
signal.pause()
'''


@contextmanager
def sigint_as_in_a_terminal() -> Iterator[None]:
    """Within the block SIGINT raises ``KeyboardInterrupt`` here, and a child started gets
    SIGINT's default (a handled signal is reset to it at exec), as in a terminal's
    foreground job, whatever the test runner inherited: a runner started in the background
    by a shell without job control ignores SIGINT, and its children inherit that across
    exec (the demo then never saw a Ctrl-C and drained on to the end: seen in a CI run
    started so)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def interrupting_child(path: Path) -> Iterator[Path]:
    """Write the stand-in as the executable ``path``; yields the file its pid will be in.

    Within the block SIGINT raises ``KeyboardInterrupt`` (:func:`sigint_as_in_a_terminal`);
    after it, a stand-in still running is killed.
    """
    pid_file = path.parent / f"{path.name}.pid"
    path.write_text(_SCRIPT.format(python=sys.executable, pid_file=str(pid_file)))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    try:
        with sigint_as_in_a_terminal():
            yield pid_file
    finally:
        if pid_file.exists() and running(pid := int(pid_file.read_text())):
            os.kill(pid, signal.SIGKILL)


def running(pid: int) -> bool:
    """Whether process ``pid`` exists (a child not yet waited for counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
