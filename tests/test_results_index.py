"""Every figure names its results: each `benchmarks/results/NAME` that README.md, docs/measurements.md or
docs/drafters.md mentions exists and has its line in the index (benchmarks/results/README.md), and the index lists
exactly what the folder holds."""
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
INDEX = RESULTS / "README.md"
CITING = (ROOT / "README.md", ROOT / "docs" / "measurements.md", ROOT / "docs" / "drafters.md")
MENTION = re.compile(r"benchmarks/results/([A-Za-z0-9_.\-]+)")
PLACEHOLDERS = {"NAME", "README.md"}       # the bench command's --out, the index itself


def indexed_names() -> set[str]:
    """The names in the first cell of each row of the index's table (a cell may hold several)."""
    names = set()
    for row in re.findall(r"^\| (.+?) \|", INDEX.read_text(encoding="utf-8"), flags=re.MULTILINE):
        names |= {name.rstrip("/") for name in re.findall(r"`([^`]+)`", row)}
    return names


def test_every_cited_result_exists_and_is_indexed():
    indexed = indexed_names()
    for document in CITING:
        cited = {name.rstrip(".").rstrip("/") for name in MENTION.findall(document.read_text(encoding="utf-8"))}
        cited -= PLACEHOLDERS
        assert cited, f"{document.name} names no results at all"
        missing = sorted(name for name in cited if not (RESULTS / name).exists())
        assert not missing, f"{document.name} cites results that are not in benchmarks/results/: {missing}"
        unindexed = sorted(cited - indexed)
        assert not unindexed, f"{document.name} cites results without a line in {INDEX.relative_to(ROOT)}: {unindexed}"


def test_the_index_lists_exactly_the_results_folder():
    present = {path.name for path in RESULTS.iterdir() if path.name != "README.md"}
    assert indexed_names() == present, ("not indexed", sorted(present - indexed_names()),
                                        "indexed but absent", sorted(indexed_names() - present))
