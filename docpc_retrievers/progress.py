"""Progress of long work on stderr: tqdm bars on a terminal, a plain line every few seconds elsewhere.

Lines go to the ``docpc_retrievers.progress`` logger, which the command line prints as ``docpc: ...`` (a log
file or CI output gets totals without ``-v``); Python callers see them only if they configure logging.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["PROGRESS", "bars_drawn", "progress_bar", "shrink"]

PROGRESS = logging.getLogger("docpc_retrievers.progress")


class _NullBar:
    total = 0

    def update(self, n: int = 1) -> None:
        pass

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


class _LineBar:
    """``desc: done of total`` as a log line at most every ``every`` seconds, and once at the end."""

    def __init__(self, total: int, desc: str, every: float) -> None:
        self.total, self.desc, self.every = total, desc, every
        self.done, self._last = 0, time.monotonic()
        self._said: tuple[int, int] | None = None  # the last line's (done, total): never said twice

    def update(self, n: int = 1) -> None:
        self.done += n
        if time.monotonic() - self._last >= self.every:
            self._line()

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        if self.total and self._said != (self.done, self.total):
            self._line()

    def _line(self) -> None:
        self._last = time.monotonic()
        self._said = (self.done, self.total)
        PROGRESS.info("%s %d of %d", self.desc, self.done, self.total)


def shrink(bar: Any, n: int = 1) -> None:
    """Take ``n`` files out of a bar's total: files that turned out to need no work (unchanged, or nothing to
    commit), so that "rendered 8 of 8" is never said of a run that rendered nothing."""
    bar.total = max(0, (bar.total or 0) - n)
    bar.refresh()


def progress_bar(total: int, enabled: bool, desc: str, *, position: int = 0, every: float = 5.0) -> Any:
    """A tqdm bar on a terminal, plain lines every ``every`` seconds elsewhere, nothing when not ``enabled``."""
    if not enabled:
        return _NullBar()
    if not sys.stderr.isatty():
        return _LineBar(total, desc, every)
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="pdf", file=sys.stderr, position=position)


@contextlib.contextmanager
def bars_drawn(enabled: bool) -> Iterator[None]:
    """While tqdm bars are on the terminal, log lines go through ``tqdm.write``.

    Why: a warning written straight to stderr lands over the bars, which tqdm then redraws below it, so each
    bar's earlier state stays on screen above (a failed PDF left "committed 0%" over "committed 100%").
    """
    if not enabled or not sys.stderr.isatty():
        yield
        return
    from tqdm.contrib.logging import logging_redirect_tqdm

    with logging_redirect_tqdm(loggers=[logging.getLogger(), PROGRESS]):
        yield
