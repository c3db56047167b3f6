"""The processor of ``sow serve`` as a child process (``sow process``).

One Python process has one interpreter lock: the processor's apply loop, the replica's
apply loop, the publish gateway and the gRPC service would all take turns on it. Running
the processor in a child process gives it a core of its own; the two halves already talk
only through Kafka (the log and the changelogs), so nothing else changes.

The child runs with the parent's settings (passed as environment variables) and the
parent's broker. Its log lines are forwarded to the parent's stderr. Its state comes on a
channel of its own, a pipe whose write end the child gets (``SOW_STATUS_FD``): one JSON
line when it has joined its group and restored its stores (``{"ready": true, "metrics":
"host:port"}``), and one each time its watchdog finds it stuck or working again
(``{"stalled": "..."}``, ``{"stalled": null}``); :func:`report_status` writes them. An
exit the parent did not ask for is reported through ``on_exit``.

The child ends whenever its parent is gone, however it went (a SIGKILL sends nothing): it
holds the read end of a pipe whose write end only the parent holds (``SOW_PARENT``), so
the end of the parent is an end of file there (:func:`follow_parent`, which also watches
the parent's pid, and Linux sends it SIGTERM: PR_SET_PDEATHSIG). It then stops as on
SIGTERM, and exits at once if that takes more than ``ORPHAN_GRACE_S``. It also holds the
parent's lock of the state directory (:func:`share_state_lock`), so a new ``sow serve``
cannot take the directory, whose stores it still has open, before it has ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable

from processor import progress
from processor.changelog.live import Frame, LiveTarget, PipeSink, read_frames
from processor.config import Settings

log = logging.getLogger(__name__)

#: The file descriptor a processor child writes its state to (see the module doc).
STATUS_ENV = "SOW_STATUS_FD"
PR_SET_PDEATHSIG = 1
#: How often the child looks for a change of its stalled state.
STATUS_EVERY_S = 0.2
#: ``<parent pid>:<fd>``: the parent, and the read end of the pipe only it writes to.
PARENT_ENV = "SOW_PARENT"
#: The file descriptor a processor child writes its live units to.
LIVE_ENV = "SOW_LIVE_FD"
#: The window ``processor_restarts`` counts a processor child's exits in.
RESTART_WINDOW_S = 60.0
#: How long a child whose parent is gone may take to stop before it exits at once.
ORPHAN_GRACE_S = 10.0

#: The state directory lock the children started from now on hold too.
_state_lock: list[int] = []


def share_state_lock(fd: int) -> None:
    """Have every processor child started from now on hold ``fd``, this process's lock
    of the state directory (an open ``flock``ed file): the lock then lasts until this
    process and its children have all ended."""
    _state_lock[:] = [fd]


def _dies_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook that has Linux send the child SIGTERM when the thread that started
    it ends: only from the main thread, which lives as long as the process (elsewhere,
    or without prctl, None: the pipe of :func:`follow_parent` does it alone). prctl is
    looked up here, before the fork: between fork and exec only prctl runs (loading a
    library there could wait for a lock another thread of the parent held at the fork)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def hook() -> None:  # pragma: no cover - runs in the child before exec
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    return hook


class ProcessorChild:
    """``sow process`` started with ``settings`` against ``bootstrap``.

    ``on_exit(code)`` is called (from a watcher thread) when the child exits without
    ``stop`` having been called. Thread-safe.
    """

    def __init__(
        self,
        settings: Settings,
        bootstrap: str,
        on_exit: Callable[[int], None],
        restarts: int = 0,
    ) -> None:
        # ``settings`` carry the assignment resolved for the broker (Broker.assignment):
        # a group member, but for the embedded Tansu broker's one static processor.
        self._env = {
            **os.environ,
            **settings.environment(),
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            # The child serves its figures on a port of its own, which the parent's
            # /metrics relays (see ``metrics``).
            "SOW_METRICS_ADDRESS": "127.0.0.1:0" if settings.metrics_address else "",
            # Its progress lines come marked, to be shown as this process's own.
            progress.RELAY_ENV: "1",
        }
        # A pipe for live units and handed-over leases (unused by a child with neither).
        self._live_delivery = settings.live_delivery or settings.queue_handover
        #: The child's metrics endpoint (from its ready status; "" before or without).
        self.metrics_address = ""
        #: What its watchdog found stuck (from its status; None while it works).
        self.stalled: str | None = None
        self.ready = threading.Event()
        self._on_exit = on_exit
        self._stopping = threading.Event()
        self._starting = threading.Lock()
        #: Where what the child hands over goes (set once the replica and queue hub exist;
        #: until then it is dropped: the changelog and deliveries topics bring it).
        self.live: LiveTarget | None = None
        #: Exits this slot starts a new child after, at most, within RESTART_WINDOW_S.
        self._restarts = restarts
        self._exits: list[float] = []
        #: Children started after one died (monitoring, tests).
        self.restarted = 0
        self._parent_write = -1
        self._spawn()

    def _spawn(self) -> None:
        """Start a child, with its channels and the threads that follow them."""
        env = dict(self._env)
        live_fds: tuple[int, ...] = ()
        if self._live_delivery:
            live_read, live_write = os.pipe()
            env[LIVE_ENV] = str(live_write)
            live_fds = (live_write,)
        status_read, status_write = os.pipe()
        env[STATUS_ENV] = str(status_write)
        parent_read, self._parent_write = os.pipe()
        env[PARENT_ENV] = f"{os.getpid()}:{parent_read}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "processor.cli", "process"],
            env=env,
            pass_fds=(status_write, parent_read, *live_fds, *_state_lock),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # terminal signals go to the parent, which stops it
            preexec_fn=_dies_with_parent() if sys.platform.startswith("linux") else None,  # noqa: PLW1509
        )
        os.close(status_write)  # the child holds it: the channel ends when the child does
        os.close(parent_read)
        for fd in live_fds:
            os.close(fd)
            threading.Thread(
                target=self._read_live, args=(live_read,), name="sow-live-units", daemon=True
            ).start()
        for lock in _state_lock:  # named in the lock file, after its parent (O_APPEND)
            with contextlib.suppress(OSError):  # the name is for people; the lock is what counts
                os.write(
                    lock,
                    f"process {self.pid} (the processor of sow serve {os.getpid()})\n".encode(),
                )
        self._status = threading.Thread(
            target=self._read_status, args=(status_read,), name="sow-processor-status"
        )
        self._status.daemon = True
        self._status.start()
        self._watcher = threading.Thread(target=self._watch, name="sow-processor-child")
        self._watcher.daemon = True
        self._watcher.start()

    def _start_again(self, code: int) -> bool:
        """After an exit nobody asked for: start a new child when it was killed by a
        signal (the OOM killer, a SIGKILL) and the restart budget allows it. False: the
        exit is the caller's failure, as is an exit with a code (the child said why:
        fenced by another owner, a store it cannot open; another child would meet the
        same, or take the partitions back from their new owner)."""
        if code >= 0:
            return False
        now = time.monotonic()
        self._exits = [t for t in self._exits if now - t < RESTART_WINDOW_S] + [now]
        if len(self._exits) > self._restarts:
            return False
        with self._starting:
            if self._stopping.is_set():
                return True
            log.error(
                "the processor (pid %d) exited with code %d; starting a new one (%d of %d "
                "restarts allowed within %.0fs)",
                self.pid,
                code,
                len(self._exits),
                self._restarts,
                RESTART_WINDOW_S,
            )
            self.ready.clear()
            self.metrics_address, self.stalled = "", None
            with contextlib.suppress(OSError):  # its lifeline: the old child is gone
                os.close(self._parent_write)
            self.restarted += 1
            self._spawn()
        return True

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read_status(self, fd: int) -> None:
        """Follow the child's status lines until it closes the channel."""
        with os.fdopen(fd, encoding="utf-8") as channel:
            for line in channel:
                try:
                    status = json.loads(line)
                except ValueError:
                    log.warning("unreadable status from the processor child: %r", line)
                    continue
                if "stalled" in status:
                    self.stalled = status["stalled"]
                if status.get("ready"):
                    self.metrics_address = status.get("metrics") or ""
                    self.ready.set()

    def _read_live(self, fd: int) -> None:
        """Hand the child's live units to :attr:`live` until it closes the pipe, then
        say that its run ended (what it held back may never be committed)."""
        failed = False
        for frame in itertools.chain(read_frames(fd), [Frame([], [], ended=True)]):
            target = self.live
            if target is None:
                continue
            try:
                target(frame.units, frame.dones, frame.ended, frame.handed)
            except Exception:  # the changelog still brings every record: say it once, go on
                if not failed:
                    log.exception(
                        "the query service refused what its processor handed over; it comes "
                        "from the changelog and deliveries topics"
                    )
                failed = True

    def _watch(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            progress.forward(line)
        code = self.process.wait()
        if not self._stopping.is_set() and not self._start_again(code):
            log.error("the processor (pid %d) exited with code %d", self.process.pid, code)
            self._on_exit(code)

    def metrics(self) -> bytes:
        """The child's Prometheus text (empty until it is ready, or if it does not
        answer within a second)."""
        if not self.metrics_address:
            return b""
        try:
            with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=1) as r:
                return bytes(r.read())
        except OSError:
            return b""

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop the child (SIGTERM, then SIGKILL after ``grace_s``); idempotent."""
        with self._starting:  # after a new child being started is up: it is stopped too
            self._stopping.set()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(grace_s)
        self._watcher.join(timeout=5)
        self._status.join(timeout=5)
        with contextlib.suppress(OSError):  # closed by an earlier stop
            os.close(self._parent_write)


def follow_parent(stop: threading.Event) -> None:
    """In a processor child: from a thread of its own, set ``stop`` as soon as the parent
    is gone (whatever signals arrive meanwhile, if any); exit with code 1 if this process still runs
    ``ORPHAN_GRACE_S`` later. Nothing when this process has no parent ``sow serve``."""
    spec = os.environ.get(PARENT_ENV)
    if not spec:
        return
    parent_text, _, fd_text = spec.partition(":")
    parent, lifeline = int(parent_text), int(fd_text)

    def run() -> None:
        while os.getppid() == parent:
            readable, _, _ = select.select([lifeline], [], [], 1.0)
            if readable:  # an end of file: the write end closed with the parent
                break
        log.warning(
            "the sow serve that started this processor (pid %d) has ended; stopping", parent
        )
        stop.set()
        time.sleep(ORPHAN_GRACE_S)  # a deadline, in a daemon thread: exiting ends it
        log.error("the processor did not stop within %.0fs of its parent's end", ORPHAN_GRACE_S)
        os._exit(1)

    threading.Thread(target=run, name="sow-parent-watch", daemon=True).start()


def report_status(
    ready: threading.Event,
    stalled: Callable[[], str | None],
    metrics_address: str,
    stop: threading.Event,
) -> bool:
    """In a processor child: write its state to the channel its parent opened (module
    doc) once ``ready`` is set, then each change of ``stalled()`` until ``stop``, on a
    thread of its own. False (nothing started) when this process has no parent channel."""
    fd = os.environ.get(STATUS_ENV)
    if not fd:
        return False
    channel = os.fdopen(int(fd), "w", encoding="utf-8", buffering=1)

    def run() -> None:
        with contextlib.suppress(OSError), channel:  # OSError: the parent is gone
            while not ready.wait(STATUS_EVERY_S):
                if stop.is_set():
                    return
            channel.write(json.dumps({"ready": True, "metrics": metrics_address}) + "\n")
            reported: str | None = None
            while not stop.wait(STATUS_EVERY_S):
                now = stalled()
                if now != reported:
                    channel.write(json.dumps({"stalled": now}) + "\n")
                    reported = now

    threading.Thread(target=run, name="sow-status-to-parent", daemon=True).start()
    return True


def live_sink_from_env() -> PipeSink | None:
    """In a processor child: the pipe to its parent's replica (None: no parent, or live
    delivery off)."""
    fd = os.environ.get(LIVE_ENV)
    return None if not fd else PipeSink(int(fd))
