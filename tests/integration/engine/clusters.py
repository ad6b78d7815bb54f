"""Local Redis Clusters made of each major version of ``redis-server`` on PATH (the test
command's 6.2 from the virtualenv, Debian's 7 in /usr/bin), so a cluster test runs on
both."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from llm_router_devkit.redis_tools import LocalCluster

__all__ = ["SERVER_DIRS", "SERVER_IDS", "cluster_of"]


def _server_dirs() -> list[str]:
    """One PATH folder per major version of ``redis-server`` found on PATH."""
    found: dict[str, str] = {}
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        binary = os.path.join(folder, "redis-server")
        if folder and os.access(binary, os.X_OK):
            out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                                 check=False).stdout
            major = re.search(r"v=(\d+)\.", out)
            if major:
                found.setdefault(major.group(1), folder)
    return list(found.values())


SERVER_DIRS = _server_dirs()
#: pytest ids of SERVER_DIRS
SERVER_IDS = [f"redis-server-in-{d.strip('/').replace('/', '-')}" for d in SERVER_DIRS]


@contextmanager
def cluster_of(server_dir: str, masters: int = 3) -> Iterator[LocalCluster]:
    """A cluster of ``masters`` nodes running the ``redis-server`` in ``server_dir``."""
    path = os.environ["PATH"]
    os.environ["PATH"] = server_dir + os.pathsep + path  # the nodes' redis-server
    try:
        c = LocalCluster(masters).__enter__()
    finally:
        os.environ["PATH"] = path
    try:
        yield c
    finally:
        c.__exit__(None, None, None)
