"""Kafka clients kept past their broker's end print nothing (issue 18 item 5: rdkafka's
"Connection refused" lines came out after the test summary).

librdkafka writes its log lines to the process's stderr itself, so the clients run in a
child process whose stderr is read whole.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import StartOwnBroker

CHILD = textwrap.dedent(
    """
    import sys, time
    from processor.log.kafka.input import KafkaEndOffsets
    from processor.log.kafka.transactional import KafkaTransactionalLog
    ends = KafkaEndOffsets(sys.argv[1])
    assert ends.ends([], 10) == {}
    transactions = KafkaTransactionalLog(sys.argv[1], "noise-test")
    print("ready", flush=True)
    sys.stdin.readline()  # the broker is stopped now
    assert ends.ends([], 0.5) is None
    time.sleep(3)  # librdkafka retries its connections about once a second
    print("done", flush=True)
    """
)


def test_clients_that_outlive_their_broker_print_nothing(own_broker: StartOwnBroker) -> None:
    broker = own_broker()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, broker.bootstrap_servers],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdin is not None
    assert child.stdout.readline().strip() == "ready"
    broker.stop()
    out, err = child.communicate("\n", timeout=60)
    assert child.returncode == 0, err
    assert out.strip() == "done"
    assert "Connect" not in err, err
    assert "refused" not in err, err
