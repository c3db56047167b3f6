"""Signals turned into actions run on a thread of their own.

A Python signal handler runs in the main thread between two bytecodes, wherever that
thread is: inside ``threading.Event.set`` or ``Condition.wait``, holding a lock the handler
would take again (a second SIGTERM arriving in the first one's handler did exactly that,
and the process hung for good). So the handlers installed here take no lock and call
nothing: the interpreter's C-level handler writes the signal's number to a pipe
(``signal.set_wakeup_fd``) at the moment it arrives, even while the main thread is
blocked in C code, and the relay thread reads it and runs the actions registered for
that signal (``threading.Event.set``, a stream's ``cancel``), as often as it arrives.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable

__all__ = ["on_signals", "received", "restore"]

log = logging.getLogger(__name__)

_actions: dict[int, list[Callable[[], None]]] = {}
#: The relay thread, once started.
_relay: list[threading.Thread] = []
#: The last signal the relay thread read (0: none yet).
_last = [0]
#: The Python-level handler: a builtin that runs no bytecode (it makes a slice of its two
#: arguments, dropped at once). A Python function would let another signal's handler run
#: inside it, and a storm of signals nested them until the stack overflowed; the byte
#: for the relay thread is written by the C-level handler before this runs.
_HANDLER = slice


def on_signals(signals: Iterable[signal.Signals], action: Callable[[], None]) -> None:
    """From now on, each arrival of one of ``signals`` calls ``action()`` on the relay
    thread (never in a signal handler). Main thread only; ``action`` must return soon and
    may be called any number of times."""
    if not _relay:
        read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        _relay.append(threading.Thread(target=_run, args=(read,), name="sow-signals", daemon=True))
        _relay[0].start()
    for sig in signals:
        _actions.setdefault(int(sig), []).append(action)
        signal.signal(sig, _HANDLER)


def received() -> bool:
    """Whether a signal handled here has arrived (and been relayed)."""
    return _last[0] != 0


def restore(signals: Iterable[signal.Signals]) -> None:
    """Give ``signals`` their default behaviour again (Ctrl-C raises KeyboardInterrupt)
    and forget their actions. Main thread only."""
    for sig in signals:
        _actions.pop(int(sig), None)
        default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        signal.signal(sig, default)


def _run(read: int) -> None:
    while True:
        try:
            numbers = os.read(read, 64)
        except InterruptedError:
            continue
        for number in numbers:
            _last[0] = number
            for action in list(_actions.get(number, ())):
                try:
                    action()
                except Exception:  # one failed action must not end the relay of the rest
                    log.exception("the action for signal %d failed", number)
