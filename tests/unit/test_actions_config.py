"""Actions in both topology formats (docs/actions.md), and the schedules of
``amps-action-on-schedule``."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from processor.errors import TopologyError, ValueFormatError
from processor.topology.action_rules import parse_schedule
from processor.topology.actions import DoModule, OnModule, substitute, time_variables
from processor.topology.amps_xml import parse_amps_config
from processor.topology.loader import load_topology
from processor.topology.yaml_loader import parse_yaml

TOPICS = """
topics:
  - {name: ORDERS, key: /id, expiration: 10s}
  - {name: LATE, key: /id}
  - {name: DLQ, sow: false}
"""


def _yaml(actions: str) -> list:  # type: ignore[type-arg]
    return list(parse_yaml(TOPICS + "actions:\n" + actions, "t.yaml").actions)


def _xml(actions: str) -> list:  # type: ignore[type-arg]
    text = f"""<AMPSConfig>
  <SOW>
    <Topic><Name>ORDERS</Name><MessageType>json</MessageType><Key>/id</Key>
      <Expiration>10s</Expiration></Topic>
    <Topic><Name>LATE</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
  </SOW>
  <Actions>{actions}</Actions>
</AMPSConfig>"""
    return list(parse_amps_config(text, "t.xml").actions)


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def test_yaml_reads_every_supported_action() -> None:
    actions = _yaml("""
  - name: purge
    on: {module: schedule, every: 1h}
    do:
      - {module: delete-sow, topic: ORDERS, filter: "/status = 'closed'"}
      - {module: amps-action-do-compact-sow}
  - on: {module: sow-expire-message, topic: ORDERS, filter: "/id > 1"}
    do: {module: publish-message, topic: DLQ}
  - on: {module: sow-delete-message, topic: ORDERS}
    do: {module: publish-message, topic: DLQ, data: "{{AMPS_DATA}}"}
  - on: {module: oof-message, topic: ORDERS, filter: "/status = 'open'"}
    do: {module: publish-message, topic: LATE}
  - on: {module: message-condition-timeout, topic: ORDERS, filter: "/s = 1", duration: 90s}
    do: {module: publish-message, topic: LATE, message_type: json}
""")
    purge, expire, delete, oof, timeout = actions
    assert purge.name == "purge"
    assert purge.on.every is not None
    assert purge.on.every.interval_ms == 3_600_000
    # compaction without a Topic: every SOW topic
    assert [(s.module, s.topic) for s in purge.do] == [
        (DoModule.DELETE_SOW, "ORDERS"),
        (DoModule.COMPACT_SOW, "ORDERS"),
        (DoModule.COMPACT_SOW, "LATE"),
    ]
    assert purge.topics == ("ORDERS", "LATE")
    assert (expire.name, expire.on.module, expire.on.filter) == (
        "action 2",
        OnModule.SOW_EXPIRE,
        "/id > 1",
    )
    assert delete.do[0].data == "{{AMPS_DATA}}"
    assert oof.on.module is OnModule.OOF
    assert oof.do[0].topic == "LATE"
    assert timeout.on.duration_ms == 90_000
    assert "for 90s" in timeout.describe()


def test_amps_xml_reads_the_same_actions() -> None:
    (purge, late) = _xml("""
    <Action>
      <On><Module>amps-action-on-schedule</Module>
        <Options><Every>Saturday at 23:30</Every><Name>weekly</Name></Options></On>
      <Do><Module>amps-action-do-delete-sow</Module>
        <Options><Topic>ORDERS</Topic><MessageType>json</MessageType>
          <Filter>/status = 'closed'</Filter></Options></Do>
      <Do><Module>amps-action-do-compact-sow</Module>
        <Options><Topic>ORDERS</Topic></Options></Do>
    </Action>
    <Action>
      <On><Module>amps-action-on-message-condition-timeout</Module>
        <Options><Topic>ORDERS</Topic><Filter>/status = 'pending'</Filter>
          <Duration>5m</Duration></Options></On>
      <Do><Module>amps-action-do-publish-message</Module>
        <Options><Topic>LATE</Topic><Data>{{AMPS_DATA}}</Data></Options></Do>
    </Action>""")
    assert purge.name == "weekly"
    assert purge.where == "AMPSConfig/Actions/Action[1]"
    assert purge.on.every is not None
    assert purge.on.every.text == "Saturday at 23:30"
    assert [s.module for s in purge.do] == [DoModule.DELETE_SOW, DoModule.COMPACT_SOW]
    assert late.name == "action 2"
    assert late.on.duration_ms == 300_000
    assert late.do[0].data == "{{AMPS_DATA}}"


@pytest.mark.parametrize(
    ("actions", "where", "message"),
    [
        (
            "  - {on: {module: amps-action-on-client-connect}, do: {module: publish-message}}",
            "actions[0].on",
            "AMPS action kafka-sow does not run.*amps-action-on-schedule",
        ),
        (
            "  - {on: {module: schedule, every: 1h}, do: {module: amps-action-do-rotate-log}}",
            "actions[0].do",
            "does not run",
        ),
        (
            "  - {on: {module: schedule, every: 1h}, do: {module: nonsense-thing}}",
            "actions[0].do",
            "unknown action module 'nonsense-thing' for <Do>",
        ),
        ("  - {on: {module: whatever}, do: []}", "actions[0].on", "unknown action module.*<On>"),
        (
            "  - {on: {module: schedule, every: 1h}, do: {module: publish-message, topic: DLQ}}",
            "actions[0].do",
            "cannot run amps-action-do-publish-message",
        ),
        (
            "  - {on: {module: schedule}, do: {module: compact-sow}}",
            "actions[0].on",
            "needs Every",
        ),
        (
            "  - {on: {module: schedule, every: 0.5s}, do: {module: compact-sow}}",
            "actions[0].on",
            "shorter than 1s",
        ),
        (
            "  - {on: {module: sow-expire-message, topic: NOPE}, "
            "do: {module: publish-message, topic: DLQ}}",
            "actions[0]",
            "'NOPE' is not a SOW topic",
        ),
        (
            "  - {on: {module: sow-expire-message, topic: ORDERS, filter: '/a = ('}, "
            "do: {module: publish-message, topic: DLQ}}",
            "actions[0]",
            "not a valid filter",
        ),
        (
            "  - {on: {module: sow-expire-message, topic: ORDERS}, "
            "do: {module: publish-message, topic: DLQ, data: '{{AMPS_NOPE}}'}}",
            "actions[0].do",
            "variables are AMPS_DATA",
        ),
        (
            "  - {on: {module: sow-expire-message, topic: ORDERS, every: 1s}, "
            "do: {module: publish-message, topic: DLQ}}",
            "actions[0].on",
            "unknown amps-action-on-sow-expire-message option 'every'",
        ),
        (
            "  - {on: {module: message-condition-timeout, topic: ORDERS, filter: '1=1'}, "
            "do: {module: publish-message, topic: DLQ}}",
            "actions[0].on",
            "needs Duration",
        ),
        (
            "  - {on: {module: schedule, every: 1h}, do: {module: delete-sow, topic: ORDERS}}",
            "actions[0].do",
            "needs a Filter",
        ),
        (
            "  - {name: a, on: {module: schedule, every: 1h}, do: {module: compact-sow}}\n"
            "  - {name: a, on: {module: schedule, every: 2h}, do: {module: compact-sow}}",
            "actions[1]",
            "two actions are named 'a'",
        ),
    ],
)
def test_yaml_refusals_say_what_and_where(actions: str, where: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message) as caught:
        _yaml(actions)
    assert caught.value.where == where


def test_amps_xml_refusals_name_the_element() -> None:
    with pytest.raises(TopologyError, match="does not run") as caught:
        _xml("""<Action><On><Module>amps-action-on-schedule</Module>
            <Options><Every>1d</Every></Options></On>
            <Do><Module>amps-action-do-rotate-log</Module></Do></Action>""")
    assert caught.value.where == "AMPSConfig/Actions/Action[1]/Do"
    with pytest.raises(TopologyError, match="<If>"):
        _xml("""<Action><On><Module>amps-action-on-schedule</Module>
            <Options><Every>1d</Every></Options></On><If/>
            <Do><Module>amps-action-do-compact-sow</Module></Do></Action>""")
    with pytest.raises(TopologyError, match="unknown amps-action-do-compact-sow option '<Nope>'"):
        _xml("""<Action><On><Module>amps-action-on-schedule</Module>
            <Options><Every>1d</Every></Options></On>
            <Do><Module>amps-action-do-compact-sow</Module>
              <Options><Nope>1</Nope></Options></Do></Action>""")


def test_a_directory_checks_actions_once_merged(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "topics: [{name: ORDERS, key: /id}]\n"
        "actions: [{on: {module: sow-delete-message, topic: ORDERS}, "
        "do: {module: publish-message, topic: AUDIT}}]\n"
    )
    (tmp_path / "b.yaml").write_text("topics: [{name: AUDIT, key: /id}]\n")
    (action,) = load_topology(tmp_path).actions
    assert action.do[0].topic == "AUDIT"
    with pytest.raises(TopologyError, match="'AUDIT' is not a SOW topic"):
        load_topology(tmp_path / "a.yaml")


def test_a_publish_to_another_message_type_needs_data() -> None:
    text = TOPICS + "  - {name: X, key: /id, message_type: xml}\nactions:\n"
    action = (
        "  - {on: {module: sow-delete-message, topic: ORDERS}, "
        "do: {module: publish-message, topic: X%s}}\n"
    )
    with pytest.raises(TopologyError, match=r"holds xml messages.*give Data"):
        parse_yaml(text + action % "", "t.yaml")
    parse_yaml(text + action % ", data: '<m>{{AMPS_SOW_KEY}}</m>'", "t.yaml")


@pytest.fixture
def five_hours_behind_utc() -> Iterator[None]:
    """The local time zone UTC-5, without daylight saving (POSIX ``TZ``)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "XST+05"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


@pytest.mark.parametrize(
    ("every", "now", "expected"),
    [  # instants in UTC; the local time zone is UTC-5
        ("1h", "2026-11-29T16:55:10", "2026-11-29T17:55:10"),  # a timer: from the last run
        ("30s", "2026-11-29T16:55:00", "2026-11-29T16:55:30"),
        ("1d", "2026-11-29T16:55:00", "2026-11-30T16:55:00"),
        ("00:30", "2026-11-29T16:55:00", "2026-11-30T05:30:00"),  # local
        ("00:30Z", "2026-11-29T16:55:00", "2026-11-30T00:30:00"),  # UTC
        ("17:05Z", "2026-11-29T16:55:00", "2026-11-29T17:05:00"),
        ("12:00", "2026-11-29T16:55:00", "2026-11-29T17:00:00"),
        ("Saturday at 11:00", "2026-11-29T16:55:00", "2026-12-05T16:00:00"),
        ("Saturday at 23:30Z", "2026-11-29T16:55:00", "2026-12-05T23:30:00"),
        ("wednesday at 03:32z", "2026-11-29T16:55:00", "2026-12-02T03:32:00"),
        ("Sun at 04:00Z", "2026-11-29T03:00:00", "2026-11-29T04:00:00"),
        ("*/15 * * * *", "2026-11-29T16:55:00", "2026-11-29T17:00:00"),
        ("0 2 * * 1-5", "2026-11-28T16:55:00", "2026-11-30T07:00:00"),  # Sat -> Mon
        ("0 0 29 feb *", "2026-11-29T16:55:00", "2028-02-29T05:00:00"),
        ("0 0 13 * fri", "2026-11-29T16:55:00", "2026-12-04T05:00:00"),  # either day
        ("5,10 8-9 * * 0", "2026-11-29T13:05:00", "2026-11-29T13:10:00"),
        ("0 12 * * 7", "2026-11-29T17:55:00", "2026-12-06T17:00:00"),  # 7 = Sunday
    ],
)
@pytest.mark.usefixtures("five_hours_behind_utc")
def test_schedules_tick(every: str, now: str, expected: str) -> None:
    assert parse_schedule(every).next_after(_ms(now)) == _ms(expected)


@pytest.mark.parametrize(
    ("every", "message"),
    [
        ("", "empty"),
        ("soon", "is not a duration"),
        ("25:00", "not a time of day"),
        ("11:30PM", "24-hour notation"),
        ("Sun at 4:00 am", "24-hour notation"),
        ("every day at 17:00", "is not a duration"),
        ("Funday at 10:00", "not a day of the week"),
        ("60 * * * *", "outside 0-59"),
        ("* * * * 8", "outside 0-7"),
        ("x * * * *", "not a number"),
        ("*/0 * * * *", "step must be 1 or more"),
        ("0 0 31 2 *", "no tick"),
        ("500ms", "shorter than 1s"),
    ],
)
def test_bad_schedules_say_what_is_allowed(every: str, message: str) -> None:
    with pytest.raises(ValueFormatError, match=message):
        parse_schedule(every).next_after(0)


def test_the_processor_may_write_where_its_actions_write() -> None:
    from processor.log.kafka.acls import AclContext, component_acls

    topology = parse_yaml(
        TOPICS
        + "actions:\n"
        + "  - {on: {module: schedule, every: 1h}, "
        + "do: {module: delete-sow, topic: ORDERS, filter: '1=1'}}\n"
        + "  - {on: {module: sow-delete-message, topic: LATE}, "
        + "do: {module: publish-message, topic: DLQ}}\n",
        "t.yaml",
    )
    acls = component_acls("processor", topology, AclContext(dead_letter_topic="dead"))
    written = {acl.name for acl in acls if acl.operation == "Write"}
    assert {"ORDERS", "DLQ"} <= written


def test_an_expiry_takes_amps_reasons_and_an_oof_its_type() -> None:
    expire, oof = _yaml("""
  - on: {module: sow-expire-message, topic: ORDERS, reason: "time_limit, forced_expire"}
    do: {module: publish-message, topic: DLQ}
  - on: {module: oof-message, topic: ORDERS, filter: "/s = 1", type: delete}
    do: {module: publish-message, topic: DLQ}
""")
    assert expire.on.reasons == ("time_limit", "forced_expire")
    assert oof.on.reasons == ("deleted",)
    assert "(deleted)" in oof.describe()
    (xml,) = _xml("""<Action>
  <On><Module>amps-action-on-sow-expire-message</Module>
    <Options><Topic>ORDERS</Topic><MessageType>json</MessageType>
      <Reason>time_limit</Reason></Options></On>
  <Do><Module>amps-action-do-publish-message</Module>
    <Options><Topic>LATE</Topic><MessageType>json</MessageType>
      <Data>{{AMPS_DATA}}</Data></Options></Do></Action>""")
    assert xml.on.reasons == ("time_limit",)


@pytest.mark.parametrize(
    ("on", "message"),
    [
        ("{module: sow-expire-message, topic: ORDERS, reason: expired}", "time_limit, forced"),
        ("{module: sow-expire-message, topic: ORDERS, reason: max_cancels}", "never run"),
        ("{module: oof-message, topic: ORDERS, type: expire}", "match, delete"),
        ("{module: sow-delete-message, topic: ORDERS, reason: time_limit}", "option .reason."),
    ],
)
def test_bad_reasons_and_types_are_refused(on: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        _yaml(f"  - {{on: {on}, do: {{module: publish-message, topic: DLQ}}}}\n")


def test_data_takes_amps_variables_and_refuses_others() -> None:
    template = "{{AMPS_DATA_LENGTH}}{{AMPS_CORRELATION_ID}}{{AMPS_DATETIME}}{{AMPS_BYTE_0A}}"
    _yaml(
        "  - {on: {module: sow-delete-message, topic: ORDERS}, "
        f"do: {{module: publish-message, topic: DLQ, data: '{template}'}}}}\n"
    )
    for bad in ("{{AMPS_BYTE_0a}}", "{{AMPS_CLIENT_NAME}}"):
        with pytest.raises(TopologyError, match="AMPS_BYTE_XX"):
            _yaml(
                "  - {on: {module: sow-delete-message, topic: ORDERS}, "
                f"do: {{module: publish-message, topic: DLQ, data: '{bad}'}}}}\n"
            )


def test_a_publish_takes_delta_and_refuses_update_only() -> None:
    step = "  - {on: {module: sow-delete-message, topic: ORDERS}, do: {module: publish-message, "
    (action,) = _yaml(step + "topic: LATE, delta: true}}\n")
    assert action.do[0].delta
    (action,) = _yaml(step + "topic: LATE, delta: 'false', update_only: 'false'}}\n")
    assert not action.do[0].delta
    with pytest.raises(TopologyError, match="UpdateOnly true is not supported"):
        _yaml(step + "topic: LATE, delta: 'true', update_only: 'true'}}\n")
    with pytest.raises(TopologyError, match="true or false"):
        _yaml(step + "topic: LATE, delta: 'yes'}}\n")


def test_a_scheduled_delete_filter_takes_the_tick_time() -> None:
    step = "  - {on: {module: schedule, every: 1h}, do: {module: delete-sow, topic: ORDERS, "
    text = "LAST_UPDATED() < {{AMPS_UNIX_TIMESTAMP}} - 86400 AND /d < '{{AMPS_DATETIME}}'"
    (action,) = _yaml(step + f'filter: "{text}"}}}}\n')
    assert substitute(action.do[0].filter, time_variables(86_400_500)) == (
        "LAST_UPDATED() < 86400 - 86400 AND /d < '1970-01-02T00:00:00.500Z'"
    )
    with pytest.raises(TopologyError, match="may use AMPS_DATETIME, AMPS_UNIX_TIMESTAMP"):
        _yaml(step + "filter: '/id = {{AMPS_DATA}}'}}\n")


def test_compaction_takes_message_type_only_with_a_topic() -> None:
    step = "  - {on: {module: schedule, every: 1h}, do: {module: compact-sow%s}}\n"
    assert len(_yaml(step % ", topic: ORDERS, message_type: json")[0].do) == 1
    assert len(_yaml(step % "")[0].do) == 2  # every SOW topic
    with pytest.raises(TopologyError, match="MessageType only with a Topic"):
        _yaml(step % ", message_type: json")
