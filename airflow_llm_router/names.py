"""The model-name rule, shared by the engine (Redis keys) and the task store (enqueue).

A foundation module: it imports nothing of the package but :mod:`exceptions`, so both the
engine and the store can check names the same way without importing each other. A name
the store accepts is a name the engine can admit, so a task with a bad name is refused at
enqueue instead of failing later inside a drain.
"""

from __future__ import annotations

import re

from airflow_llm_router.exceptions import ModelNameError

__all__ = [
    "DEFAULT_KIND",
    "MAX_KIND_CHARS",
    "MODEL_NAME_RE",
    "MODEL_NAME_RULE",
    "kind_problem",
    "validate_model_name",
]

#: Model names become part of Redis keys and lease ids: no braces (hash tags), no '#'
#: (lease ids), no '|' (counters), no spaces.
MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")

#: The rule in words, for error messages and docs.
MODEL_NAME_RULE = "use 1-128 letters, digits or '. _ : / @ + -', starting with a letter or digit"


def validate_model_name(field: str, value: object) -> str:
    """Return ``value`` if it is a usable model name, else raise naming ``field`` and the rule.

    :param field: what the caller calls the value (``'model'``, ``'allowed_models[2]'``).
    :raises ModelNameError: a :class:`QuotaValidationError` and a :class:`TaskValidationError`,
        so the engine and the store each raise their usual error type.
    """
    if not isinstance(value, str) or not MODEL_NAME_RE.match(value):
        raise ModelNameError(field, f"{value!r} is not a valid model name ({MODEL_NAME_RULE})")
    return value


#: The kind of a task enqueued without one; the engine learns no separate estimate for it.
DEFAULT_KIND = "default"

#: Longest task ``kind`` label (a task's type: estimates are learned per model and kind).
MAX_KIND_CHARS = 100


def kind_problem(kind: object) -> str | None:
    """What is wrong with ``kind`` as a task kind label (with the fix), or None if usable.

    Shared by the store (enqueue) and the engine (admission), so a kind the store accepts
    is one the engine can learn from.
    """
    if not isinstance(kind, str) or not kind.strip():
        return f"must be a non-empty string, got {kind!r}"
    if len(kind) > MAX_KIND_CHARS:
        return f"has {len(kind)} characters; use a short label of at most {MAX_KIND_CHARS}"
    if not kind.isprintable():
        return ("must be printable text (no control characters, line breaks or lone "
                "surrogates); use a short label such as 'summary'")
    return None
