"""What PostgreSQL ``text`` and ``jsonb`` can hold, checked in one place for every string
the store writes.

Two answers to text PostgreSQL cannot store (NUL, a lone surrogate): what a caller *hands*
the store (a prompt, a key, metadata, a name) is refused with the reason
(:func:`text_problem`, :func:`metadata_json`), so the caller fixes its input; what a backend
*answered* (an answer, an error) is repaired (:func:`clean_text`, :func:`clean_error`),
because refusing it would throw away a paid call. A task's metadata is also checked here for
the call options it may carry (``llm_call``), as it is turned into the JSON stored.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.llm_call import METADATA_KEY, check_call_options
from airflow_llm_router.store.records import MAX_ERROR_CHARS

#: Largest metadata dict of one task, as compact JSON (characters).
MAX_METADATA_CHARS = 65_536
#: Deepest nesting of metadata.
_MAX_DEPTH = 32

_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why PostgreSQL text/jsonb cannot hold ``value`` (None if it can); never quotes it."""
    if "\x00" in value:
        return f"contains a NUL character at index {value.index(chr(0))}, which PostgreSQL " \
               "cannot store; remove it"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        code = ord(value[err.start])
        return (f"contains a lone surrogate (U+{code:04X}) at index {err.start}, which is not "
                "valid Unicode and PostgreSQL cannot store; decode the source text with "
                "errors='replace'")
    return None


def clean_text(value: str) -> str:
    """PostgreSQL text cannot hold NUL, nor UTF-8 a lone surrogate (a backend's JSON may
    decode to one): replace them with U+FFFD rather than fail a whole chunk of answers."""
    value = value.replace("\x00", "\ufffd")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", value)
    return value


def clean_error(error: object) -> str:
    """Make an error message storable: a string, no NUL, at most ``MAX_ERROR_CHARS``."""
    text = clean_text(str(error))
    if len(text) > MAX_ERROR_CHARS:
        cut = len(text) - MAX_ERROR_CHARS
        text = f"{text[:MAX_ERROR_CHARS]}... [{cut} more characters truncated]"
    return text


def validate_metadata(metadata: object, count: int) -> list[str]:
    """One JSON document per prompt: a shared dict, or a list with one dict per prompt."""
    if metadata is None:
        return ["{}"] * count
    if isinstance(metadata, Mapping):
        return [metadata_json("metadata", metadata)] * count
    if isinstance(metadata, Sequence) and not isinstance(metadata, (str, bytes)):
        if len(metadata) != count:
            raise TaskValidationError(
                "metadata", f"has {len(metadata)} entries for {count} prompts; give one dict per "
                "prompt or a single dict for all")
        return [metadata_json(f"metadata[{i}]", m) for i, m in enumerate(metadata)]
    raise TaskValidationError(
        "metadata", "must be a dict, a list of dicts (one per prompt) or None")


def metadata_json(field: str, value: object) -> str:
    """One task's metadata dict as compact JSON, refused (naming ``field``) if jsonb cannot
    hold it as given or it is over :data:`MAX_METADATA_CHARS`, or if its call options
    (``llm_call``, :mod:`airflow_llm_router.llm_call`) are not ones a protocol can send."""
    if not isinstance(value, Mapping):
        raise TaskValidationError(field, f"must be a dict, got {type(value).__name__}")
    if METADATA_KEY in value:
        check_call_options(value[METADATA_KEY], f"{field}.{METADATA_KEY}")
    if problem := _json_problem(value, "", 0):
        raise TaskValidationError(field, problem)
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as err:
        raise TaskValidationError(field, f"must be JSON-serialisable: {err}") from err
    if len(text) > MAX_METADATA_CHARS:
        raise TaskValidationError(
            field, f"is {len(text)} characters as JSON, more than {MAX_METADATA_CHARS}; keep "
            "references in metadata, not documents")
    return text


def _json_problem(value: object, path: str, depth: int) -> str | None:
    """What jsonb would refuse or silently change in ``value`` (None if nothing)."""
    where = f" at {path}" if path else ""
    if depth > _MAX_DEPTH:
        return f"is nested deeper than {_MAX_DEPTH} levels{where}"
    if isinstance(value, str):
        problem = text_problem(value)
        return f"has a string that {problem}{where}" if problem else None
    if value is None or isinstance(value, (bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"has {value!r}{where}, which JSON cannot hold"
    if isinstance(value, Mapping):
        return _mapping_problem(value, path, depth)
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if problem := _json_problem(item, f"{path}[{i}]", depth + 1):
                return problem
        return None
    return f"has a {type(value).__name__}{where}, which is not JSON; use str, number, bool, " \
           "None, list or dict"


def _mapping_problem(value: Mapping[object, object], path: str, depth: int) -> str | None:
    where = f" at {path}" if path else ""
    for key, item in value.items():
        if not isinstance(key, str):
            return f"has the non-string key {key!r}{where}; JSON keys are strings"
        if problem := text_problem(key):
            return f"has a key that {problem}{where}"
        if problem := _json_problem(item, f"{path}.{key}" if path else key, depth + 1):
            return problem
    return None
