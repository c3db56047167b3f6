"""A random stream of publishes, updates, deletes (by key and by filter) and expirations
against a model, and the readers of an upsert topic (docs/upsert-tables.md): a plain
consumer's reduction, and a Kafka Streams KTable (tests/integration/kstreams_ktable, built
with Maven once, into ~/.cache/kafka-sow/upsert-ktable)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from processor.client.sow_client import SowClient
from processor.log.memory.broker import MemoryLog
from tests import maven
from tests.integration.harness import read_topic

#: Records of the ``expiring`` group live this long, and are never touched again.
EXPIRATION_S = 1.0
#: The groups a filter delete picks from; expiring records are in none of them.
GROUPS = 8


@dataclass
class Model:
    """What the SOW must hold after the stream (``state``: id -> message), and each
    record's changes in order (``history``: id -> messages, None for a removal)."""

    state: dict[str, bytes] = field(default_factory=dict)
    history: dict[str, list[bytes | None]] = field(default_factory=dict)
    sow_keys: dict[str, str] = field(default_factory=dict)
    expiring: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)

    def change(self, ident: str, value: bytes | None) -> None:
        if value is None:
            if self.state.pop(ident, None) is None:
                return  # deleting what is not there changes nothing
        else:
            self.state[ident] = value
        self.history.setdefault(ident, []).append(value)


def operations(seed: int, count: int, keys: int) -> list[tuple[str, Any]]:
    """``count`` random operations: ("publish", [messages]), ("expiring", [messages]),
    ("delete", [ids]), ("filter", group). Consecutive operations of a kind are one call."""
    rng = random.Random(seed)
    ops: list[tuple[str, Any]] = []
    expiring = 0
    for n in range(count):
        roll = rng.random()
        if roll < 0.70:
            ident = f"k{rng.randrange(keys)}"
            body = {
                "id": ident,
                "grp": rng.randrange(GROUPS),
                "n": n,
                "pad": "x" * rng.randrange(40),
            }
            kind, item = "publish", json.dumps(body).encode()
        elif roll < 0.80:
            body = {"id": f"e{expiring}", "grp": -1, "n": n}
            expiring += 1
            kind, item = "expiring", json.dumps(body).encode()
        elif roll < 0.995:
            kind, item = "delete", f"k{rng.randrange(keys)}"
        else:
            ops.append(("filter", rng.randrange(GROUPS)))
            continue
        if ops and ops[-1][0] == kind and len(ops[-1][1]) < 200:
            ops[-1][1].append(item)
        else:
            ops.append((kind, [item]))
    return ops


def run(client: SowClient, topic: str, ops: Sequence[tuple[str, Any]], model: Model) -> None:
    """Send ``ops`` through ``client`` (each call acknowledged before the next), keeping
    ``model`` in step."""
    for kind, items in ops:
        model.counts[kind] = model.counts.get(kind, 0) + (1 if kind == "filter" else len(items))
        if kind in ("publish", "expiring"):
            options = {"expiration": EXPIRATION_S} if kind == "expiring" else {}
            results = list(client.publish_stream(topic, items, ack="persisted", **options))
            for message, result in zip(items, results, strict=True):
                assert not result.error, result.error
                ident = json.loads(message)["id"]
                model.sow_keys[ident] = result.sow_key
                model.change(ident, message)
                if kind == "expiring":
                    model.expiring.add(ident)
        elif kind == "delete":
            present = sorted({i for i in items if i in model.state})
            if present:
                client.delete(topic, [model.sow_keys[i] for i in present], timeout=90)
            for ident in present:
                model.change(ident, None)
        else:
            client.delete(topic, filter=f"/grp = {items}", timeout=90)
            for ident, value in list(model.state.items()):
                if json.loads(value)["grp"] == items:
                    model.change(ident, None)
    for ident in model.expiring:
        model.change(ident, None)  # each expires in the end


def sow_state(client: SowClient, topic: str) -> dict[str, bytes]:
    """The SOW (a sow query), by the records' ``id``."""
    records, _, _ = client.query(topic)
    return {json.loads(r.data)["id"]: bytes(r.data) for r in records}


def kafka_records(bootstrap: str, topic: str, partitions: int) -> list[tuple[bytes, bytes | None]]:
    """The committed records of an upsert topic (read_committed), in each partition's
    order, as (key, value)."""
    return [
        (r.key(), r.value())  # type: ignore[attr-defined]
        for r in read_topic(bootstrap, topic, partitions, timeout_s=60)
    ]


def memory_records(log: MemoryLog, topic: str, partitions: int) -> list[tuple[bytes, bytes | None]]:
    """The committed records of an upsert topic on the memory log, as (key, value)."""
    out: list[tuple[bytes, bytes | None]] = []
    for p in range(partitions):
        out += [(r.key(), r.value()) for r in log.read(topic, p, 0, log.end(topic, p), 1 << 30)]
    return out


def reduced(records: Iterable[tuple[bytes, bytes | None]]) -> dict[bytes, bytes]:
    """A plain consumer's table: the last value per key, a tombstone removes the key."""
    table: dict[bytes, bytes] = {}
    for key, value in records:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


def histories(records: Iterable[tuple[bytes, bytes | None]]) -> dict[bytes, list[bytes | None]]:
    """Each key's records, in order."""
    out: dict[bytes, list[bytes | None]] = {}
    for key, value in records:
        out.setdefault(key, []).append(value)
    return out


APP_DIR = Path(__file__).resolve().parent / "kstreams_ktable"
TARGET = Path.home() / ".cache" / "kafka-sow" / "upsert-ktable"
MAIN_CLASS = "kafkasow.tests.UpsertKTable"


def _digest() -> str:
    digest = hashlib.sha256()
    for path in [APP_DIR / "pom.xml", *sorted((APP_DIR / "src").rglob("*.java"))]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def ktable_classpath() -> str:
    """The KTable application's classpath, built with Maven unless the build in TARGET is
    of the current sources (progress to stderr every few seconds)."""
    jar, classpath, stamp = TARGET / "upsert-ktable.jar", TARGET / "classpath.txt", TARGET / "stamp"
    digest = _digest()
    if not (stamp.exists() and stamp.read_text() == digest and jar.exists()):
        TARGET.mkdir(parents=True, exist_ok=True)
        maven.run(
            "the Kafka Streams KTable application",
            ["-f", str(APP_DIR / "pom.xml"), f"-Dktable.target={TARGET}", "package"],
            APP_DIR,
            TARGET / "build.log",
        )
        stamp.write_text(digest)
    jars = classpath.read_text().strip()
    return os.pathsep.join([str(jar), jars])


def ktable(bootstrap: str, topic: str, app_id: str, state_dir: Path) -> dict[bytes, bytes]:
    """The contents of a KTable a Kafka Streams application builds from ``topic``, once
    it consumed the topic to its committed end."""
    done = subprocess.run(
        [
            "java",
            "-Xmx512m",
            "-cp",
            ktable_classpath(),
            MAIN_CLASS,
            bootstrap,
            topic,
            app_id,
            str(state_dir),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAVA_TOOL_OPTIONS": "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"},
    )
    assert done.returncode == 0, f"the KTable application failed:\n{done.stderr[-3000:]}"
    lines = done.stdout.splitlines()
    assert lines, done.stderr[-2000:]
    assert lines[-1].startswith("END "), done.stdout[-500:] + done.stderr[-2000:]
    table = {}
    for line in lines[:-1]:
        key, value = line.split("\t")
        table[base64.b64decode(key)] = base64.b64decode(value)
    assert len(table) == int(lines[-1].split()[1])
    return table
