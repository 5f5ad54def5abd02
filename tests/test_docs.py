"""Every page of the documentation site runs as written: its ```python blocks, page by page,
in order, in one namespace per page (tests/markdown_blocks.py), as the README's do."""

from __future__ import annotations

from pathlib import Path

import pytest
from markdown_blocks import run_page

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(DOCS.rglob("*.md"))


def test_the_docs_have_pages():
    assert (DOCS / "index.md") in PAGES and len(PAGES) > 20


def test_the_sites_home_gives_the_readmes_benchmark_figures():
    """The benchmark table is in the README and on the site's home page: the same rows (the
    site's had fallen behind, giving older figures)."""
    def rows(path: Path) -> list[str]:
        return [line for line in path.read_text().splitlines() if line.startswith("| W")]
    readme = rows(DOCS.parent / "README.md")
    assert len(readme) > 15 and rows(DOCS / "index.md") == readme


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_page_examples_run(page, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the examples write runs/ here
    run_page(page, monkeypatch)
    if page.name == "hooks.md":  # the outputs the page's comments show
        out = capsys.readouterr().out
        assert "dz/dy = tensor([ 12.,  48., 108.])" in out
        assert "tensor([ 24.,  96., 216.])" in out


def test_a_missing_requirement_skips_its_block_or_its_page(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n```python\nseen = [1]\n```\n\n"
                    "<!-- requires: gradlog_no_such_module -->\n"
                    "```python\nimport gradlog_no_such_module\n```\n\n"
                    "```python\nseen.append(2)\n```\n")
    assert run_page(page, monkeypatch)["seen"] == [1, 2]
    page.write_text("<!-- requires: json, gradlog_no_such_module -->\n" + page.read_text())
    with pytest.raises(pytest.skip.Exception, match="requires gradlog_no_such_module"):
        run_page(page, monkeypatch)
