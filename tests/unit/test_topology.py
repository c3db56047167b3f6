"""Topology loaders: the YAML format, AMPS XML configuration, directories and examples."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from processor.errors import TopologyError
from processor.topology import load_topology
from processor.topology.amps_xml import load_amps_config, parse_amps_config
from processor.topology.model import (
    Durability,
    HashIndexSpec,
    History,
    KeyGeneratorSpec,
    RecoveryKind,
    SowTopic,
    Topology,
)
from processor.topology.yaml_loader import load_yaml, parse_yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "topologies"
JAN31 = datetime(2024, 1, 31, 10, tzinfo=UTC)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load_error(path: Path, *fragments: str) -> TopologyError:
    """Load ``path`` expecting a TopologyError that names the file and every fragment."""
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    message = str(info.value)
    assert path.name in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return info.value


def yaml_topic(directory: Path, body: str, name: str = "topo.yaml") -> SowTopic:
    topology = load_yaml(write(directory, name, "topics:\n" + body))
    (topic,) = topology.topics.values()
    return topic


# --------------------------------------------------------------------------- YAML


def test_yaml_every_field(tmp_path: Path) -> None:
    write(tmp_path, "schemas/orders.avsc", '{"type": "record", "name": "O", "fields": []}')
    path = write(
        tmp_path,
        "all.yaml",
        """
defaults:
  partitions: 3
  durability: transient
topics:
  - name: ORDERS
    message_type: AVRO
    key: [/orderId, /customer/id]
    key_domain: orders-domain
    durability: persistent
    recovery_point: 20240131T100000Z
    kafka_topic: orders.in
    partitions: 2
    schema: schemas/orders.avsc
    expiration: 30s
    hash_indexes: [[/region], [/a, /b], /c]
    indexes: [/alert/type]
  - name: CUSTOM
    key_generator: {factory: "mypkg.keys:make", options: {width: 8, salt: x}}
    recovery_point: now
    expiration: enabled
    indexes: /x
  - name: PLAIN
    key_generator: mypkg.keys.make
    recovery_point: 2024-01-31T11:00:00+01:00
    expiration: disabled
""",
    )
    topology = load_topology(path)
    assert isinstance(topology, Topology)
    assert topology.sources == (str(path),)
    assert list(topology.topics) == ["ORDERS", "CUSTOM", "PLAIN"]
    orders = topology.topic("ORDERS")
    assert orders.message_type == "avro"
    assert orders.keys == ("/orderId", "/customer/id")
    assert orders.key_domain == "orders-domain"
    assert orders.domain == "orders-domain"
    assert orders.durability is Durability.PERSISTENT
    assert orders.recovery_point.kind is RecoveryKind.TIMESTAMP
    assert orders.recovery_point.timestamp == JAN31
    assert orders.kafka_topic == "orders.in"
    assert orders.changelog_topic == "orders.in.sow-changelog"
    assert orders.repartition_topic == "orders.in.sow-repartition"
    assert orders.partitions == 2
    assert orders.schema == str((tmp_path / "schemas/orders.avsc").resolve())
    assert Path(orders.schema).is_absolute()
    assert orders.expiration_s == 30.0
    assert orders.hash_indexes == (
        HashIndexSpec(("/region",)),
        HashIndexSpec(("/a", "/b")),
        HashIndexSpec(("/c",)),
    )
    assert orders.indexes == ("/alert/type",)
    custom = topology.topic("CUSTOM")
    assert custom.key_generator is not None
    assert custom.key_generator.factory == "mypkg.keys:make"
    assert dict(custom.key_generator.options) == {"width": 8, "salt": "x"}
    assert not custom.user_keyed
    assert custom.recovery_point.kind is RecoveryKind.NOW
    assert custom.expiration_s == 0.0
    assert custom.indexes == ("/x",)
    assert custom.durability is Durability.TRANSIENT
    assert custom.partitions == 3
    assert custom.message_type == "json"
    assert custom.kafka_topic == "CUSTOM"
    plain = topology.topic("PLAIN")
    assert plain.key_generator == KeyGeneratorSpec("mypkg.keys.make")
    assert plain.recovery_point.timestamp == JAN31
    assert plain.expiration_s is None


def test_yaml_defaults_and_single_key(tmp_path: Path) -> None:
    topic = yaml_topic(tmp_path, "  - {name: ORDERS, key: /orderId}\n")
    assert topic.keys == ("/orderId",)
    assert topic.message_type == "json"
    assert topic.durability is Durability.PERSISTENT
    assert topic.recovery_point.kind is RecoveryKind.EPOCH
    assert topic.partitions == 1
    assert topic.key_domain is None
    assert topic.domain == "ORDERS"
    assert topic.expiration_s is None
    assert topic.schema is None
    assert topic.kafka_topic == "ORDERS"


def test_yaml_user_keyed_binary(tmp_path: Path) -> None:
    topic = yaml_topic(tmp_path, "  - {name: BLOBS, message_type: binary}\n")
    assert topic.user_keyed


def test_yaml_timestamps_and_dates_stay_text(tmp_path: Path) -> None:
    topic = yaml_topic(tmp_path, "  - {name: 2024-01-31, recovery_point: 2024-01-31T10:00:00}\n")
    assert topic.name == "2024-01-31"
    assert topic.recovery_point.timestamp == JAN31


def test_parse_yaml_from_text() -> None:
    topology = parse_yaml("topics: [{name: A, key: /id}]", "<inline>")
    assert topology.topic("A").keys == ("/id",)
    assert topology.sources == ("<inline>",)


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            "topics: []\ncolour: red\n",
            [
                "colour",
                "allowed: actions, conflated_topics, defaults, queues, security, topics, views",
            ],
        ),
        (
            "topics:\n  - {name: ORDERS, partiton: 2}\n",
            ["topics[ORDERS].partiton", "did you mean 'partitions'?", "allowed:", "key_domain"],
        ),
        (
            "defaults: {name: X}\ntopics: []\n",
            ["defaults.name", "allowed: durability, expiration, message_type, partitions"],
        ),
        (
            "topics:\n  - {name: A, key_generator: {factory: a.b, option: {}}}\n",
            ["topics[A].key_generator", "did you mean 'options'?", "allowed: factory, options"],
        ),
        (
            "topics:\n  - {name: A, key: /id}\n  - {name: A, key: /id}\n",
            ["topics[1]", "'A' is defined twice", "topics[0]"],
        ),
        (
            "topics:\n  - {name: A, kafka_topic: t}\n  - {name: B, kafka_topic: t}\n",
            ["topics[1]", "Kafka topic 't'", "of 'A'", "own kafka_topic"],
        ),
        (
            "topics:\n  - {name: A, key: orderId}\n",
            ["topics[A].key", "must start with '/'"],
        ),
        ("topics:\n  - {name: A, key: [/a, /a//b]}\n", ["topics[A].key", "empty segment"]),
        ("topics:\n  - {name: A, key: [/a, /a]}\n", ["topics[A].key", "listed twice"]),
        (
            "topics:\n  - {name: A, key: /id, key_generator: a.b:c}\n",
            ["topics[A].key_generator", "key and key_generator are both set"],
        ),
        (
            "topics:\n  - {name: A, message_type: binary, key: /id}\n",
            ["topics[A].key", "binary", "set a key_generator"],
        ),
        (
            "topics:\n  - {name: A, message_type: binary, indexes: [/x]}\n",
            ["topics[A].indexes", "binary", "parsed message type"],
        ),
        (
            "topics:\n  - {name: A, message_type: avro, key: /id}\n",
            ["topics[A].schema", "avro needs 'schema'"],
        ),
        (
            "topics:\n  - {name: A, message_type: avro, schema: nope.avsc}\n",
            ["topics[A].schema", "nope.avsc", "does not exist"],
        ),
        (
            "topics:\n  - {name: A, schema: a.avsc}\n",
            ["topics[A].schema", "only for message types avro, protobuf", "json"],
        ),
        (
            "topics:\n  - {name: A, message_type: yaml}\n",
            [
                "topics[A].message_type",
                "'yaml'",
                "allowed: json, avro, fix, nvfix, xml, bson, bflat, msgpack, protobuf",
            ],
        ),
        (
            "topics:\n  - {name: A, message_type: struct}\n",
            ["topics[A].message_type", "'struct'", "not implemented"],
        ),
        (
            "topics:\n  - {name: A, durability: durable}\n",
            ["topics[A].durability", "allowed: persistent, transient"],
        ),
        (
            "topics:\n  - {name: A, recovery_point: creation}\n",
            ["topics[A].recovery_point", "allowed: epoch, now, or a timestamp"],
        ),
        (
            "topics:\n  - {name: A, recovery_point: 2024-13-01T00:00:00Z}\n",
            ["topics[A].recovery_point", "not a valid date and time", "20240131T100000Z"],
        ),
        ("topics:\n  - {name: no}\n", ["topics[0].name", "a boolean False", "quote it"]),
        ("topics:\n  - {name: A, partitions: 0}\n", ["topics[A].partitions", "positive integer"]),
        ("topics:\n  - {name: A, partitions: '2'}\n", ["topics[A].partitions", "string '2'"]),
        ("topics:\n  - {name: A, partitions: true}\n", ["topics[A].partitions", "a boolean"]),
        ("topics:\n  - {name: A, partitions: 1.5}\n", ["topics[A].partitions", "positive"]),
        (
            "topics:\n  - {name: A, expiration: 30}\n",
            ["topics[A].expiration", "a unit is required"],
        ),
        (
            "topics:\n  - {name: A, expiration: soon}\n",
            ["topics[A].expiration", "'enabled' or 'disabled'"],
        ),
        ("defaults: {partitions: -1}\ntopics: []\n", ["defaults.partitions", "positive"]),
        (
            "topics:\n  - {name: A, key_domain: d}\n",
            ["topics[A].key_domain", "has no key"],
        ),
        (
            "topics:\n  - {name: 'a:b', key: /id}\n",
            ["topics[a:b].name", "'a:b' (taken from the topic name)", "set kafka_topic"],
        ),
        ("topics:\n  - {name: A, kafka_topic: 'x y'}\n", ["topics[A].kafka_topic", "letters"]),
        ("topics:\n  - {key: /id}\n", ["topics[0]", "no 'name'"]),
        ("topics:\n  - {name: 12}\n", ["topics[0].name", "a number 12"]),
        ("topics:\n  - [a, b]\n", ["topics[0]", "a mapping of fields"]),
        ("topics: {name: A}\n", ["topics", "a list of topics"]),
        ("defaults: []\ntopics: []\n", ["defaults", "mapping"]),
        ("- a\n", ["top level must be a mapping"]),
        ("", ["empty"]),
        (
            "topics:\n  - {name: A, key_generator: make}\n",
            ["topics[A].key_generator", "package.module:factory"],
        ),
        (
            "topics:\n  - {name: A, key_generator: {options: {}}}\n",
            ["topics[A].key_generator", "'factory' is required"],
        ),
        (
            "topics:\n  - {name: A, hash_indexes: [[]]}\n",
            ["topics[A].hash_indexes", "at least one field path"],
        ),
    ],
)
def test_yaml_errors(tmp_path: Path, text: str, fragments: list[str]) -> None:
    path = write(tmp_path, "bad.yaml", text)
    error = load_error(path, *fragments)
    assert error.source == str(path)


def test_yaml_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.yaml", "topics:\n  - name: A\n    key: [/a\n")
    error = load_error(path, "YAML syntax error", "line ")
    assert "column" in error.where


def test_yaml_duplicate_key_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "dup.yaml", "topics:\n  - name: A\n    key: /a\n    key: /b\n")
    load_error(path, "'key' appears twice", "first on line 3", "line 4, column 5")


# --------------------------------------------------------------------------- AMPS XML

FULL_XML = """<?xml version="1.0" encoding="UTF-8"?>
<AMPSConfig>
  <Name>test</Name>
  <Transports><Transport><Name>tcp</Name></Transport></Transports>
  <MessageTypes>
    <MessageType>
      <Name>order-avro</Name>
      <Module>avro</Module>
      <Schema>schemas/orders.avsc</Schema>
    </MessageType>
  </MessageTypes>
  <Modules>
    <Module><Name>key-generator</Name><Library>mypkg.keys:make</Library></Module>
  </Modules>
  <SOW>
    <Topic>
      <Name>ORDERS</Name>
      <MessageType>order-avro</MessageType>
      <Key>/invoice</Key>
      <Key>/customerId</Key>
      <KeyDomain>orders</KeyDomain>
      <Durability>TRANSIENT</Durability>
      <RecoveryPoint>20240131T100000Z</RecoveryPoint>
      <Expiration>5m</Expiration>
      <HashIndex><Key>/region</Key></HashIndex>
      <HashIndex><Key>/a</Key><Key>/b</Key></HashIndex>
      <Index>/alert/type</Index>
      <Index>/x</Index>
      <KafkaTopic>orders-in</KafkaTopic>
      <Partitions>4</Partitions>
    </Topic>
    <Topic>
      <Name>custom-keyed-sow</Name>
      <MessageType>JSON</MessageType>
      <KeyGenerator>
        <Module>key-generator</Module>
        <Options>
          <OptionOne>module-specific-option</OptionOne>
          <OptionTwo>${KEY_OPTION}</OptionTwo>
        </Options>
      </KeyGenerator>
      <RecoveryPoint>now</RecoveryPoint>
      <Expiration>enabled</Expiration>
    </Topic>
    <Topic>
      <Name>direct</Name>
      <MessageType>binary</MessageType>
      <KeyGenerator><Module>other.keys.make</Module></KeyGenerator>
      <Expiration>disabled</Expiration>
    </Topic>
  </SOW>
</AMPSConfig>
"""


def test_xml_every_field(tmp_path: Path) -> None:
    write(tmp_path, "schemas/orders.avsc", '{"type": "record", "name": "O", "fields": []}')
    path = write(tmp_path, "amps.xml", FULL_XML)
    topology = load_amps_config(path, environ={"KEY_OPTION": "from-env"})
    assert list(topology.topics) == ["ORDERS", "custom-keyed-sow", "direct"]
    assert topology.sources == (str(path),)
    orders = topology.topic("ORDERS")
    assert orders.message_type == "avro"
    assert orders.schema == str((tmp_path / "schemas/orders.avsc").resolve())
    assert orders.keys == ("/invoice", "/customerId")
    assert orders.key_domain == "orders"
    assert orders.durability is Durability.TRANSIENT
    assert orders.recovery_point.timestamp == JAN31
    assert orders.expiration_s == 300.0
    assert orders.hash_indexes == (HashIndexSpec(("/region",)), HashIndexSpec(("/a", "/b")))
    assert orders.indexes == ("/alert/type", "/x")
    assert orders.kafka_topic == "orders-in"
    assert orders.partitions == 4
    custom = topology.topic("custom-keyed-sow")
    assert custom.message_type == "json"
    assert custom.key_generator is not None
    assert custom.key_generator.factory == "mypkg.keys:make"
    assert dict(custom.key_generator.options) == {
        "OptionOne": "module-specific-option",
        "OptionTwo": "from-env",
    }
    assert custom.recovery_point.kind is RecoveryKind.NOW
    assert custom.expiration_s == 0.0
    assert custom.durability is Durability.PERSISTENT
    assert custom.kafka_topic == "custom-keyed-sow"
    direct = topology.topic("direct")
    assert direct.message_type == "binary"
    assert direct.key_generator == KeyGeneratorSpec("other.keys.make")
    assert direct.expiration_s is None


def test_xml_synonyms() -> None:
    text = """<AMPSConfig>
      <TopicMetaData>
        <TopicDefinition>
          <Topic>/ett/order</Topic>
          <MessageType>json</MessageType>
          <Key>/orderId</Key>
          <Duration>transient</Duration>
          <KafkaTopic>ett.order</KafkaTopic>
        </TopicDefinition>
        <Topic><Name>B</Name><Key>/id</Key></Topic>
      </TopicMetaData>
    </AMPSConfig>"""
    topology = parse_amps_config(text, "old.xml")
    old = topology.topic("/ett/order")
    assert old.keys == ("/orderId",)
    assert old.durability is Durability.TRANSIENT
    assert old.kafka_topic == "ett.order"
    assert topology.topic("B").keys == ("/id",)


def test_xml_environment_expansion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOW_TEST_TOPIC", "PRICES")
    monkeypatch.setenv("SOW_TEST_START", "2024-01-31T10:00:00Z")
    write(tmp_path, "prices.avsc", "{}")
    text = """<AMPSConfig>
      <MessageTypes><MessageType>
        <Name>a</Name><Module>avro</Module><Schema>${AMPS_CONFIG_DIRECTORY}/prices.avsc</Schema>
      </MessageType></MessageTypes>
      <SOW><Topic>
        <Name>${SOW_TEST_TOPIC}</Name><MessageType>a</MessageType><Key>/id</Key>
        <KafkaTopic>${SOW_TEST_TOPIC}-in</KafkaTopic>
        <RecoveryPoint>${SOW_TEST_START}</RecoveryPoint>
      </Topic></SOW>
    </AMPSConfig>"""
    topic = load_amps_config(write(tmp_path, "env.xml", text)).topic("PRICES")
    assert topic.kafka_topic == "PRICES-in"
    assert topic.recovery_point.timestamp == JAN31
    assert topic.schema == str((tmp_path / "prices.avsc").resolve())


def test_xml_sizing_options_say_why_they_do_not_apply(caplog: pytest.LogCaptureFixture) -> None:
    text = """<AMPSConfig><SOW>
      <Topic>
        <Name>ORDERS</Name>
        <FileName>sow/%n.sow</FileName>
        <Key>/invoice</Key>
        <MessageType>json</MessageType>
        <SlabSize>1MB</SlabSize>
        <InitialSlabCount>4</InitialSlabCount>
        <ExpectedKeyCountHint>1024</ExpectedKeyCountHint>
        <History><Window>7d</Window><Granularity>15m</Granularity></History>
        <Enrichment><Field>CONCAT(/a, /b) AS /c</Field></Enrichment>
      </Topic>
      <Topic><Name>ALL</Name><Pattern>orders.*</Pattern><Key>/id</Key></Topic>
    </SOW></AMPSConfig>"""
    with caplog.at_level(logging.INFO, logger="processor.topology.amps_xml"):
        topology = parse_amps_config(text, "cfg.xml")
    orders = topology.topic("ORDERS")
    assert orders.keys == ("/invoice",)
    logged = caplog.text
    for tag in ("FileName", "SlabSize", "InitialSlabCount", "ExpectedKeyCountHint"):
        assert f"<{tag}> does not apply in kafka-sow" in logged
    assert "ORDERS.sow-changelog" in logged
    assert "<Pattern>" not in logged
    assert topology.topic("ALL").pattern == "orders.*"
    assert "<Enrichment>" not in logged
    assert [o.element for o in orders.unused_options] == [
        "FileName",
        "SlabSize",
        "InitialSlabCount",
        "ExpectedKeyCountHint",
    ]
    assert orders.enrichment == ("CONCAT(/a, /b) AS /c",)
    assert orders.history == History(7 * 86400, 15 * 60)
    assert "AMPSConfig/SOW/Topic[1]/SlabSize" in logged
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []  # every option applies, or says at INFO why it does not


def sow(*topics: str, extra: str = "") -> str:
    body = "".join(f"<Topic>{t}</Topic>" for t in topics)
    return f"<AMPSConfig>{extra}<SOW>{body}</SOW></AMPSConfig>"


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            sow("<Name>A</Name><Key>/a</Key>", "<Name>B</Name><Keys>/b</Keys>"),
            ["AMPSConfig/SOW/Topic[2]/Keys", "unknown element 'Keys' in <Topic>", "'Key'?"],
        ),
        (
            sow("<Name>A</Name><key>/a</key>"),
            ["Topic[1]/key", "did you mean 'Key'?", "allowed:", "KafkaTopic", "FileName"],
        ),
        (
            "<AMPSConfig><SOW><Tpoic/></SOW></AMPSConfig>",
            ["AMPSConfig/SOW/Tpoic", "in <SOW>", "'Topic'?", "ConflatedTopic"],
        ),
        (sow("<Name>A</Name><Key>orderId</Key>"), ["Topic[1]/Key", "must start with '/'"]),
        (
            sow("<Name>A</Name><Key>/a</Key><Key>/a//b</Key>"),
            ["Topic[1]/Key[2]", "empty segment"],
        ),
        (
            sow("<Name>A</Name><Key>/a</Key><KeyGenerator><Module>a.b</Module></KeyGenerator>"),
            ["Topic[1]/KeyGenerator", "Key and KeyGenerator are both set"],
        ),
        (
            sow("<Name>A</Name><MessageType>binary</MessageType><Key>/a</Key>"),
            ["Topic[1]/Key", "binary", "KeyGenerator"],
        ),
        (
            sow("<Name>A</Name><MessageType>yaml</MessageType>"),
            [
                "Topic[1]/MessageType",
                "'yaml'",
                "allowed: json, avro, fix, nvfix, xml, bson, bflat, msgpack",
                "MessageTypes",
            ],
        ),
        (
            sow("<Name>A</Name><MessageType>avro</MessageType>"),
            ["Topic[1]/MessageType", "avro needs a declaration", "<Module>avro</Module>"],
        ),
        (
            sow(
                "<Name>A</Name><MessageType>pb</MessageType>",
                extra="<MessageTypes><MessageType><Name>pb</Name><Module>struct</Module>"
                "</MessageType></MessageTypes>",
            ),
            ["MessageTypes/MessageType/Module", "'struct'", "not implemented"],
        ),
        (
            sow(
                "<Name>A</Name><MessageType>av</MessageType>",
                extra="<MessageTypes><MessageType><Name>av</Name><Module>avro</Module>"
                "<Schema>missing.avsc</Schema></MessageType></MessageTypes>",
            ),
            ["MessageTypes/MessageType/Schema", "missing.avsc", "does not exist"],
        ),
        (
            sow(
                "<Name>A</Name><MessageType>av</MessageType>",
                extra="<MessageTypes><MessageType><Name>av</Name><Module>avro</Module>"
                "</MessageType></MessageTypes>",
            ),
            ["MessageTypes/MessageType", "needs <Schema>"],
        ),
        (
            sow("<Name>A</Name><Durability>durable</Durability>"),
            ["Topic[1]/Durability", "allowed: persistent, transient"],
        ),
        (
            sow("<Name>A</Name><RecoveryPoint>creation</RecoveryPoint>"),
            ["Topic[1]/RecoveryPoint", "allowed: epoch, now, or a timestamp"],
        ),
        (
            sow("<Name>A</Name><Expiration>30</Expiration>"),
            ["Topic[1]/Expiration", "a unit is required"],
        ),
        (sow("<Name>A</Name><Partitions>0</Partitions>"), ["Topic[1]/Partitions", ">= 1"]),
        (sow("<Name>A</Name><Partitions>two</Partitions>"), ["Partitions", "not a whole number"]),
        (
            sow("<Name>A</Name><MessageType>json</MessageType><MessageType>json</MessageType>"),
            ["Topic[1]/MessageType[2]", "given 2 times", "allowed once"],
        ),
        (
            sow("<Name>A</Name><Topic>A</Topic>"),
            ["Topic[1]/Topic", "old synonym of <Name>"],
        ),
        (sow("<Key>/a</Key>"), ["AMPSConfig/SOW/Topic[1]", "no <Name>"]),
        (sow("<Name>A</Name>", "<Name>A</Name>"), ["Topic[2]", "defined twice", "Topic[1]"]),
        (
            sow("<Name>/ett order</Name><Key>/a</Key>"),
            ["Topic[1]/Name", "(taken from the topic name)", "set KafkaTopic"],
        ),
        (sow("<Name>${SOW_SURELY_UNSET}</Name>"), ["Topic[1]/Name", "'SOW_SURELY_UNSET'"]),
        (sow("<Name>A</Name><SlabSize>5XB</SlabSize>"), ["Topic[1]/SlabSize", "unknown size"]),
        (
            sow("<Name>A</Name><History><Window>7d</Window></History>"),
            ["Topic[1]/History", "needs <Granularity>"],
        ),
        (
            sow("<Name>A</Name><History><Window>7</Window><Granularity>1m</Granularity></History>"),
            ["Topic[1]/History/Window", "a unit is required"],
        ),
        (
            sow(
                "<Name>A</Name><Expiration>1h</Expiration>"
                "<History><Window>7d</Window><Granularity>1m</Granularity></History>"
            ),
            ["Topic[1]/Expiration", "must be disabled when <History>"],
        ),
        (
            sow(
                "<Name>A</Name><Pattern>A.*</Pattern>"
                "<Enrichment><Field>1 AS /x</Field></Enrichment>"
            ),
            ["Topic[1]/Enrichment", "<Pattern> topic cannot have"],
        ),
        (
            sow("<Name>A</Name><HashIndex><Field>/x</Field></HashIndex>"),
            ["Topic[1]/HashIndex/Field", "allowed: Key"],
        ),
        (sow("<Name>A</Name><HashIndex/>"), ["Topic[1]/HashIndex", "one or more <Key>"]),
        (
            sow("<Name>A</Name><KeyGenerator><Options/></KeyGenerator>"),
            ["Topic[1]/KeyGenerator", "needs <Module>"],
        ),
        (
            sow("<Name>A</Name><KeyGenerator><Module>libkeys.so</Module></KeyGenerator>"),
            ["KeyGenerator/Module", "native library", "AMPSConfig/Modules/Module"],
        ),
        (
            sow(
                "<Name>A</Name><KeyGenerator><Module>kg</Module></KeyGenerator>",
                extra="<Modules><Module><Name>kg</Name><Library>libkg.so</Library></Module>"
                "</Modules>",
            ),
            ["AMPSConfig/Modules/Module/Library", "native library"],
        ),
        (sow("<Name>A</Name><KeyDomain>d</KeyDomain>"), ["Topic[1]/KeyDomain", "has no Key"]),
        (sow("<Name>A</Name><Key><Path>/a</Path></Key>"), ["Topic[1]/Key", "holds text"]),
        (sow("<Name>A</Name><Key/>"), ["Topic[1]/Key", "<Key> is empty"]),
        (
            "<AMPSConfig><SOW><Topic><Name>A</Name></SOW></AMPSConfig>",
            ["XML syntax error", "line 1"],
        ),
        ("<Config><SOW/></Config>", ["root element is <Config>", "<AMPSConfig>"]),
        ("<AMPSConfig><Name>x</Name></AMPSConfig>", ["no <SOW> (or <TopicMetaData>) section"]),
    ],
)
def test_xml_errors(tmp_path: Path, text: str, fragments: list[str]) -> None:
    path = write(tmp_path, "config.xml", text)
    error = load_error(path, *fragments)
    assert error.source == str(path)


def test_xml_syntax_error_position(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.xml", "<AMPSConfig>\n  <SOW>\n  </Topic>\n</AMPSConfig>\n")
    error = load_error(path, "XML syntax error", "mismatched tag")
    assert error.where == "line 3, column 5"


# --------------------------------------------------------------------------- directories


def test_directory_merges_sorted_files(tmp_path: Path) -> None:
    write(tmp_path, "b.yaml", "topics: [{name: B, key: /id}]")
    write(tmp_path, "a.xml", sow("<Name>A</Name><Key>/id</Key>"))
    write(tmp_path, "c.yml", "topics: [{name: C, key: /id}]")
    write(tmp_path, ".hidden.yaml", "not: [valid")
    write(tmp_path, "notes.txt", "ignored")
    write(tmp_path, "sub/d.yaml", "topics: [{name: D, key: /id}]")
    topology = load_topology(tmp_path)
    assert list(topology.topics) == ["A", "B", "C"]
    assert topology.sources == tuple(str(tmp_path / n) for n in ("a.xml", "b.yaml", "c.yml"))


def test_directory_duplicate_topic_names_both_files(tmp_path: Path) -> None:
    write(tmp_path, "one.yaml", "topics: [{name: ORDERS, key: /id}]")
    write(tmp_path, "two.xml", sow("<Name>ORDERS</Name><Key>/id</Key><KafkaTopic>o</KafkaTopic>"))
    assert load_topology(tmp_path / "two.xml").topics  # each file alone is fine
    with pytest.raises(TopologyError) as info:
        load_topology(tmp_path)
    message = str(info.value)
    assert "one.yaml" in message
    assert "two.xml" in message
    assert "'ORDERS' is defined twice" in message


def test_directory_kafka_topic_collision(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "topics: [{name: A, kafka_topic: x}]")
    write(tmp_path, "b.yaml", "topics: [{name: B, kafka_topic: x.sow-changelog}]")
    with pytest.raises(TopologyError) as info:
        load_topology(tmp_path)
    message = str(info.value)
    assert "a.yaml" in message
    assert "b.yaml" in message
    assert "'x.sow-changelog'" in message


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("topo.json", "{}", "unknown topology file extension '.json'"),
        ("empty.yaml", "topics: []", "defines no SOW topics"),
    ],
)
def test_file_level_errors(tmp_path: Path, name: str, text: str, fragment: str) -> None:
    load_error(write(tmp_path, name, text), fragment)


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    load_error(tmp_path / "missing.yaml", "no such file or directory")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TopologyError, match=r"no topology files; expected \*\.yaml"):
        load_topology(empty)


# --------------------------------------------------------------------------- examples


def test_example_topologies_load() -> None:
    topology = load_topology(EXAMPLES)
    assert set(topology.topics) == {
        "ORDERS",
        "INVOICES",
        "ShippingStatus",
        "OpenOrders",
        "BLOBS",
        "ALERTS",
        "POSITIONS",
        "ORDERS_BY_SYMBOL",  # a view over ORDERS (orders.yaml)
        "WORK",  # a queue over the plain topic WORK (work.yaml)
    }
    assert set(topology.plain_topics) == {"WORK"}
    orders = topology.topic("ORDERS")
    assert (orders.keys, orders.message_type, orders.partitions) == (("/orderId",), "json", 2)
    assert topology.topic("INVOICES").keys == ("/invoice", "/customerId")
    for name in ("ShippingStatus", "OpenOrders"):
        assert topology.topic(name).domain == "orders"
        assert topology.topic(name).keys == ("/orderId",)
    blobs = topology.topic("BLOBS")
    assert blobs.message_type == "binary"
    assert blobs.user_keyed
    assert topology.topic("ALERTS").keys == ("/alert/id",)
    assert topology.topic("ALERTS").indexes == ("/alert/type",)
    assert topology.topic("POSITIONS").hash_indexes
    view = topology.topic("ORDERS_BY_SYMBOL").view
    assert view is not None
    assert (view.grouping, view.underlying[0].name) == (("/symbol",), "ORDERS")
    queue = topology.topic("WORK").queue
    assert queue is not None
    assert (queue.underlying_topics, queue.lease_period_s) == (("WORK",), 30.0)
    assert len(topology.by_kafka_topic()) == len(topology.topics)


@pytest.mark.parametrize(
    "name", ["orders.yaml", "invoices.yaml", "shipping.yaml", "blobs.yaml", "work.yaml"]
)
def test_each_example_file_loads_alone(name: str) -> None:
    assert load_topology(EXAMPLES / name).topics


def test_example_amps_config_loads_without_warnings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        topology = load_topology(EXAMPLES / "amps-config.xml")
    assert set(topology.topics) == {"ALERTS", "POSITIONS"}
    assert not caplog.records


def test_a_path_like_topic_name_reads_a_dotted_kafka_topic() -> None:
    """AMPS topic names are often paths (seed 002's /ett/order); Kafka's have no '/'."""
    topology = parse_amps_config(sow("<Name>/ett/order</Name><Key>/a</Key>"), "cfg.xml")
    assert topology.topic("/ett/order").kafka_topic == "ett.order"
