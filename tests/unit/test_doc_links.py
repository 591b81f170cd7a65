"""README.md is the front door and docs/ holds the rest: every relative link and #anchor in them
resolves, anchors by GitHub's heading slugs, and README stays short.

Only links that are present are checked: a page nobody links to yet cannot break the test."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300

FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
MULTILINE_CODE_SPAN = re.compile(r"(`+)((?:(?!\n\n).)+?)\1", re.S)  # not across a paragraph
# [text](target) and ![alt](target); the target ends at whitespace (a title may follow) or ")"
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:, ...


def prose_lines(text: str) -> Iterable[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match:
            if fence is None:
                fence = match[1]
            elif match[1] == fence:
                fence = None
            continue
        if fence is None:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text (code spans and links as their text),
    lower-cased, punctuation removed, each space a '-'."""
    text = CODE_SPAN.sub(lambda m: m[2], heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = "".join(ch for ch in text.lower() if ch.isalnum() or ch in "-_ ")
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page has: its headings' slugs (a repeated one gets -1, -2, ...) and
    explicit HTML anchors."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(text):
        heading = HEADING.match(line)
        if heading:
            base = slug(heading[2])
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(HTML_ANCHOR.findall(line))
    return found


def links(text: str) -> Iterable[tuple[int, str]]:
    """(line number, target) of every link outside code blocks and code spans; a link's text
    may run over a line break."""
    kept = dict(prose_lines(text))
    prose = "\n".join(kept.get(n, "") for n in range(1, text.count("\n") + 2))
    # code spans become blanks of their length, so positions (and line numbers) stay
    prose = MULTILINE_CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), prose)
    for match in LINK.finditer(prose):
        yield prose.count("\n", 0, match.start(1)) + 1, match[1]


@dataclass(frozen=True)
class Broken:
    page: str
    line: int
    target: str
    why: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.target} ({self.why})"


def broken_links(root: Path, pages: Iterable[Path]) -> list[Broken]:
    """Every relative link in `pages` whose file or #anchor does not exist under `root`."""
    broken: list[Broken] = []
    cache: dict[Path, set[str]] = {}
    for page in pages:
        text = page.read_text("utf-8")
        name = str(page.relative_to(root))
        for number, target in links(text):
            if EXTERNAL.match(target):
                continue
            path_part, _, anchor = target.partition("#")
            path_part = path_part.split("?", 1)[0]
            resolved = (page.parent / path_part).resolve() if path_part else page
            if path_part and not resolved.exists():
                broken.append(Broken(name, number, target, "no such file"))
                continue
            if not anchor:
                continue
            if resolved.is_dir() or resolved.suffix != ".md":
                broken.append(Broken(name, number, target, "an anchor into a non-Markdown file"))
                continue
            if resolved not in cache:
                cache[resolved] = anchors(resolved.read_text("utf-8"))
            if anchor not in cache[resolved]:
                broken.append(Broken(name, number, target, "no such heading"))
    return broken


def documentation() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_link_and_anchor_in_readme_and_docs_resolves() -> None:
    broken = broken_links(ROOT, documentation())
    assert broken == [], "\n".join(map(str, broken))


def test_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text("utf-8").count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines: move detail into docs/"


def test_docs_has_an_index_linking_every_page() -> None:
    """docs/README.md names every page directly under docs/ (and README.md links the index)."""
    index = (ROOT / "docs" / "README.md").read_text("utf-8")
    targets = {target.partition("#")[0] for _, target in links(index)}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages - targets == set()
    readme = {target for _, target in links((ROOT / "README.md").read_text("utf-8"))}
    assert "docs/README.md" in readme


# -- the checker itself, on pages made here ------------------------------------------------------


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("Upstream slow, or your app slow?", "upstream-slow-or-your-app-slow"),
        ("Test your app's stream handling", "test-your-apps-stream-handling"),
        ("`sseproxy report`: the summary", "sseproxy-report-the-summary"),
        ("a: 50 x 200 @ 20 ms", "a-50-x-200--20-ms"),
        ("max_gap_ms and client_wait_ms", "max_gap_ms-and-client_wait_ms"),
        ("One hostile peer: fairness and memory", "one-hostile-peer-fairness-and-memory"),
        ("See [the record](record.md)", "see-the-record"),
    ],
)
def test_slugs_follow_github(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_repeated_headings_get_numbered_anchors() -> None:
    text = "# Page\n## Notes\n## Notes\n## Notes\n"
    assert anchors(text) == {"page", "notes", "notes-1", "notes-2"}


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_checker_finds_each_kind_of_broken_link(tmp_path: Path) -> None:
    write(tmp_path, "docs/other.md", "# Other\n\n## Real heading\n")
    write(tmp_path, "docs/pic.png", "")
    page = write(
        tmp_path,
        "README.md",
        "# Front\n\n## Here\n\n"
        "[ok](docs/other.md) [ok](docs/other.md#real-heading) [ok](#here) ![ok](docs/pic.png)\n"
        "[ok](https://example.com/missing.md) [ok](docs/)\n"
        "[gone](docs/missing.md)\n"
        "[bad anchor](docs/other.md#no-such-heading)\n"
        "[bad local](#nowhere)\n"
        "[anchor in a picture](docs/pic.png#x)\n"
        "[a link whose text runs\nover a line](#gone-too)\n"
        "```\n[in code](nowhere.md)\n```\n"
        "`[in a span](nowhere.md)`\n",
    )
    found = broken_links(tmp_path, [page])
    assert [(b.line, b.target, b.why) for b in found] == [
        (7, "docs/missing.md", "no such file"),
        (8, "docs/other.md#no-such-heading", "no such heading"),
        (9, "#nowhere", "no such heading"),
        (10, "docs/pic.png#x", "an anchor into a non-Markdown file"),
        (12, "#gone-too", "no such heading"),
    ]


def test_links_resolve_from_the_linking_page_folder(tmp_path: Path) -> None:
    """docs/agents/x.md's `../record.md` is docs/record.md, not a file beside README."""
    write(tmp_path, "docs/record.md", "# The record\n## Fields\n")
    good = write(tmp_path, "docs/agents/x.md", "[f](../record.md#fields)\n")
    bad = write(tmp_path, "docs/agents/y.md", "[f](record.md#fields)\n")
    assert broken_links(tmp_path, [good]) == []
    assert [b.why for b in broken_links(tmp_path, [bad])] == ["no such file"]
