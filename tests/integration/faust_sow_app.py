"""A Faust app with a SOW table, run as a worker in its own process by test_faust_table.

It declares the table as docs/faust.md shows and writes the table's contents (SowKey ->
record) to a JSON file five times a second, for the test to compare with a sow query.
Configured by the environment: SOW_FAUST_BOOTSTRAP, SOW_FAUST_APP_ID, SOW_FAUST_TOPIC
(the SOW topic's Kafka topic), SOW_FAUST_PARTITIONS, SOW_FAUST_OUT, SOW_FAUST_DATADIR;
on a secured Kafka (SASL_SSL, SCRAM-SHA-512) SOW_FAUST_USER, SOW_FAUST_PASSWORD and
SOW_FAUST_CA (the CA file that signed the broker's certificate), as docs/security.md shows.
"""

from __future__ import annotations

import json
import os
import ssl
from pathlib import Path

import faust

from processor.faust import sow_table
from processor.topology.model import SowTopic

ORDERS = SowTopic(
    "ORDERS",
    keys=("/id",),
    kafka_topic=os.environ["SOW_FAUST_TOPIC"],
    partitions=int(os.environ["SOW_FAUST_PARTITIONS"]),
)
OUT = Path(os.environ["SOW_FAUST_OUT"])

secured = {}
if os.environ.get("SOW_FAUST_USER"):
    secured["broker_credentials"] = faust.SASLCredentials(
        username=os.environ["SOW_FAUST_USER"],
        password=os.environ["SOW_FAUST_PASSWORD"],
        mechanism="SCRAM-SHA-512",
        ssl_context=ssl.create_default_context(cafile=os.environ["SOW_FAUST_CA"]),
    )
app = faust.App(
    os.environ["SOW_FAUST_APP_ID"],
    broker=f"kafka://{os.environ['SOW_FAUST_BOOTSTRAP']}",
    **secured,
    processing_guarantee="exactly_once",
    datadir=os.environ["SOW_FAUST_DATADIR"],
    web_enabled=False,
)
orders = sow_table(app, ORDERS)


@app.timer(interval=0.2)
async def write_table() -> None:
    """The table as it is now, replaced atomically."""
    partial = OUT.with_suffix(".partial")
    partial.write_text(json.dumps(dict(orders.items())))
    partial.replace(OUT)


if __name__ == "__main__":
    faust.Worker(app, loglevel="info").execute_from_commandline()
