"""Progress bars on a terminal: a log line during indexing leaves no stale copy of the bars behind."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys

import pytest

pty = pytest.importorskip("pty")
termios = pytest.importorskip("termios")
fcntl = pytest.importorskip("fcntl")

SCRIPT = r"""
import logging, sys
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
from docpc_retrievers.progress import bars_drawn, progress_bar
with bars_drawn(REDIRECT):
    rendered = progress_bar(3, True, "rendered", position=0)
    committed = progress_bar(3, True, "committed", position=1)
    rendered.update(1)
    logging.getLogger("docpc_retrievers.indexing").warning("bad.pdf: encrypted")
    rendered.update(2)
    committed.update(3)
    rendered.close()
    committed.close()
"""


def _screen(raw: str, rows: int = 40) -> list[str]:
    """The lines a terminal shows after ``raw``: carriage return, line feed, cursor up and erase-to-end handled."""
    screen = [""] * rows
    row = col = 0
    i = 0
    while i < len(raw):
        ch = raw[i]
        esc = re.match(r"\x1b\[(\d*)([A-Za-z])", raw[i:])
        if esc:
            n = int(esc.group(1) or 1)
            if esc.group(2) == "A":
                row = max(row - n, 0)
            elif esc.group(2) == "K":
                screen[row] = screen[row][:col]
            i += esc.end()
            continue
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row += 1
        else:
            line = screen[row].ljust(col)
            screen[row] = line[:col] + ch + line[col + 1 :]
            col += 1
        i += 1
    return [line.rstrip() for line in screen if line.strip()]


def _run_in_terminal(redirect: bool) -> list[str]:
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))  # a size: tqdm draws to its width
    env = dict(os.environ, COLUMNS="100", TERM="xterm")
    code = SCRIPT.replace("REDIRECT", str(redirect))
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=terminal, stdout=terminal, stderr=terminal, env=env)
    os.close(terminal)
    out = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=60) == 0, out.decode(errors="replace")
    os.close(controller)
    return _screen(out.decode(errors="replace"))


def test_a_warning_among_the_bars_leaves_each_bar_once_on_screen() -> None:
    screen = _run_in_terminal(redirect=True)
    assert sum("committed" in line for line in screen) == 1, screen
    assert sum("rendered" in line for line in screen) == 1, screen
    assert any(line.startswith("WARNING") and "bad.pdf: encrypted" in line for line in screen), screen
    assert "100%" in next(line for line in screen if "committed" in line)
    assert not any(" 0%|" in line for line in screen), screen


def test_without_the_redirect_the_screen_keeps_a_stale_bar() -> None:
    """The failure the redirect fixes, shown by the same emulator (so the test above can fail)."""
    screen = _run_in_terminal(redirect=False)
    assert any(" 0%|" in line for line in screen), screen  # a bar's first state left on screen
    assert sum("rendered" in line or "committed" in line for line in screen) > 2, screen
