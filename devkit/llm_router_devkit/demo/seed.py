"""The demo's backlog: varied, deterministic prompts, enqueued into the task store.

Prompts are made from fixed templates and a fixed vocabulary with a seeded
:class:`random.Random`, so the same ``(n, seed)`` always gives the same backlog (and, with
the simulator's hashed draws, the same cost). No prompt holds anything secret or personal.

The mix: most tasks allow any model; some kinds carry an ordered preference list (code to
the coder, proofs to the reasoners, long documents to the long-context model, careful
replies to the scarce premium model), each with a roomier model to overflow to; a few are
hot. Lengths vary from a sentence to a few pages.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

__all__ = ["KINDS", "SeedTask", "make_backlog", "seed_store"]

_VOCABULARY = (
    "account adapter airport analysis answer archive balance basket battery bridge budget "
    "cache calendar camera canal carbon catalogue channel climate cluster coffee column "
    "compiler contract copper corridor customer dataset delivery depot design desk device "
    "engine estimate factory feedback festival field filter forecast forest garden gateway "
    "glacier harbour helmet history holiday index invoice island journey kernel kitchen "
    "ladder lantern ledger library license market meadow meeting memory metric mirror "
    "module monitor mountain network notebook orchard package palette parcel pipeline "
    "planet platform pocket policy portal printer protocol quarry quota railway recipe "
    "record region report river router sample schedule sensor server shelf signal "
    "station storage stream summary supplier survey switch ticket timber timeline tower "
    "traffic treaty tunnel update valley vendor village voltage warehouse window workshop"
)
_WORDS = tuple(_VOCABULARY.split())


@dataclass(frozen=True)
class _Kind:
    name: str
    share: float  # fraction of the backlog
    prefer: tuple[str, ...] | None  # ordered allowed models, None = any model
    words: tuple[int, int]  # body length range, in words
    template: str


#: The kinds of task in the demo backlog (shares add up to 1).
KINDS: tuple[_Kind, ...] = (
    _Kind("qa", 0.30, None, (8, 40),
          "Answer briefly: what is the role of the {a} in a {b}? {body}"),
    _Kind("summary", 0.20, None, (60, 400),
          "Summarise these meeting notes in three bullet points:\n{body}"),
    _Kind("translation", 0.12, None, (10, 80), "Translate into French: {body}"),
    _Kind("classification", 0.10, None, (15, 120),
          "Classify the sentiment of this review as positive, negative or neutral: {body}"),
    _Kind("code", 0.09, ("coder", "chat-large"), (20, 200),
          "Write a Python function that sorts {a} records by {b}. Context: {body}"),
    _Kind("reasoning", 0.08, ("reasoner-small", "reasoner-large", "chat-large"), (20, 150),
          "Reason step by step: how many {a} fit in a {b}, given that {body}"),
    _Kind("long_document", 0.07, ("long-context", "chat-large"), (600, 1500),
          "Extract every date and amount from this document:\n{body}"),
    _Kind("careful_reply", 0.04, ("premium-scarce", "chat-medium"), (30, 200),
          "Draft a careful, polite reply to this customer message: {body}"),
)

_HOT_SHARE = 0.05


@dataclass(frozen=True)
class SeedTask:
    """One task to enqueue: the prompt and how it may be routed."""

    prompt: str
    kind: str
    allowed_models: tuple[str, ...] | None
    priority: str


def _body(rng: random.Random, lo: int, hi: int) -> str:
    n = rng.randint(lo, hi)
    words = rng.choices(_WORDS, k=n)
    sentences = [" ".join(words[i:i + 12]).capitalize() + "." for i in range(0, n, 12)]
    return " ".join(sentences)


def make_backlog(n: int, *, seed: int = 1, models: Sequence[str] | None = None) -> list[SeedTask]:
    """``n`` varied tasks, the same for the same ``(n, seed, models)``.

    :param models: the backend's models; preference lists keep only these (a list left
        empty means any model). ``None`` keeps the lists as written.
    """
    rng = random.Random(seed)
    kinds = list(KINDS)
    weights = [k.share for k in kinds]
    known = set(models) if models is not None else None
    tasks = []
    for i in range(n):
        kind = rng.choices(kinds, weights)[0]
        prompt = kind.template.format(a=rng.choice(_WORDS), b=rng.choice(_WORDS),
                                      body=_body(rng, *kind.words))
        allowed = kind.prefer
        if allowed is not None and known is not None:
            allowed = tuple(m for m in allowed if m in known) or None
        priority = "hot" if rng.random() < _HOT_SHARE else "bulk"
        tasks.append(SeedTask(f"[task {i + 1}] {prompt}", kind.name, allowed, priority))
    return tasks


def seed_store(store: Any, tasks: Sequence[SeedTask]) -> list[int]:
    """Enqueue ``tasks`` in order (runs of alike tasks share one statement); their ids."""
    ids: list[int] = []
    for (kind, allowed, priority), run in groupby(
        tasks, key=lambda t: (t.kind, t.allowed_models, t.priority)
    ):
        ids += store.enqueue([t.prompt for t in run], priority=priority,
                             allowed_models=list(allowed) if allowed else None, kind=kind)
    return ids


def groups(tasks: Sequence[SeedTask]) -> Counter[tuple[str, ...] | None]:
    """How many tasks allow each set of models (``None``: any model), for the bound."""
    return Counter(t.allowed_models for t in tasks)
