"""The ``sow`` command line as a user types it (processor/cli/parser.py: ``parse``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.cli.parser import parse


def test_options_may_come_between_the_topic_and_the_message() -> None:
    args = parse(["publish", "ORDERS", "--delta", '{"orderId": 1}'])
    assert (args.topic, args.data, args.delta) == ("ORDERS", '{"orderId": 1}', True)
    args = parse(["publish", "--delta", "ORDERS", '{"orderId": 1}', "--wait"])
    assert (args.topic, args.data, args.delta, args.wait) == (
        "ORDERS",
        '{"orderId": 1}',
        True,
        True,
    )


def test_a_publish_without_a_message_reads_standard_input() -> None:
    assert parse(["publish", "ORDERS", "--delta"]).data is None


def test_arguments_left_over_are_still_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(["publish", "ORDERS", '{"orderId": 1}', "more"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: more" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["query", "ORDERS", "stray"])


def test_the_publish_timeout_help_reads_as_one_sentence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse(["publish", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "seconds an acknowledgement (of DATA" in text
    assert text.count("may take") == 1


def test_a_reader_that_stops_reading_ends_the_command_quietly() -> None:
    """``sow query ... | head -1``: the pipe's reader goes away; no traceback, exit 141."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes
    try:
        done = subprocess.run(
            [sys.executable, "-m", "processor.cli", "eval", "1 + 2"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "BrokenPipe" not in done.stderr, done.stderr


def test_the_applied_vector_of_publish_wait_pastes_into_min_position() -> None:
    from processor.cli.client_commands import _parse_positions

    applied = '["ORDERS.input/0/41", "ORDERS.input/1/7"]'  # as `sow publish --wait` prints
    expected = [("ORDERS.input", 0, 41), ("ORDERS.input", 1, 7)]
    for given in (
        [applied],
        ["ORDERS.input/0/41,ORDERS.input/1/7"],
        ["ORDERS.input/0/41", "ORDERS.input/1/7"],
    ):
        parsed = _parse_positions(given)
        assert [(p.topic, p.partition, p.offset) for p in parsed] == expected


def test_a_min_position_that_is_not_one_says_what_it_expects() -> None:
    from processor.cli.client_commands import _parse_positions
    from processor.errors import SowError

    with pytest.raises(SowError, match="is not a JSON array of TOPIC/PARTITION/OFFSET"):
        _parse_positions(['["ORDERS.input/0/41", 3]'])
    with pytest.raises(SowError, match="is not TOPIC/PARTITION/OFFSET"):
        _parse_positions(["ORDERS.input/zero/41"])


def test_sow_publish_goes_straight_to_kafka_beside_a_running_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from processor.cli.client_commands import _direct_route
    from processor.cli.guards import record_served

    monkeypatch.setenv("SOW_STATE_DIR", str(tmp_path))
    assert _direct_route(parse(["publish", "ORDERS"])) is None  # no sow serve here
    record_served(tmp_path, "127.0.0.1:5", "", "127.0.0.1:9092", tmp_path / "topologies")
    route = ("127.0.0.1:9092", str((tmp_path / "topologies").resolve()))
    assert _direct_route(parse(["publish", "ORDERS"])) == route
    assert _direct_route(parse(["publish", "ORDERS", "--via", "kafka"])) == route
    assert _direct_route(parse(["publish", "ORDERS", "--via", "grpc"])) is None
    assert _direct_route(parse(["publish", "ORDERS", "--server", "h:1"])) is None
    # A processed acknowledgement is asked of the sow serve beside it.
    assert _direct_route(parse(["publish", "ORDERS", "--ack", "processed"])) == route
    kafka_processed = ["publish", "ORDERS", "--via", "kafka", "--ack", "processed"]
    assert _direct_route(parse(kafka_processed)) == route


def test_sow_serve_takes_the_embedded_cluster_size() -> None:
    from processor.cli.serve import _settings
    from processor.errors import ConfigurationError

    assert _settings(parse(["serve", "--embedded-brokers", "3"])).embedded_brokers == 3
    with pytest.raises(ConfigurationError, match="between 1 and 5"):
        _settings(parse(["serve", "--embedded-brokers", "9"]))
