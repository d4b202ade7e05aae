"""Fake users fail the ways real devices fail: bye, crash (kill -9), freeze (silent death), reconnect."""

from __future__ import annotations

from typing import Callable

import pytest

from rollcall import BrokerError, BrokerProcess, FakeUser

Factory = Callable[..., BrokerProcess]


def test_online_set_and_bye_publish_each_change(rollcall_broker: BrokerProcess) -> None:
    """online says hello with status and text, set replaces both, bye ends the session with reason bye."""
    watch = rollcall_broker.watch("alice")
    alice = FakeUser(rollcall_broker, "alice").online(status="busy", text="in a meeting")
    watch.expect("alice", status="busy", text="in a meeting", sessions=1, within=1.0)
    alice.set("away")
    watch.expect("alice", status="away", text=None, within=1.0)
    alice.bye()
    watch.expect("alice", status="offline", reason="bye", sessions=0, within=1.0)


def test_a_crash_is_offline_with_reason_closed_at_once(rollcall_broker: BrokerProcess) -> None:
    """Without a grace period, a crashed fake is offline (closed) with no advance of the clock."""
    watch = rollcall_broker.watch("alice")
    alice = FakeUser(rollcall_broker, "alice").online()
    watch.expect("alice", status="online", within=1.0)
    alice.crash()
    watch.expect("alice", status="offline", reason="closed", within=1.0)
    alice.online()  # the app starts again: a new session
    watch.expect("alice", status="online", sessions=1, within=1.0)


def test_a_frozen_fake_times_out_at_its_ttl_and_no_sooner(rollcall_broker: BrokerProcess) -> None:
    """A frozen fake is online 1 ms before its TTL and offline (timeout) at it; a live fake heartbeats through."""
    watch = rollcall_broker.watch("alice", "bob")
    alice = FakeUser(rollcall_broker, "alice").online()
    FakeUser(rollcall_broker, "bob").online()
    watch.expect("alice", status="online", within=1.0)
    watch.expect("bob", status="online", within=1.0)
    alice.freeze()
    rollcall_broker.advance(2999)
    watch.expect_nothing("alice", within=0.05)
    rollcall_broker.advance(1)
    watch.expect("alice", status="offline", reason="timeout", within=1.0)
    rollcall_broker.advance(60_000)  # a minute: bob heartbeats every second of it
    watch.expect_nothing("bob", within=0.05)


def test_two_devices_make_one_record(rollcall_broker: BrokerProcess) -> None:
    """Two devices count as two sessions; the most available status wins; one crash leaves the other."""
    watch = rollcall_broker.watch("alice")
    phone = FakeUser(rollcall_broker, "alice", device="phone").online(status="busy")
    FakeUser(rollcall_broker, "alice", device="laptop").online(status="away")
    watch.expect("alice", status="busy", sessions=2, within=1.0)
    phone.crash()
    watch.expect("alice", status="away", sessions=1, within=1.0)


def test_reconnecting_within_the_grace_period_publishes_nothing(rollcall_broker_factory: Factory) -> None:
    """A crashed fake that reconnects before the grace runs out keeps its session, and no record goes out."""
    broker = rollcall_broker_factory("--offline-grace-ms", "1000")
    watch = broker.watch("alice")
    alice = FakeUser(broker, "alice").online()
    watch.expect("alice", status="online", within=1.0)
    alice.crash()
    broker.advance(999)
    alice.reconnect()
    broker.advance(5000)  # past the grace and the TTL: the reconnected fake heartbeats again
    watch.expect_nothing("alice", within=0.1)


def test_reconnecting_after_the_grace_period_is_too_late(rollcall_broker_factory: Factory) -> None:
    """When the grace runs out the session ends (closed), and reconnecting gets unknown_session."""
    broker = rollcall_broker_factory("--offline-grace-ms", "1000")
    watch = broker.watch("alice")
    alice = FakeUser(broker, "alice").online()
    watch.expect("alice", status="online", within=1.0)
    alice.crash()
    broker.advance(999)
    watch.expect_nothing("alice", within=0.05)
    broker.advance(1)
    watch.expect("alice", status="offline", reason="closed", within=1.0)
    with pytest.raises(BrokerError) as refused:
        alice.reconnect()
    assert refused.value.code == "unknown_session"


def test_steps_need_a_session(rollcall_broker: BrokerProcess) -> None:
    """Driving a fake that has no session is a mistake the fake names."""
    alice = FakeUser(rollcall_broker, "alice")
    with pytest.raises(RuntimeError, match="online"):
        alice.set("busy")
    with pytest.raises(RuntimeError, match="crash"):
        alice.reconnect()
