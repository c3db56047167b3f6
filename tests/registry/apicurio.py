"""A real schema registry for tests: Apicurio Registry, built from Maven Central.

Apicurio Registry speaks the Confluent Schema Registry REST API under
``/apis/ccompat/v7``, which is what confluent-kafka's ``SchemaRegistryClient`` talks to.
It is not published as a runnable jar, so :func:`build` repackages
``io.apicurio:apicurio-registry-app`` with Quarkus (Maven project in
``tests/registry/apicurio/``) once, in a cache directory outside the repo
(``~/.cache/kafka-sow/apicurio`` or ``$KAFKA_SOW_APICURIO_CACHE``); later calls reuse the
build while the Maven project's files are unchanged.

Usage::

    with apicurio.running() as registry:
        client = SchemaRegistryClient({"url": registry.url})

The registry keeps its schemas in memory (H2): each start begins empty.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests import maven

SOURCE = Path(__file__).resolve().parent / "apicurio"
DEFAULT_CACHE = Path.home() / ".cache" / "kafka-sow" / "apicurio"
RUN_JAR = Path("app") / "target" / "quarkus-app" / "quarkus-run.jar"
CCOMPAT_PATH = "/apis/ccompat/v7"
START_TIMEOUT_S = 120.0


class RegistryError(RuntimeError):
    """The registry could not be built or started; the message says what to look at."""


def _cache_dir() -> Path:
    return Path(os.environ.get("KAFKA_SOW_APICURIO_CACHE", DEFAULT_CACHE))


def _source_files() -> list[Path]:
    return sorted(
        p for p in SOURCE.rglob("*") if p.is_file() and "target" not in p.relative_to(SOURCE).parts
    )


def _source_digest() -> str:
    digest = hashlib.sha256()
    for path in _source_files():
        digest.update(str(path.relative_to(SOURCE)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise RegistryError("no 'java' on PATH and no JAVA_HOME: install a JDK 17 or newer")
    return found


def build() -> Path:
    """Build the registry once (cached) and return the path of its ``quarkus-run.jar``."""
    cache = _cache_dir()
    jar = cache / RUN_JAR
    stamp = cache / "source.sha256"
    digest = _source_digest()
    if jar.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return jar
    for path in _source_files():
        target = cache / path.relative_to(SOURCE)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    try:
        maven.run(
            "the test schema registry (Apicurio)",
            ["package", "-DskipTests"],
            cache,
            cache / "build.log",
        )
    except AssertionError as exc:
        raise RegistryError(str(exc)) from None
    if not jar.exists():
        raise RegistryError(f"Maven built no {jar} (log: {cache / 'build.log'})")
    stamp.write_text(digest + "\n")
    return jar


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Registry:
    """A running registry: ``url`` is what SchemaRegistryClient's ``url`` setting takes."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path
    started_in_s: float

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    def rss_bytes(self) -> int:
        """Resident memory of the registry's JVM (Linux /proc)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RegistryError(f"no VmRSS for pid {self.process.pid}")

    def stop(self) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL after 20 s); its log goes unless it failed."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.started_in_s > 0:
            self.log.unlink(missing_ok=True)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start(*, port: int | None = None, heap_mb: int = 256, quiet: bool = False) -> Registry:
    """Start the registry on 127.0.0.1 (a free port unless given); return once its API answers."""
    jar = build()
    port = port or free_port()
    log = _cache_dir() / f"registry-{port}.log"
    command = [
        _java(),
        f"-Xmx{heap_mb}m",
        # C1 only and the serial collector: about half the start time on 2 cores (12.7 s -> 5.5 s
        # measured under load), same memory; a test registry serves little traffic.
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseSerialGC",
        f"-Dquarkus.http.port={port}",
        "-Dquarkus.http.host=127.0.0.1",
        "-jar",
        str(jar),
    ]
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=jar.parent, stdout=out, stderr=subprocess.STDOUT)
    registry = Registry(process, port, log, 0.0)
    probe = f"http://127.0.0.1:{port}{CCOMPAT_PATH}/subjects"
    while not _answers(probe):
        if process.poll() is not None or time.monotonic() - started > START_TIMEOUT_S:
            registry.stop()
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise RegistryError(f"the schema registry did not start (log: {log}):\n{tail}")
        time.sleep(0.2)
    registry.started_in_s = time.monotonic() - started
    if not quiet:
        print(
            f"apicurio: answering at {registry.url} after {registry.started_in_s:.1f} s", flush=True
        )
    return registry


@contextmanager
def running(
    *, port: int | None = None, heap_mb: int = 256, quiet: bool = False
) -> Iterator[Registry]:
    registry = start(port=port, heap_mb=heap_mb, quiet=quiet)
    try:
        yield registry
    finally:
        registry.stop()


if __name__ == "__main__":
    print(build())
    sys.exit(0)
