"""Assembling the scripts: a library's functions an operation never calls are left out."""

from __future__ import annotations

import re

import pytest

from airflow_llm_router.engine.scripts import OPERATIONS, _prune, script_source

LIB = """\
local used, unused_fwd
local T = {}
do
local K = 2
local function helper(x) return x * K end
local function only_for_dead(x) return x + 1 end
local function dead(x)
  if x then
    for _ = 1, 2 do x = only_for_dead(x) end
  end
  return x
end
function used(x) return helper(x) end
function unused_fwd(x) return x end
function T.kept(x) return x end
function T.dropped(x) return x end
end
-- dead(1) and 'T.dropped' named in a comment, or a string, do not keep them
local s = 'dead(1)'
return used(T.kept(1))
"""


def _defined(text: str) -> set[str]:
    return set(re.findall(r"^(?:local\s+)?function\s+([\w.]+)", text, re.M))


def test_functions_nothing_calls_are_left_out_with_what_only_they_call() -> None:
    got = _prune(LIB)
    assert _defined(got) == {"helper", "used", "T.kept"}
    # the rest of the text is as it was: declarations, the block, the main code
    assert "local used, unused_fwd" in got
    assert got.endswith("return used(T.kept(1))\n")
    assert _prune(got) == got


def test_unbalanced_blocks_are_refused() -> None:
    with pytest.raises(ValueError, match="unbalanced"):
        _prune("local function f()\n  if x then\n    return 1\nend\n")


@pytest.mark.parametrize("operation", OPERATIONS)
def test_every_function_a_script_calls_is_defined_in_it(operation: str) -> None:
    text = re.sub(r"--[^\n]*", "", script_source(operation))
    called = set(re.findall(r"(?<![\w.:])([a-z_][a-z0-9_]*)\(", text))
    keywords = {"function", "if", "and", "or", "not", "return", "elseif", "until", "while"}
    builtins = {"ipairs", "pairs", "tonumber", "tostring", "type", "unpack", "error",
                "setmetatable", "rawget", "rawset", "select", "pcall", "next", "assert"}
    defined = set(re.findall(r"\bfunction\s+([a-z_][a-z0-9_]*)\s*\(", text))
    locals_ = set(re.findall(r"\blocal\s+([a-z_][a-z0-9_]*)\s*=\s*function", text))
    missing = called - keywords - builtins - defined - locals_
    # locals holding a function value made elsewhere (a walk's iterator, a callback)
    values = {name for name in missing
              if re.search(r"\b(?:local\s+)?(?:[\w, ]*,\s*)?" + name + r"\s*(?:,[\w ,]*)?=",
                           text)}
    params = {name for name in missing
              if re.search(r"function[\w. ]*\([^)]*\b" + name + r"\b[^)]*\)", text)}
    assert missing - values - params == set(), operation
