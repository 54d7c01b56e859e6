"""The documents stay a house a newcomer can read: README.md is short and opens with the two commands, every results
folder is cited by a document (README.md or docs/*.md), and every relative link in those documents resolves."""
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "benchmarks" / "results"
README_MAX_LINES = 250
TWO_COMMANDS = ("bash setup.sh && .venv/bin/python app.py",
                "bash setup.sh --test && .venv/bin/python -m pytest -q tests")
CITATION = re.compile(r"benchmarks/results/([A-Za-z0-9_.\-]+)")
MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HTML_SOURCE = re.compile(r"<img[^>]*\ssrc=\"([^\"]+)\"")
EXTERNAL = ("http://", "https://", "mailto:", "#")


def documents() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def relative_links(document: Path) -> list[str]:
    """Link targets inside the repository: markdown links and images, and HTML images; anchors dropped."""
    text = document.read_text(encoding="utf-8")
    targets = MARKDOWN_LINK.findall(text) + HTML_SOURCE.findall(text)
    return [target.split("#", 1)[0] for target in targets if not target.startswith(EXTERNAL)]


def test_readme_is_short_and_opens_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES} wanted"
    assert lines[0] == "---", "the Hugging Face Space's front matter must stay at the very top"
    positions = [text.find(command) for command in TWO_COMMANDS]
    assert all(position >= 0 for position in positions), f"README.md lacks one of {TWO_COMMANDS}"
    first_section = text.find("\n## ")
    assert max(positions) < text.find("\n## ", first_section + 1), "the two commands come first, in the first section"


def test_every_results_folder_is_cited_by_a_document():
    cited = {name.rstrip("./") for document in documents()
             for name in CITATION.findall(document.read_text(encoding="utf-8"))}
    present = {path.name for path in RESULTS.iterdir() if path.name != "README.md"}
    uncited = sorted(present - cited)
    assert not uncited, (f"results no document (README.md, docs/*.md) cites: {uncited}; "
                         "cite each from docs/measurements.md or remove it (git keeps it)")


def test_every_relative_link_resolves():
    broken = [f"{document.relative_to(ROOT)}: {target}" for document in documents()
              for target in relative_links(document) if target and not (document.parent / target).exists()]
    assert not broken, broken
