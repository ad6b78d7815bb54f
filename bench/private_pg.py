"""A private PostgreSQL server with the packaged defaults, for benchmarks of the task store.

The shared test server may be tuned for CI (this machine's runs with ``autovacuum = off``),
and what a backlog of a million rows costs depends on vacuum above all: a benchmark that
reported it from a server without autovacuum would describe a deployment nobody has.
``initdb`` into a temporary directory, ``postgres`` on a free loopback port, every setting
left at its default; stopped and removed when the context ends.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _bindir() -> Path:
    """Where ``initdb`` and ``postgres`` are (on PATH, else Debian's versioned directory)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not candidates:
        raise RuntimeError("initdb not found: install the PostgreSQL server binaries or "
                           "pass --postgres-dsn to use a running server")
    return Path(candidates[-1]).parent


def _as_owner() -> list[str]:
    """PostgreSQL refuses to run as root: run it as ``postgres`` then."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def private_postgres() -> Iterator[str]:
    """Start a private server with default settings; yield its DSN (database ``postgres``)."""
    bindir = _bindir()
    root = Path(tempfile.mkdtemp(prefix="llmr-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = _free_port()
    subprocess.run([*_as_owner(), str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
                    "--auth=trust", "-E", "UTF8", "--no-sync"],
                   check=True, capture_output=True)
    log = root / "server.log"
    pg_ctl = [*_as_owner(), str(bindir / "pg_ctl"), "-D", str(data)]
    started = subprocess.run(
        [*pg_ctl, "-l", str(log), "-w", "-t", "120",
         "-o", f"-p {port} -h 127.0.0.1 -k {root}", "start"], capture_output=True)
    if started.returncode:
        tail = log.read_text()[-2000:] if log.exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"private PostgreSQL did not start: {tail}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*pg_ctl, "-m", "fast", "-w", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
