"""Progress of long work (restores, rebuilds, re-publishing, catching up) for a person.

Long work logs a line about every second with ``extra=progress(done, total)``. How that
line is shown is the handler's business (:class:`ProgressHandler`, installed by the
``sow`` command): on a terminal, one line rewritten in place, with a bar and a percentage
when the total is known; anywhere else, an ordinary log line.

A child process whose log lines its parent forwards (:mod:`processor.worker`) marks its
progress lines (environment variable ``SOW_PROGRESS_RELAY``) so that the parent can show
them as its own: :func:`forward`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import TextIO

#: The LogRecord attribute progress lines carry: ``(done, total or None)``.
ATTRIBUTE = "progress"
#: Set in a child's environment when its parent forwards its log lines.
RELAY_ENV = "SOW_PROGRESS_RELAY"
#: Ends a relayed progress line, before ``done/total``.
_MARK = "\t@progress "
_BAR = 30

Progress = tuple[int, int | None]


def progress(done: int, total: int | None = None) -> dict[str, object]:
    """The ``extra`` of a progress log line: ``done`` units of ``total`` (None: unknown)."""
    return {ATTRIBUTE: (done, total)}


class ProgressHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes log records to ``stream``; progress records on a terminal as one line
    rewritten in place (other records print above it, and it is drawn again below them
    until its work is done). Thread-safe."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream or sys.stderr)
        self.terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.relay = not self.terminal and bool(os.environ.get(RELAY_ENV))
        self._shown = ""  # the unfinished progress line on screen ("" none)
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self.stream, "closed", False):
            return  # at exit (a library's __del__ logging after the stream closed)
        try:
            self.show(self.format(record), getattr(record, ATTRIBUTE, None))
        except Exception:  # logging must never raise into the caller
            self.handleError(record)

    def show(self, text: str, figures: Progress | None) -> None:
        """Write one formatted line, as progress when ``figures`` is given."""
        with self._guard:
            stream = self.stream
            if figures is None or not (self.terminal or self.relay):
                if self._shown:
                    stream.write("\r\x1b[K")
                stream.write(text + "\n")
                if self._shown:
                    stream.write(self._shown)
            elif self.relay:
                done, total = figures
                stream.write(f"{text}{_MARK}{done}/{'' if total is None else total}\n")
            else:
                line = _with_bar(text, *figures)
                finished = figures[1] is not None and figures[0] >= figures[1]
                stream.write(f"\r{line}\x1b[K" + ("\n" if finished else ""))
                self._shown = "" if finished else f"\r{line}\x1b[K"
            stream.flush()


def _with_bar(text: str, done: int, total: int | None) -> str:
    if not total:
        return text
    share = min(done / total, 1.0)
    return f"[{'#' * int(share * _BAR):<{_BAR}}] {share:6.1%} {text}"


def install(level: int) -> ProgressHandler:
    """Make a ProgressHandler on stderr the root logger's one handler (the ``sow``
    command's log format); return it."""
    handler = ProgressHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def forward(line: str, stream: TextIO | None = None) -> None:
    """Show a line a child process wrote (see ``RELAY_ENV``) through this process's
    ProgressHandler, or as it is (its mark removed) when there is none."""
    text, mark, figures = line.rstrip("\n").partition(_MARK)
    shown: Progress | None = None
    if mark:
        done, _, total = figures.partition("/")
        shown = (int(done), int(total) if total else None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, ProgressHandler):
            handler.show(text, shown)
            return
    out = stream or sys.stderr
    out.write(text + "\n")
    out.flush()
