"""The measured sections of the docs' benchmarks page, refreshed in place by the targets that measure them.

`make bench`, `make bench-peers`, `make bench-gpu`, `make bench-export`, `make bench-keras` and `make tune-check` each own the
text between `<!-- NAME:start -->` and `<!-- NAME:end -->` in docs/benchmarks.md, so a re-run on a quieter machine
updates the figures without touching the prose around them. (The README once held these sections;
the module keeps its name so that the commands' imports stay as they were.)
"""

from __future__ import annotations

import re
from pathlib import Path

from slipway import atomic
from slipway.paths import PROJECT_ROOT

BENCHMARKS_PAGE = PROJECT_ROOT / "docs" / "benchmarks.md"


def replace_section(page: Path, name: str, body: str) -> bool:
    """Put `body` between the section's markers (atomically); False, and nothing written, where they are absent."""
    if not page.is_file():
        return False
    text = page.read_text()
    pattern = re.compile(rf"(<!-- {re.escape(name)}:start -->\n).*?(<!-- {re.escape(name)}:end -->)", re.DOTALL)
    if not pattern.search(text):
        return False
    body = body if body.endswith("\n") else body + "\n"
    atomic.write_text(page, pattern.sub(lambda match: match.group(1) + body + match.group(2), text, count=1))
    return True
