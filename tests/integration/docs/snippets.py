"""The code blocks of the README and docs/, as a reader finds them.

A block is a fenced code block with its language and the line it starts on. A reader who
follows a page runs its Python blocks top to bottom in one interpreter, so a page's blocks
share their names in that order. A block that cannot run on its own servers (it needs
Airflow's task context or a running stack) carries, on the line before its fence, the
marker ``<!-- snippet: skip <why> -->``; nothing else stops a block from being run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from types import CodeType

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SKIP = re.compile(r"<!-- snippet: skip (.+?) -->\n\Z")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its code and why it is not run."""

    path: Path
    line: int
    language: str
    code: str
    skip: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def compiled(self) -> CodeType:
        """The code compiled so a traceback names the page and the page's line numbers."""
        return compile("\n" * self.line + self.code, str(self.path.relative_to(ROOT)), "exec")


def blocks(path: Path, language: str | None = None) -> list[Block]:
    """The blocks of a page (of one language, if given), in page order."""
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        if language is not None and match.group(1) != language:
            continue
        before = text[:match.start()]
        marker = SKIP.search(before[-300:])
        found.append(Block(path, before.count("\n") + 1, match.group(1), match.group(2),
                           marker.group(1) if marker else None))
    return found


def section(path: Path, heading: str) -> str:
    """The text of a page's section, from its heading to the next ``## `` heading."""
    text = path.read_text()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def commands(prefix: str) -> list[tuple[Block, str]]:
    """Every line of a shell block of the docs that runs ``prefix`` (comments cut)."""
    return [(block, line.split("  #")[0].strip())
            for path in DOCS for block in blocks(path, "bash") if block.skip is None
            for line in block.code.splitlines() if line.startswith(prefix)]
