"""Citations in the code point inside the repository: every `docs/algorithms.md#anchor` names a heading of
that file, and nothing cites a document the repository does not hold."""
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ROOT / "docs" / "algorithms.md"
CITATION = re.compile(r"docs/algorithms\.md#([a-z0-9-]+)")


def cited_files() -> list[Path]:
    """Code, docs and styles that may cite; this file is left out, it only names the pattern."""
    files = [ROOT / "app.py", ROOT / "README.md", *(ROOT / "pacer_core").rglob("*.py"),
             *(ROOT / "pacer_core").rglob("*.md"), *(ROOT / "benchmarks").glob("*.py"),
             *(ROOT / "tests").glob("*.py"), *(ROOT / "assets").glob("*.css")]
    return [path for path in files if path != Path(__file__).resolve()]


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_cited_anchor_exists():
    anchors = heading_anchors(ALGORITHMS.read_text())
    missing = [f"{path.relative_to(ROOT)}: #{anchor}" for path in cited_files()
               for anchor in CITATION.findall(path.read_text()) if anchor not in anchors]
    assert not missing, f"anchors not in docs/algorithms.md {sorted(anchors)}: {missing}"


def test_no_citation_of_a_file_outside_the_repository():
    stale = [str(path.relative_to(ROOT)) for path in cited_files() if "ALGORITHMS.md" in path.read_text()]
    assert not stale, stale
