"""Every assembled script compiles in Redis with room to grow: Lua allows a function at most
200 locals in scope at once, and a script's libraries all share its main function
(``airflow_llm_router/engine/scripts.py``). At the limit, one more local in any library
that ``admit`` loads stops every admission from compiling."""

from __future__ import annotations

import pytest
import redis

from airflow_llm_router.engine.scripts import OPERATIONS, script_source

#: locals a change may add to any library before this test asks for more room
ROOM = 16


@pytest.mark.parametrize("operation", OPERATIONS)
def test_each_script_has_room_for_more_locals(operation: str, redis_url: str) -> None:
    padding = "".join(f"local _room_{k} = nil\n" for k in range(ROOM))
    with redis.Redis.from_url(redis_url) as client:
        try:
            client.script_load(padding + script_source(operation))
        except redis.ResponseError as err:
            pytest.fail(f"{operation}: fewer than {ROOM} locals to spare ({err}); move a "
                        "library's own constants and helpers into its do ... end block "
                        "(see lib/kinds.lua)")
