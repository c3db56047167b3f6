"""Which query services a queue partition takes for dead (processor/queues/services.py):
silence past the timeout, or a later incarnation of the same instance (issue 31 item 1)."""

from __future__ import annotations

from processor.queues.commands import incarnation_of, service_id
from processor.queues.services import SERVICE_TIMEOUT_MS, Services


def test_a_service_id_carries_its_instance_and_incarnation() -> None:
    assert incarnation_of(service_id("ab12", 1700)) == ("ab12", 1700)
    assert incarnation_of("5f1c0e9a77aa") is None  # an id without one (never superseded)
    assert incarnation_of("@12") is None
    assert incarnation_of("host@x") is None


def test_a_later_incarnation_ends_the_earlier_ones_subscriptions_at_once() -> None:
    services = Services()
    old, new, other = service_id("i1", 100), service_id("i1", 200), service_id("i2", 50)
    services.restored("old/1", old, 0)
    services.restored("old/2", old, 0)
    services.restored("other/1", other, 0)
    assert services.heard(other, 10) == (["other/1"], [])
    resumed, ended = services.heard(new, 20)
    assert (resumed, sorted(ended)) == ([], ["old/1", "old/2"])
    for subscription in ended:
        services.dropped(subscription)
    services.held("new/1", new)
    assert services.heard(new, 30) == (["new/1"], [])
    # an earlier incarnation heard after a later one ends nothing
    assert services.heard(service_id("i1", 150), 40) == ([], [])


def test_silence_past_the_timeout_is_death_measured_in_command_times() -> None:
    services = Services()
    services.reset(0)
    services.restored("a/1", "a", 0)
    services.heard("b", 0)
    services.commanded(SERVICE_TIMEOUT_MS - 1)
    services.heard("b", SERVICE_TIMEOUT_MS - 1)
    assert services.gone(SERVICE_TIMEOUT_MS - 1) == set()
    services.commanded(SERVICE_TIMEOUT_MS)
    services.heard("b", SERVICE_TIMEOUT_MS)
    assert services.gone(SERVICE_TIMEOUT_MS) == {"a"}
    assert services.forget("a") == ["a/1"]
    assert services.gone(3 * SERVICE_TIMEOUT_MS) == {"b"}  # nothing applied for that long
