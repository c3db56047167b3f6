"""Progress lines: a bar rewritten in place on a terminal, plain lines elsewhere, and a
child's progress shown by its parent as its own."""

from __future__ import annotations

import io
import logging

import pytest

from processor import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _logger(handler: logging.Handler) -> logging.Logger:
    logger = logging.getLogger(f"test-progress-{id(handler)}")
    logger.propagate = False
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)
    return logger


def test_on_a_terminal_progress_is_one_line_rewritten_with_a_bar() -> None:
    screen = Terminal()
    log = _logger(progress.ProgressHandler(screen))
    log.info("restoring T[0]: 100 of 400", extra=progress.progress(100, 400))
    log.warning("something else happened")
    log.info("restoring T[0]: 400 of 400", extra=progress.progress(400, 400))
    text = screen.getvalue()
    first, rest = text.split("something else happened\n")
    assert first == f"\r[{'#' * 7:<30}]  25.0% restoring T[0]: 100 of 400\x1b[K\r\x1b[K"
    # the unfinished bar is drawn again below the other line, then finished with a newline
    assert rest.startswith("\r[#######")
    assert rest.endswith(f"\r[{'#' * 30}] 100.0% restoring T[0]: 400 of 400\x1b[K\n")


def test_elsewhere_progress_is_an_ordinary_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.RELAY_ENV, raising=False)
    pipe = io.StringIO()
    log = _logger(progress.ProgressHandler(pipe))
    log.info("catching up", extra=progress.progress(5, None))
    log.info("done")
    assert pipe.getvalue() == "catching up\ndone\n"


def test_a_childs_marked_progress_is_shown_by_the_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(progress.RELAY_ENV, "1")
    child = io.StringIO()
    log = _logger(progress.ProgressHandler(child))
    log.info("restoring T[1]: 5 of 10", extra=progress.progress(5, 10))
    log.info("restoring T[1]: 5", extra=progress.progress(5))
    log.info("plain")
    lines = child.getvalue().splitlines(keepends=True)
    assert lines[2] == "plain\n"
    # the parent: on a terminal the marked lines become its bar; without a handler, text
    screen = Terminal()
    parent = progress.ProgressHandler(screen)
    root = logging.getLogger()
    saved = root.handlers
    root.handlers = [parent]
    try:
        for line in lines:
            progress.forward(line)
    finally:
        root.handlers = saved
    assert screen.getvalue().startswith(f"\r[{'#' * 15:<30}]  50.0% restoring T[1]: 5 of 10")
    assert "@progress" not in screen.getvalue()
    root.handlers = []
    try:
        plain = io.StringIO()
        for line in lines:
            progress.forward(line, plain)
    finally:
        root.handlers = saved
    assert plain.getvalue() == "restoring T[1]: 5 of 10\nrestoring T[1]: 5\nplain\n"
