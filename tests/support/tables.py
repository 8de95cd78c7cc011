"""Tables at a terminal's width: the widths the tests render at, and a table that is whole at one."""

from __future__ import annotations

from rich.cells import cell_len

from accelkit.runtime.tables import _looks_numeric

WIDTHS = (80, 120)


def assert_whole(text: str, width: int, cells) -> None:
    """Every table line within `width`; every number (with its unit) and every word of every text
    cell (a file name is one word) on one line of `text`."""
    for line in text.splitlines():
        if BOX & set(line):
            assert cell_len(line) <= width, line
    lines = text.splitlines()
    for cell in cells:
        cell = str(cell)
        parts = [cell] if _looks_numeric([cell]) else cell.split()
        for part in parts:
            assert any(part in line for line in lines), (part, text)


BOX = set("│┃┏┓┗┛┡┩└┘┌┐━─╇┳┻╋┼")
