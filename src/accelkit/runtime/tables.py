"""Results on the terminal: the console they print on and tables that fit its width (numbers and
file names never cut)."""

from __future__ import annotations

from dataclasses import dataclass


def stdout_reader_gone() -> bool:
    """Whether standard output is a pipe or socket whose reader has gone (poll says POLLERR:
    writing would raise EPIPE) — so that a `BrokenPipeError` is put down to stdout only when it
    is stdout's (typer exits 1 on any EPIPE)."""
    import select
    import sys

    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def stdout_is_null() -> bool:
    """Whether standard output is /dev/null now (what rich makes of it once its reader went
    away)."""
    import os
    import sys

    try:
        here, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (AttributeError, ValueError, OSError):
        return False
    return (here.st_dev, here.st_ino) == (null.st_dev, null.st_ino)


def stdout_console():
    """The console results and tables print on (stdout), after the activity line comes down: the
    terminal's width on a terminal, whole lines (140 columns) in logs and pipes unless `COLUMNS`
    says otherwise."""
    import os
    import sys

    from rich.console import Console

    from accelkit.runtime.progress import pause

    pause()
    wide = sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()
    return Console(width=None if wide else 140)


@dataclass(frozen=True)
class Col:
    """A column of a `fitting_table`: its header, whether it holds numbers (never wrapped or cut:
    the column is at least as wide as its widest cell; None: detected from the cells), a short
    header used when space is tight (explained in a legend under the table), and whether it names
    the row (repeated in every part when the table is split; default: the first column)."""

    header: str
    numeric: bool | None = None
    short: str | None = None
    key: bool = False


_NUMBER = None


def _looks_numeric(cells: list) -> bool:
    """Every cell a number, or a number as text with at most a short unit ("10.55 m", "3.1 GB/s")."""
    global _NUMBER
    import re

    if _NUMBER is None:
        _NUMBER = re.compile(
            r"^[-+]?(\d[\d,_]*\.?\d*|\.\d+|inf|nan)(e[-+]?\d+)?( ?[a-zA-Zµ%/]{1,5}[0-9]?)?$|^-$",
            re.IGNORECASE,
        )
    filled = [c for c in cells if c is not None and c != ""]
    return bool(filled) and all(
        isinstance(c, int | float) or (isinstance(c, str) and _NUMBER.match(c.strip()))
        for c in filled
    )


def fitting_table(
    title: str | None,
    columns: list,
    rows: list[list],
    *,
    width: int,
    caption: str | None = None,
    row_styles: list[str | None] | None = None,
    show_header: bool = True,
) -> list:
    """The one way accelkit draws a table: renderables that fit `width` columns without cutting a
    number, a unit or a file name.

    Cells are shown as plain text (no rich markup unless a cell is already a `rich.text.Text`).
    Numeric columns (`Col.numeric`, or detected: every cell a number, perhaps with a unit) are
    never narrower than their widest cell; text columns wrap between words, never inside one. The
    widths are chosen here (widest columns give way first, down to those minimums), not left to
    rich, whose squeezing cuts numbers. When the minimums do not fit, in this order: short
    headers with a legend; the columns split into several tables that each repeat the key
    columns; one field/value table per row (the vertical layout), where a path wider than the
    terminal breaks after a `/` (the file name stays whole) and only a word wider than the
    terminal itself is folded.
    """
    from rich.cells import cell_len
    from rich.text import Text

    columns = [c if isinstance(c, Col) else Col(str(c)) for c in columns]
    texts = [
        [c if isinstance(c, Text) else Text("" if c is None else str(c)) for c in row]
        for row in rows
    ]
    numeric = [
        c.numeric if c.numeric is not None else _looks_numeric([row[i] for row in rows])
        for i, c in enumerate(columns)
    ]
    styles = row_styles or [None] * len(rows)

    def span(i: int, header: str) -> tuple[int, int]:
        """(narrowest, widest) content width of column i: the narrowest keeps every number whole
        and every word (header's too) on one line; the widest puts each cell on one line."""
        lines = [line for row in texts for line in row[i].plain.splitlines()]
        words = [w for line in [*lines, header] for w in line.split()]
        whole = max((cell_len(line) for line in lines), default=0)
        narrow = max((cell_len(w) for w in words), default=0)
        return (max(whole, narrow) if numeric[i] else narrow), max(whole, cell_len(header), 1)

    def header_of(i: int, short: bool) -> str:
        return columns[i].short if short and columns[i].short else columns[i].header

    def widths(indices: list[int], short: bool) -> list[int] | None:
        """Content widths that fit `width` (borders: one per column and one more; padding: two
        per column), or None."""
        spans = [span(i, header_of(i, short)) for i in indices]
        room = width - (len(indices) + 1) - 2 * len(indices)
        chosen = [hi for _, hi in spans]
        if sum(lo for lo, _ in spans) > room:
            return None
        excess = sum(chosen) - room
        while excess > 0:  # the widest column that can still give way gives one cell
            j = max(
                (k for k in range(len(chosen)) if chosen[k] > spans[k][0]),
                key=lambda k: chosen[k],
            )
            chosen[j] -= 1
            excess -= 1
        return chosen

    def build(indices: list[int], short: bool, sizes: list[int], part: str = ""):
        from rich.table import Table

        legend = [
            f"{columns[i].short} = {columns[i].header}"
            for i in indices
            if short and columns[i].short
        ]
        notes = "; ".join(filter(None, [caption, "; ".join(legend)])) or None
        table = Table(
            title=None if title is None else title + part, caption=notes, show_header=show_header
        )
        for i, size in zip(indices, sizes, strict=True):
            table.add_column(
                header_of(i, short),
                justify="right" if numeric[i] else "left",
                overflow="fold",
                width=size,
            )
        for row, style in zip(texts, styles, strict=False):
            table.add_row(
                *(_break_paths(row[i], size) for i, size in zip(indices, sizes, strict=True)),
                style=style,
            )
        return table

    everything = list(range(len(columns)))
    has_short = any(c.short for c in columns)
    for short in (False, True) if has_short else (False,):
        sizes = widths(everything, short)
        if sizes is not None:
            return [build(everything, short, sizes)]
    keys = [i for i, c in enumerate(columns) if c.key] or [0]
    rest = [i for i in everything if i not in keys]
    groups: list[list[int]] = []
    for i in rest:
        if groups and widths([*keys, *groups[-1], i], has_short) is not None:
            groups[-1].append(i)
        elif widths([*keys, i], has_short) is not None:
            groups.append([i])
        else:
            groups = []
            break
    if len(groups) > 1:  # as many parts as needed, their columns shared out evenly when that fits
        size, extra = divmod(len(rest), len(groups))
        even, start = [], 0
        for n in range(len(groups)):
            stop = start + size + (n < extra)
            even.append(rest[start:stop])
            start = stop
        if all(widths(keys + g, has_short) is not None for g in even):
            groups = even
    fitted = [(keys + g, widths(keys + g, has_short)) for g in groups]  # each group fits
    if groups:
        return [
            build(part, has_short, sizes, f" ({n}/{len(groups)})")
            for n, (part, sizes) in enumerate(fitted, 1)
            if sizes is not None
        ]
    return _vertical(title, columns, texts, styles, caption, width)


def _break_paths(cell, size: int):
    """A cell whose path (or URL) is wider than its column, broken after a `/` instead of inside
    a name: the file name at the end stays whole wherever it fits on a line."""
    from rich.cells import cell_len
    from rich.text import Text

    plain = cell.plain
    if not cell.spans and "/" in plain and any(cell_len(w) > size for w in plain.split()):
        lines = []
        for line in plain.split("\n"):
            words = []
            for word in line.split(" "):
                if cell_len(word) <= size or "/" not in word:
                    words.append(word)
                    continue
                pieces, current = [], ""
                for n, part in enumerate(word.split("/")):
                    piece = part if n == 0 else "/" + part
                    if current and cell_len(current + piece) > size:
                        pieces.append(current)
                        current = piece
                    else:
                        current += piece
                pieces.append(current)
                words.append("\n".join(pieces))
            lines.append(" ".join(words))
        return Text("\n".join(lines), style=cell.style)
    return cell


def _vertical(title, columns, texts, styles, caption, width: int) -> list:
    """One two-column table per row: the headers down the left, the values (wrapped) on the right."""
    from rich.table import Table

    header_width = max(len(c.header) for c in columns)
    out = []
    for n, (row, style) in enumerate(zip(texts, styles, strict=False), 1):
        table = Table(
            title=None if title is None else f"{title} ({n}/{len(texts)})",
            show_header=False,
            caption=caption if n == len(texts) else None,
        )
        table.add_column("field", min_width=header_width, overflow="fold", style="bold")
        table.add_column("value", overflow="fold")
        for column, cell in zip(columns, row, strict=False):
            table.add_row(column.header, _break_paths(cell, width - header_width - 7), style=style)
        out.append(table)
    return out


def print_table(
    title: str | None,
    columns: list,
    rows: list[list],
    *,
    console=None,
    caption: str | None = None,
    row_styles: list[str | None] | None = None,
    show_header: bool = True,
) -> None:
    """Print a `fitting_table` on `console` (default: `stdout_console()`), at its width."""
    console = console or stdout_console()
    for renderable in fitting_table(
        title,
        columns,
        rows,
        width=console.width,
        caption=caption,
        row_styles=row_styles,
        show_header=show_header,
    ):
        console.print(renderable)
