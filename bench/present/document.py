"""The report as a list of blocks, rendered three ways: GitHub-flavoured markdown, self-contained
HTML, the terminal.

Building the content once and rendering it per format keeps report.md, report.html and the console
in agreement.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text
from tabulate import tabulate


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    # Column indices holding numbers: right-aligned so digits line up.
    numeric: frozenset[int] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Figure:
    path: Path
    caption: str


Block = Heading | Paragraph | Bullets | Table | Figure


# --- markdown -------------------------------------------------------------------------------------


def to_markdown(blocks: Sequence[Block], base: Path) -> str:
    """GitHub-flavoured markdown; figures are linked relative to `base`, the folder the file is
    written to."""
    return "\n\n".join(_markdown_block(block, base) for block in blocks) + "\n"


def _markdown_block(block: Block, base: Path) -> str:
    if isinstance(block, Heading):
        return f"{'#' * block.level} {block.text}"
    if isinstance(block, Paragraph):
        return block.text
    if isinstance(block, Bullets):
        return "\n".join(f"- {item}" for item in block.items)
    if isinstance(block, Table):
        return markdown_table(block)
    link = block.path.relative_to(base) if block.path.is_relative_to(base) else block.path
    return f"![{block.caption}]({link.as_posix()})\n\n*{block.caption}*"


def markdown_table(table: Table) -> str:
    """A pipe table, numbers right-aligned, as GitHub renders it; a literal '|' in a cell is
    escaped."""
    rows = [[cell.replace("|", "\\|") for cell in row] for row in table.rows]
    return tabulate(
        rows,
        headers=list(table.columns),
        tablefmt="pipe",
        colalign=_alignment(table),
        disable_numparse=True,
    )


def _alignment(table: Table) -> list[str]:
    return ["right" if i in table.numeric else "left" for i in range(len(table.columns))]


# --- html -----------------------------------------------------------------------------------------

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2rem auto; \
max-width: 1100px;
       padding: 0 1rem; color: #1f2328; line-height: 1.45; }
h1 { border-bottom: 1px solid #d0d7de; padding-bottom: .3rem; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .2rem; margin-top: 2.2rem; }
table { border-collapse: collapse; margin: .8rem 0; font-size: .92rem; }
th, td { border: 1px solid #d0d7de; padding: .3rem .7rem; }
th { background: #f6f8fa; text-align: left; }
td { font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fbfcfd; }
figure { margin: 1rem 0 1.6rem; }
figure img { max-width: 100%; border: 1px solid #d0d7de; }
figcaption { color: #57606a; font-size: .88rem; }
ul { padding-left: 1.4rem; }
"""


def to_html(blocks: Sequence[Block], title: str) -> str:
    """One self-contained page: the CSS inline and every figure embedded as a base64 PNG."""
    body = "\n".join(html_block(block) for block in blocks)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def html_block(block: Block) -> str:
    if isinstance(block, Heading):
        return f"<h{block.level}>{html.escape(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return f"<p>{html.escape(block.text)}</p>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{html.escape(item)}</li>" for item in block.items) + "</ul>"
    if isinstance(block, Table):
        return _html_table(block)
    data = base64.b64encode(block.path.read_bytes()).decode("ascii")
    caption = html.escape(block.caption)
    image = f'<img src="data:image/png;base64,{data}" alt="{caption}">'
    return f"<figure>{image}<figcaption>{caption}</figcaption></figure>"


def _html_table(table: Table) -> str:
    # tabulate's html format escapes every cell and header.
    return tabulate(
        [list(row) for row in table.rows],
        headers=list(table.columns),
        tablefmt="html",
        colalign=_alignment(table),
        disable_numparse=True,
    )


# --- terminal -------------------------------------------------------------------------------------


def to_console(blocks: Sequence[Block], console: Console) -> None:
    """Print blocks with rich; figures are listed by path. Text is never parsed as rich markup
    ("[+1.2%, ...]")."""
    for block in blocks:
        if isinstance(block, Heading):
            console.print(Text(block.text, style="bold" if block.level > 1 else "bold underline"))
        elif isinstance(block, Paragraph):
            console.print(Text(block.text))
        elif isinstance(block, Bullets):
            for item in block.items:
                console.print(Text(f"  • {item}"))
        elif isinstance(block, Table):
            console.print(rich_table(block))
        else:
            console.print(Text(f"  figure: {block.path}", style="dim"))


def rich_table(table: Table) -> RichTable:
    rich = RichTable(show_edge=False, header_style="bold")
    for i, column in enumerate(table.columns):
        rich.add_column(column, justify="right" if i in table.numeric else "left")
    for row in table.rows:
        rich.add_row(*(Text(cell) for cell in row))
    return rich
