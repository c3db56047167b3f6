"""The processor on either consumer-group protocol (``group_protocol``), on the session's
broker: the group is of the kind asked for, and a transaction whose offsets the group
refuses (it moved to a new generation or member epoch meanwhile, which KIP-848 does as it
gives a member partitions) is aborted and its batch applied again, with nothing lost or
applied twice and no pipeline restart. Scale-out and kills of processor processes on
both protocols are in test_scale_out.py."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path

import orjson
import pytest

from processor.app import start
from processor.client.sow_client import SowClient
from processor.config import Settings
from processor.errors import StaleGroupError
from processor.log import TopicPartitionKey
from processor.log.broker import Broker, TansuBroker
from processor.topology.model import SowTopic, Topology
from tests.integration.harness import group_type, waited_for
from tests.integration.test_fault_suite import StreamedModel, paced
from tests.integration.test_stuck_processor import matches_the_model

REFUSALS = 3


@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_offsets_a_moved_on_group_refuses_abort_only_their_batch(
    broker: Broker,
    bootstrap: str,
    tmp_path: Path,
    unique: str,
    group_protocol: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if group_protocol == "consumer" and isinstance(broker, TansuBroker):
        pytest.skip("the embedded Tansu broker has no KIP-848 groups")
    topic = SowTopic("ORDERS", keys=("/orderId",), kafka_topic=f"{unique}.o", partitions=2)
    group = f"{unique}-group"
    settings = Settings(
        bootstrap_servers=bootstrap,
        state_dir=tmp_path / "state",
        grpc_address="127.0.0.1:0",
        group_id=group,
        dead_letter_topic=f"{unique}.dead-letter",
        group_protocol=group_protocol,
    )
    with caplog.at_level(logging.INFO, logger="processor.engine"):
        app = start(settings, topology=Topology({"ORDERS": topic}))
        try:
            processor = app.processor
            assert processor is not None
            assert processor.ready.wait(60)
            assert group_type(bootstrap, group) == group_protocol.upper()
            client = SowClient(app.grpc_address)
            model = StreamedModel()
            model.publish(client, (orjson.dumps({"orderId": i, "v": 0}) for i in range(500)))
            # The next transactions' offsets are refused, as a moved-on group does.
            producer = processor._producer
            assert producer is not None
            send_offsets = producer.send_offsets
            refused: list[dict[TopicPartitionKey, int]] = []

            def refuse(offsets: Mapping[TopicPartitionKey, int], metadata: object) -> None:
                # Sent first, as the real refusal comes after AddOffsetsToTxn: aborting a
                # transaction the coordinator may not know yet fails fatally in
                # librdkafka (confluentinc/librdkafka#4849), which a refusal never meets.
                send_offsets(offsets, metadata)
                if len(refused) < REFUSALS:
                    refused.append(dict(offsets))
                    raise StaleGroupError("the group refused the transaction's offsets: test")

            producer.send_offsets = refuse  # type: ignore[method-assign]
            stop = threading.Event()
            publisher = threading.Thread(
                target=model.publish, args=(client, paced(300, stop, seed=11)), daemon=True
            )
            publisher.start()
            try:
                waited_for(lambda: len(refused) == REFUSALS, 30, "the refusals")
                committed = processor.transactions
                waited_for(lambda: processor.transactions > committed + 5, 30, "new commits")
            finally:
                stop.set()
                publisher.join(60)
            matches_the_model(app, client, model, bootstrap, topic)
            client.close()
            assert processor.pipelines == 1  # no restart: the batches alone were redone
        finally:
            app.stop()
    again = [r for r in caplog.records if "reading its batch again" in r.getMessage()]
    assert len(again) == REFUSALS
    assert not any("processing failed" in r.getMessage() for r in caplog.records)
