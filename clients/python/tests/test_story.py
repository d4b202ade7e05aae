"""The README's story, as a test: two devices, a crash, a freeze, a header, and a blip the grace period hides."""

from __future__ import annotations

from typing import List

import pytest

from rollcall import BrokerProcess, FakeUser

GRACE_MS = 1000


@pytest.fixture
def rollcall_broker_args() -> List[str]:
    return ["--offline-grace-ms", str(GRACE_MS)]


def test_alice_on_two_devices(rollcall_broker: BrokerProcess) -> None:
    """Alice stays online through one device's crash, goes offline by timeout when the other freezes, and a
    reconnection within the grace period publishes nothing."""
    broker = rollcall_broker
    watch = broker.watch("alice")
    laptop = FakeUser(broker, "alice", device="laptop").online(status="busy", text="in a meeting")
    phone = FakeUser(broker, "alice", device="phone").online()
    FakeUser(broker, "bob").online()
    FakeUser(broker, "carol").online(status="away")
    watch.expect("alice", status="online", sessions=2, within=1.0)
    team = broker.watch_group("team", members=["alice", "bob", "carol", "dave", "erin"])
    team.expect(online=3, total=5, within=1.0)

    # The laptop dies (kill -9): its connection closes; once the grace period is over its session ends,
    # and the phone keeps alice online.
    laptop.crash()
    broker.advance(GRACE_MS)
    watch.expect("alice", status="online", sessions=1, within=1.0)

    # The phone hangs: no heartbeats, no close. One TTL later (3 s of broker time, in a millisecond) alice is
    # offline by timeout. Bob and carol heartbeat all along, so the header says 2 of 5.
    phone.freeze()
    broker.advance(3000)
    watch.expect("alice", status="offline", reason="timeout", within=1.0)
    team.expect(online=2, total=5, within=1.0)

    # Alice is back on her laptop; its connection drops and comes back within the grace period: nothing at all
    # is published, for alice or for the team.
    laptop.online()
    watch.expect("alice", status="online", sessions=1, within=1.0)
    team.expect(online=3, total=5, within=1.0)
    laptop.crash()
    broker.advance(GRACE_MS // 2)
    laptop.reconnect()
    broker.advance(GRACE_MS)
    watch.expect_nothing("alice", within=0.1)
    team.expect_nothing(within=0.1)
