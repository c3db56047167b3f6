"""Java and the embedded Apache Kafka broker's jars, resolved with Maven.

The project keeps one pom (``processor/log/broker/pom.xml``) naming Apache Kafka's broker and a
logging binding. The first use resolves it with ``mvn dependency:build-classpath`` into
Maven's local repository (``~/.m2``, outside the project) and writes the classpath to
``<cache>/kafka-<version>/classpath.txt``; later starts read that file. No jar is ever
copied into the project. ``<cache>`` is ``$SOW_CACHE_DIR``, else
``$XDG_CACHE_HOME/kafka-sow``, else ``~/.cache/kafka-sow``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from processor.errors import BrokerError
from processor.progress import progress

log = logging.getLogger(__name__)

POM = Path(__file__).with_name("pom.xml")
CACHE_ENV = "SOW_CACHE_DIR"
#: The oldest Java the 4.x broker runs on.
JAVA_MAJOR = 17
#: Pinned so every machine resolves with the same plugin (Maven 3.6.3+).
_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
_VERSION_LINE = re.compile(r'version "(\d+)(?:\.(\d+))?[^"]*"')
_INSTALL_HINT = (
    "install a Java 17+ JDK and Maven 3.6+ (Debian: apt-get install openjdk-17-jdk-headless "
    "maven), or pass --bootstrap-servers / set KAFKA_BOOTSTRAP_SERVERS to a running Kafka"
)


def cache_dir() -> Path:
    """Where resolved classpaths (and the pom Maven reads) are kept."""
    explicit = os.environ.get(CACHE_ENV, "").strip()
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "kafka-sow"


def kafka_version(pom: Path = POM) -> str:
    """The Apache Kafka release the pom pins (its ``kafka.version`` property)."""
    namespace = {"m": "http://maven.apache.org/POM/4.0.0"}
    found = ElementTree.parse(pom).find("m:properties/m:kafka.version", namespace)
    if found is None or not (found.text or "").strip():
        raise BrokerError(f"{pom} has no <kafka.version> property")
    return (found.text or "").strip()


@dataclass(frozen=True, slots=True)
class Java:
    """A ``java`` launcher and the major version it reported."""

    path: str
    major: int


def find_java() -> Java | None:
    """``$JAVA_HOME/bin/java``, else ``java`` on the PATH, with its major version; None
    when there is none or it does not say its version."""
    home = os.environ.get("JAVA_HOME", "").strip()
    candidate = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not candidate or not Path(candidate).exists():
        return None
    try:
        answer = subprocess.run(
            [candidate, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _VERSION_LINE.search(answer.stderr + answer.stdout)
    if match is None:
        return None
    first, second = int(match.group(1)), int(match.group(2) or 0)
    return Java(candidate, second if first == 1 else first)  # "1.8.0" is Java 8


def require_java() -> Java:
    """A Java the broker runs on, or a BrokerError in one line saying what to install."""
    java = find_java()
    if java is None:
        raise BrokerError(f"no Java found for the embedded Apache Kafka: {_INSTALL_HINT}")
    if java.major < JAVA_MAJOR:
        raise BrokerError(
            f"the embedded Apache Kafka needs Java {JAVA_MAJOR}+, {java.path} is Java "
            f"{java.major}: {_INSTALL_HINT}"
        )
    return java


def classpath(version: str | None = None) -> str:
    """The broker's runtime classpath, resolving it with Maven the first time (progress
    is logged about once a second). BrokerError when Maven is missing or fails."""
    version = version or kafka_version()
    folder = cache_dir() / f"kafka-{version}"
    saved = folder / "classpath.txt"
    if saved.exists():
        text = saved.read_text().strip()
        if text and all(Path(jar).exists() for jar in text.split(os.pathsep)):
            return text
    maven = shutil.which("mvn")
    if maven is None:
        raise BrokerError(
            f"Maven (mvn) is needed once to fetch Apache Kafka {version}'s jars: {_INSTALL_HINT}"
        )
    folder.mkdir(parents=True, exist_ok=True)
    pom = folder / "pom.xml"
    shutil.copyfile(POM, pom)
    partial = folder / "classpath.txt.partial"
    command = [
        maven,
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(pom),
        f"-Dkafka.version={version}",
        f"{_PLUGIN}:build-classpath",
        "-Dmdep.includeScope=runtime",
        f"-Dmdep.outputFile={partial}",
    ]
    log.info("fetching Apache Kafka %s's jars with Maven (once; cached in %s)", version, folder)
    _run_maven(command, folder / "maven.log")
    text = partial.read_text().strip() if partial.exists() else ""
    if not text:
        raise BrokerError(f"Maven wrote no classpath for Apache Kafka {version}; see {folder}")
    partial.replace(saved)
    log.info("Apache Kafka %s's jars are ready (%d jars)", version, len(text.split(os.pathsep)))
    return text


def run_maven(
    command: list[str],
    transcript: Path,
    progress_of: Callable[[float, int], None],
    *,
    cwd: Path | None = None,
    every_s: float = 1.0,
) -> tuple[int, list[str]]:
    """Run Maven with its whole output in ``transcript``, calling ``progress_of(seconds,
    files downloaded)`` about every ``every_s`` while it runs (a first build downloads for
    minutes: it must not look hung). Its exit code and its last lines."""
    tail: deque[str] = deque(maxlen=15)
    downloaded = 0
    started = shown = time.monotonic()
    with open(transcript, "w") as out:
        process = subprocess.Popen(
            command,
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
            if time.monotonic() - shown >= every_s:
                shown = time.monotonic()
                progress_of(shown - started, downloaded)
        return process.wait(), [line for line in tail if line]


def _run_maven(command: list[str], transcript: Path) -> None:
    """Run Maven, logging how many files it has downloaded about once a second; its whole
    output goes to ``transcript``. BrokerError with the last lines when it fails."""

    def shown(_seconds: float, downloaded: int) -> None:
        log.info(
            "fetching Apache Kafka's jars: %d files downloaded",
            downloaded,
            extra=progress(downloaded),
        )

    code, tail = run_maven(command, transcript, shown)
    if code != 0:
        last = " | ".join(tail[-8:])
        raise BrokerError(
            f"Maven could not fetch Apache Kafka's jars (exit {code}): {last}; the whole "
            f"output is in {transcript}. Check that Maven Central is reachable, or pass "
            "--bootstrap-servers / set KAFKA_BOOTSTRAP_SERVERS to a running Kafka"
        )
