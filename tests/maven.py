"""Maven builds the tests need (the test schema registry, the Kafka Streams KTable app),
run once and cached outside the repository, with progress while they run.

The first build on a machine downloads from Maven Central (the registry: about 200 MB,
minutes); :func:`run` prints every few seconds how long it has run and how many files it
has downloaded, on the terminal even while pytest captures output, so a first run never
looks hung.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

from processor.log.broker.maven import run_maven

#: Seconds between two progress lines.
PROGRESS_EVERY_S = 5.0


#: The pytest session's config (tests/conftest.py's pytest_configure), whose capture
#: manager lets a line through to the terminal; empty outside pytest.
PYTEST_CONFIG: list[Any] = []


def _say(line: str) -> None:
    if not PYTEST_CONFIG:
        print(line, file=sys.stderr, flush=True)
        return
    capture = PYTEST_CONFIG[0].pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(line, file=sys.stderr, flush=True)


def run(label: str, args: list[str], cwd: Path, log: Path) -> None:
    """Run ``mvn -B <args>`` in ``cwd``, its whole output in ``log``; progress lines name
    ``label``. AssertionError with the output's last lines when Maven fails."""
    maven = shutil.which("mvn")
    if maven is None:
        raise AssertionError(f"Maven (mvn) builds {label}: install Maven 3.8+")
    _say(f"{label}: building with Maven in {cwd} (once; the first time downloads its jars)")
    began = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)

    def shown(seconds: float, downloaded: int) -> None:
        _say(f"{label}: {seconds:.0f} s, {downloaded} files downloaded")

    code, tail = run_maven([maven, "-B", *args], log, shown, cwd=cwd, every_s=PROGRESS_EVERY_S)
    if code != 0:
        raise AssertionError(
            f"building {label} failed (exit {code}; whole log: {log}):\n" + "\n".join(tail)
        )
    _say(f"{label}: built in {time.monotonic() - began:.0f} s")
