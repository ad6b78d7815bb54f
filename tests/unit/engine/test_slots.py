"""Which failures the clients retry while the router's slot moves (``engine/slots.py``)."""

from __future__ import annotations

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import ClusterError, ResponseError, TryAgainError

from airflow_llm_router.engine.slots import closed_under_call, retried_in_migration


async def _write_on_a_closed_connection() -> AttributeError:
    """What redis-py's asyncio client raises writing to a connection closed under it (its
    cluster client refreshing the slot map): the real error, from redis-py's own code."""
    with pytest.raises(AttributeError, match="writelines") as caught:
        await Connection()._send_packed_command([b"PING\r\n"])
    return caught.value


async def test_a_write_on_a_connection_closed_under_it_is_retried() -> None:
    err = await _write_on_a_closed_connection()
    assert closed_under_call(err) and retried_in_migration(err)


def test_an_attribute_error_outside_redis_py_is_not_retried() -> None:
    """The same message from anywhere else is a bug, raised at once."""
    with pytest.raises(AttributeError) as caught:
        None.writelines([])  # type: ignore[attr-defined]
    assert not closed_under_call(caught.value)
    assert not retried_in_migration(caught.value)


def test_refusals_of_a_migration_are_retried_other_errors_are_not() -> None:
    assert retried_in_migration(TryAgainError("TRYAGAIN"))
    assert retried_in_migration(ClusterError("TTL exhausted."))
    assert not retried_in_migration(ResponseError("ERR unknown command"))
    assert not retried_in_migration(ClusterError("something else"))
