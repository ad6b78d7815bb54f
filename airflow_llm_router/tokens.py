"""Token counting used for estimates before a call (the backend reports the actual usage)."""

from __future__ import annotations

__all__ = ["count_input_tokens"]


def count_input_tokens(text: str) -> int:
    """Input tokens of ``text`` estimated as ``max(1, len(text) // 4)``.

    Four characters per token is the usual rule of thumb for English text; the simulator
    charges exactly this, so there estimated and charged input tokens agree.
    """
    return max(1, len(text) // 4)
