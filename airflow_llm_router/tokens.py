"""Token counting used for estimates before a call (the backend reports the actual usage)."""

from __future__ import annotations

from typing import TypeGuard

__all__ = ["count_input_tokens", "whole_number"]


def count_input_tokens(text: str) -> int:
    """Input tokens of ``text`` estimated as ``max(1, len(text) // 4)``.

    Four characters per token is the usual rule of thumb for English text; the simulator
    charges exactly this, so there estimated and charged input tokens agree.
    """
    return max(1, len(text) // 4)


def whole_number(value: object) -> TypeGuard[int]:
    """An int that is not a bool: a bool is an int in Python but no count (``True`` would
    count as 1 token, or 1 ms)."""
    return isinstance(value, int) and not isinstance(value, bool)
