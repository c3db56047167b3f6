"""Fan-out through gRPC: N subscriptions on one query service, a steady publish.

Starts the broker (``KAFKA_BOOTSTRAP_SERVERS`` or the embedded one) and kafka-sow as
``sow serve`` runs it (processor in a child process; replica, subscription hub and gRPC
in this process). Subscriber processes (grpc.aio, one event loop each) open N
subscriptions with filters ``/symbol = 'S<i>' AND /price > <i % 100>``: one ``Subscribe``
stream each, or ``--per-session K`` per ``Session`` stream. A publisher process writes
messages with a random symbol among N and a random price at a steady rate with a plain
producer, each carrying its send time. Reported: the rate sent, the changes received
against the number the filters should match, send -> received latency p50/p99/max
(every change of every subscription), and the time to open the N subscriptions.

    PYTHONPATH=. python bench/subscribe_grpc.py --streams 10000 --per-session 1000 \
        --channels 10 --rate 20000 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from processor.app import start
from processor.config import Settings
from processor.keys import key_function
from processor.topology.model import SowTopic, Topology

#: Client connections the streams are spread over by default (each its own TCP
#: connection).
CHANNELS = 50


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _subscribe(
    address: str,
    topic: str,
    numbers: range,
    channels_n: int,
    per_session: int,
    ready: Any,
    stop: Any,
    out: Any,
) -> None:
    """Child process: the subscriptions numbered ``numbers`` on one event loop, one
    stream each or ``per_session`` per Session stream; sends back the latency of every
    change received and how long opening them took."""
    import grpc

    from processor.wire import sow_pb2, sow_pb2_grpc

    latencies: list[float] = []
    errors: list[str] = []

    async def one(stub: Any, number: int, registered: asyncio.Queue[int]) -> None:
        call = stub.Subscribe(request(number))
        try:
            async for message in call:
                part = message.WhichOneof("part")
                if part == "registered":
                    registered.put_nowait(number)
                    continue
                received(message, part)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                errors.append(f"{exc.code().name}: {exc.details()}")
                registered.put_nowait(-1)

    def request(number: int) -> Any:
        return sow_pb2.SubscribeRequest(
            topic=topic,
            filter=f"/symbol = 'S{number}' AND /price > {number % 100}",
            sub_id=f"s{number}",
        )

    def received(message: Any, part: str | None) -> None:
        now = time.perf_counter()
        changes = [message.change] if part == "change" else message.changes.changes
        for change in changes:
            latencies.append(now - orjson.loads(change.record.data)["t"])

    async def session(stub: Any, group: range, registered: asyncio.Queue[int]) -> None:
        call = stub.Session()
        try:
            for number in group:
                await call.write(sow_pb2.SessionCommand(subscribe=request(number)))
            async for message in call:
                part = message.WhichOneof("part")
                if part == "registered":
                    registered.put_nowait(int(message.sub_id[1:]))
                elif part == "ended":
                    errors.append(
                        f"{message.sub_id}: {message.ended.code}: {message.ended.details}"
                    )
                    registered.put_nowait(-1)
                else:
                    received(message, part)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                errors.append(f"{exc.code().name}: {exc.details()}")
                for _ in group:
                    registered.put_nowait(-1)

    async def main() -> None:
        channels = [
            grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
            for _ in range(channels_n)
        ]
        stubs = [sow_pb2_grpc.SubscriptionsStub(c) for c in channels]  # type: ignore[no-untyped-call]
        registered: asyncio.Queue[int] = asyncio.Queue()
        started = time.perf_counter()
        if per_session:
            groups = [numbers[i : i + per_session] for i in range(0, len(numbers), per_session)]
            tasks = [
                asyncio.ensure_future(session(stubs[n % channels_n], group, registered))
                for n, group in enumerate(groups)
            ]
        else:
            tasks = [
                asyncio.ensure_future(one(stubs[i % channels_n], i, registered)) for i in numbers
            ]
        for done in range(len(numbers)):
            await registered.get()
            if done % 1000 == 999:
                print(f"  {done + 1:,} subscriptions registered", file=sys.stderr)
        opened_s = time.perf_counter() - started
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.1)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for channel in channels:
            await channel.close(None)
        out.send((latencies, errors, opened_s))

    asyncio.run(main())


def _publish(
    bootstrap: str, topic: SowTopic, streams: int, rate: int, total: int, out: Any
) -> None:
    """Child process: ``total`` messages at ``rate``; sends back the seconds it took and
    how many (stream, message) matches the filters should give."""
    key_of = key_function(topic)
    assert key_of is not None
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    rng = random.Random(5)
    batch = max(1, rate // 1000)
    expected = 0
    started = time.perf_counter()
    for n in range(total):
        if n % batch == 0:
            delay = started + n / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        symbol = rng.randrange(streams)
        price = rng.uniform(0, 100)
        expected += price > symbol % 100
        message = {"id": n % 100_000, "symbol": f"S{symbol}", "price": price, "t": 0.0}
        message["t"] = time.perf_counter()
        producer.produce(topic.kafka_topic, orjson.dumps(message), key_of(message).encode())
        producer.poll(0)
    producer.flush(30)
    out.send((time.perf_counter() - started, expected))


def measure(
    app: Any,
    topic: SowTopic,
    streams: int,
    processes: int,
    channels: int,
    per_session: int,
    rate: int,
    seconds: float,
) -> dict[str, Any]:
    spawn = multiprocessing.get_context("spawn")
    stop = spawn.Event()
    subscribers = []
    share = -(-streams // processes)
    for first in range(0, streams, share):
        ready = spawn.Event()
        received, subscriber_end = spawn.Pipe(duplex=False)
        numbers = range(first, min(streams, first + share))
        process = spawn.Process(
            target=_subscribe,
            args=(
                app.grpc_address,
                topic.name,
                numbers,
                channels,
                per_session,
                ready,
                stop,
                subscriber_end,
            ),
        )
        process.start()
        subscribers.append((process, ready, received))
    for _, ready, _ in subscribers:
        if not ready.wait(600):
            raise SystemExit(f"{streams} streams were not registered within 600 s")
    total = int(rate * seconds)
    sent, publisher_end = spawn.Pipe(duplex=False)
    publisher = spawn.Process(
        target=_publish,
        args=(app.broker.bootstrap_servers, topic, streams, rate, total, publisher_end),
    )
    publisher.start()
    sent_s, expected = sent.recv()
    publisher.join(60)
    load = os.getloadavg()[0]
    # Let what is in flight arrive (bounded), then stop the subscriber.
    time.sleep(min(30.0, 3.0 + seconds))
    stop.set()
    latencies: list[float] = []
    errors: list[str] = []
    opened_s = 0.0
    for process, _, received in subscribers:
        got, failed, opened = received.recv()
        process.join(60)
        latencies += got
        errors += failed
        opened_s = max(opened_s, opened)
    ms = [r * 1000 for r in latencies] or [float("nan")]
    return {
        "streams": streams,
        "subscriber_processes": processes,
        "connections_per_process": channels,
        "subscriptions_per_stream": per_session or 1,
        "rate": rate,
        "sent_per_s": round(total / sent_s),
        "expected_changes": expected,
        "received_changes": len(latencies),
        "stream_errors": errors[:3],
        "open_streams_s": round(opened_s, 1),
        "p50_ms": round(_percentile(ms, 0.5), 2),
        "p99_ms": round(_percentile(ms, 0.99), 2),
        "max_ms": round(max(ms), 2),
        "load_average": round(load, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--subscriber-processes", type=int, default=1)
    parser.add_argument("--channels", type=int, default=CHANNELS)
    parser.add_argument(
        "--per-session",
        type=int,
        default=0,
        help="subscriptions per Session stream (0: one Subscribe stream each)",
    )
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    name = f"subgrpc-{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp())
    topology_file = work / "fan.yaml"
    topology_file.write_text(
        f"topics:\n  - name: FAN\n    key: /id\n    kafka_topic: {name}\n    partitions: 2\n"
    )
    settings = Settings.from_env(
        topology=topology_file,
        state_dir=work / "state",
        group_id=name,
        grpc_address="127.0.0.1:0",
    )
    topic = SowTopic("FAN", keys=("/id",), kafka_topic=name, partitions=2)
    app = start(settings, topology=Topology({"FAN": topic}), processor_process=True)
    print(f"broker: {app.broker.description}", file=sys.stderr, flush=True)
    try:
        ready = app.processor_ready
        if ready is not None and not ready.wait(120):
            raise SystemExit("the processor did not start within 120 s")
        assert app.replica is not None
        app.replica.wait_caught_up(60)
        row = measure(
            app,
            topic,
            args.streams,
            args.subscriber_processes,
            args.channels,
            args.per_session,
            args.rate,
            args.seconds,
        )
        print(json.dumps(row))
    finally:
        app.stop()
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(row, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
