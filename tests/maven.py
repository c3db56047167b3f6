"""Maven builds the tests need (the test schema registry, the Kafka Streams KTable app),
run once and cached outside the repository, with progress while they run.

The first build on a machine downloads from Maven Central (the registry: about 200 MB,
minutes); :func:`run` prints every few seconds how long it has run and how many files it
has downloaded, on the terminal even while pytest captures output, so a first run never
looks hung.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

#: Seconds between two progress lines.
PROGRESS_EVERY_S = 5.0


def _say(line: str) -> None:
    # pytest captures the test's file descriptors; the terminal it started on is stderr's
    # original, kept by the capture plugin as sys.__stderr__.
    stream = sys.__stderr__ or sys.stderr
    stream.write(line + "\n")
    stream.flush()


def run(label: str, args: list[str], cwd: Path, log: Path) -> None:
    """Run ``mvn -B <args>`` in ``cwd``, its whole output in ``log``; progress lines name
    ``label``. AssertionError with the output's last lines when Maven fails."""
    maven = shutil.which("mvn")
    if maven is None:
        raise AssertionError(f"Maven (mvn) builds {label}: install Maven 3.8+")
    _say(f"{label}: building with Maven in {cwd} (once; the first time downloads its jars)")
    began = shown = time.monotonic()
    downloaded = 0
    tail: deque[str] = deque(maxlen=15)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        process = subprocess.Popen(
            [maven, "-B", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            tail.append(line.rstrip())
            downloaded += "Downloaded from " in line
            if time.monotonic() - shown >= PROGRESS_EVERY_S:
                shown = time.monotonic()
                _say(f"{label}: {shown - began:.0f} s, {downloaded} files downloaded")
        code = process.wait()
    if code != 0:
        raise AssertionError(
            f"building {label} failed (exit {code}; whole log: {log}):\n" + "\n".join(tail)
        )
    _say(f"{label}: built in {time.monotonic() - began:.0f} s")
