"""Ingest benchmark engine: Kafka Streams (a KTable in a RocksDB store with a changelog topic).

Run by ``bench/ingest.py`` with the project's Python; the command line and the JSON result
line follow ``bench/engines/_contract.py``. The engine itself is the Java application in
``bench/engines/kstreams/`` (Kafka Streams at the embedded broker's release, Java 17+):
this script builds it with Maven when its jar is missing or older than its sources, runs it
on the same broker and relays its one JSON line, adding a check read from the broker: the
distinct keys in the application's changelog topic.

The Java side times the run: from the first input record entering the topology to the
moment the group's committed offsets on the input topic cover every message (Admin client,
polled every 5 ms once the last record is processed). Under ``exactly_once_v2`` those
offsets commit in the same transaction as the changelog records, every
``commit.interval.ms`` (100 ms by default under exactly-once).

Build only (``bench/ingest.py`` does this once before its rounds)::

    python bench/engines/kstreams_ingest.py --build
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _contract as contract

ENGINE = "kafka-streams"
APP_DIR = Path(__file__).resolve().parent / "kstreams"
TARGET = APP_DIR / "target"
JAR = TARGET / "kstreams-ingest.jar"
CLASSPATH = TARGET / "classpath.txt"
STAMP = TARGET / "sources.sha256"
MAIN_CLASS = "kafkasow.bench.KStreamsIngest"
#: The application's JVM heap cap: a 10,000-key store and a 10 MB record cache need little.
HEAP = "-Xmx1g"
PROGRESS_EVERY_S = 2.0
#: Extra JVM options for the application, e.g. its log level:
#: ``KSTREAMS_JAVA_OPTS="-Dorg.slf4j.simpleLogger.defaultLogLevel=info"`` (default warn).
JAVA_OPTS_ENV = "KSTREAMS_JAVA_OPTS"


def sources_digest() -> str:
    """A digest of what the build depends on: the pom and the Java sources."""
    digest = hashlib.sha256()
    for path in [APP_DIR / "pom.xml", *sorted((APP_DIR / "src").rglob("*.java"))]:
        digest.update(str(path.relative_to(APP_DIR)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def built_classpath() -> str | None:
    """The application's classpath (its jar first) when the build is current, else None.

    Current means: the jar and the classpath file exist, the stamp written after the last
    successful build names the sources as they are now, and every jar is still in ~/.m2.
    """
    if not JAR.exists() or not CLASSPATH.exists() or not STAMP.exists():
        return None
    if STAMP.read_text().strip() != sources_digest():
        return None
    jars = [entry for entry in CLASSPATH.read_text().strip().split(os.pathsep) if entry]
    if not jars or not all(Path(jar).exists() for jar in jars):
        return None
    return os.pathsep.join([str(JAR), *jars])


def build() -> str:
    """Build the application with Maven unless it is current; return its classpath.

    Progress goes to stderr about every 2 s (how many files Maven has downloaded); Maven's
    whole output is kept in ``target/maven-build.log``. RuntimeError when Maven is missing
    or the build fails.
    """
    ready = built_classpath()
    if ready is not None:
        return ready
    maven = shutil.which("mvn")
    if maven is None:
        raise RuntimeError(
            "Maven (mvn) is needed to build the Kafka Streams engine: install a Java 17+ JDK "
            "and Maven 3.6.3+ (Debian: apt-get install openjdk-17-jdk-headless maven)"
        )
    TARGET.mkdir(parents=True, exist_ok=True)
    STAMP.unlink(missing_ok=True)
    digest = sources_digest()
    transcript = TARGET / "maven-build.log"
    contract.log(ENGINE, f"building {APP_DIR} with Maven (once; log {transcript}) ...")
    from processor.log.broker.maven import run_maven

    started = time.monotonic()

    def shown(seconds: float, downloaded: int) -> None:
        contract.log(ENGINE, f"  building: {seconds:.0f}s, {downloaded} files downloaded")

    command = [maven, "-B", "-f", str(APP_DIR / "pom.xml"), "package"]
    code, last_lines = run_maven(command, transcript, shown, every_s=PROGRESS_EVERY_S)
    if code == 0:
        STAMP.write_text(digest + "\n")
    ready = built_classpath() if code == 0 else None
    if ready is None:
        tail = " | ".join(last_lines[-10:])
        raise RuntimeError(f"the Maven build failed (exit {code}; see {transcript}): {tail}")
    contract.log(
        ENGINE,
        f"built {JAR.name} in {time.monotonic() - started:.1f}s",
    )
    return ready


def java_command(args: contract.EngineArgs, classpath: str) -> list[str]:
    """The command running the application under the contract's options."""
    from processor.log.broker.maven import require_java

    command = [
        require_java().path,
        HEAP,
        *shlex.split(os.environ.get(JAVA_OPTS_ENV, "")),
        "-cp",
        classpath,
        MAIN_CLASS,
        "--bootstrap",
        args.bootstrap,
        "--topic",
        args.topic,
        "--messages",
        str(args.messages),
        "--state-dir",
        args.state_dir,
        "--group",
        args.group,
        "--timeout",
        str(args.timeout),
    ]
    if args.keys is not None:
        command += ["--keys", str(args.keys)]
    if args.exactly_once:
        command.append("--exactly-once")
    return command


def changelog_keys(bootstrap: str, topic: str, timeout_s: float = 30.0) -> tuple[int, int] | None:
    """(distinct keys, committed records) in the changelog ``topic``, read to its end with
    ``read_committed``; None when the topic cannot be read."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-bench-check",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 0,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10.0).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return None
        partitions = [TopicPartition(topic, p, 0) for p in metadata.partitions]
        consumer.assign(partitions)
        pending = {tp.partition for tp in partitions}
        keys: set[bytes | None] = set()
        records = 0
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(10_000, timeout=0.5):
                error = message.error()
                if error is None:
                    keys.add(message.key())
                    records += 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(message.partition())
        return None if pending else (len(keys), records)
    finally:
        consumer.close()


def run(args: contract.EngineArgs) -> dict[str, Any]:
    """Build if needed, run the application, return its result with the changelog check."""
    guarantee = contract.guarantee_name(args.exactly_once)
    command = java_command(args, build())
    contract.log(ENGINE, f"running {MAIN_CLASS} ({guarantee})")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        stdout, _ = process.communicate(timeout=args.timeout + 30.0)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, _ = process.communicate()
        contract.log(ENGINE, "the application outlived its own watchdog; killed")
    result = None
    for line in reversed(stdout.splitlines()):
        if line.strip().startswith("{"):
            result = json.loads(line)
            break
    for line in stdout.splitlines():
        if not line.strip().startswith("{"):
            contract.log(ENGINE, f"stdout: {line}")
    if result is None:
        return contract.failure(
            engine=ENGINE,
            version="?",
            args=args,
            guarantee=guarantee,
            error=f"no JSON result from the application (exit status {process.returncode})",
        )
    if result.get("ok") and result.get("changelog_topic"):
        found = changelog_keys(args.bootstrap, result["changelog_topic"])
        if found is not None:
            result["changelog_keys"], result["changelog_records"] = found
    result["exit_status_app"] = process.returncode
    return result


def main(argv: list[str] | None = None) -> int:
    """``--build`` builds only; otherwise the contract's command line, one JSON line."""
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--build"]:
        from processor.errors import BrokerError
        from processor.log.broker.maven import require_java

        try:
            require_java()
            build()
        except (RuntimeError, BrokerError) as exc:
            contract.log(ENGINE, str(exc))
            return contract.EXIT_FAILED
        return 0
    args = contract.parse_args(__doc__.splitlines()[0], argv)
    os.makedirs(args.state_dir, exist_ok=True)
    try:
        result = run(args)
    except Exception as exc:
        result = contract.failure(
            engine=ENGINE,
            version="?",
            args=args,
            guarantee=contract.guarantee_name(args.exactly_once),
            error=f"{type(exc).__name__}: {exc}",
        )
    contract.emit(result)
    return 0 if result.get("ok") else contract.EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
