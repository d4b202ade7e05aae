"""Expectations wait with a deadline, and a failure says what came instead."""

from __future__ import annotations

import time

import pytest

from rollcall import BrokerProcess, FakeUser


def test_a_failing_expectation_lists_the_records_seen(rollcall_broker: BrokerProcess) -> None:
    """expect fails after its deadline with every record of the user, oldest first."""
    watch = rollcall_broker.watch("alice")
    FakeUser(rollcall_broker, "alice").online(status="busy", text="in a meeting")
    started = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        watch.expect("alice", status="away", within=0.2)
    waited = time.monotonic() - started
    message = str(failed.value)
    print(f"failed after {waited:.3f} s:\n{message}")
    assert 0.2 <= waited < 1.5
    assert "expected a record of alice with status='away' within 0.2 s" in message
    assert '"user":"alice","status":"offline","since":null' in message  # the state when watching began
    assert '"status":"busy","text":"in a meeting"' in message


def test_expect_moves_past_what_it_matched(rollcall_broker: BrokerProcess) -> None:
    """Each expect looks only after the previous match, so an old record cannot satisfy a later expectation."""
    watch = rollcall_broker.watch("alice")
    alice = FakeUser(rollcall_broker, "alice").online(status="away")
    alice.set("online")
    watch.expect("alice", status="online", within=1.0)
    with pytest.raises(AssertionError) as failed:
        watch.expect("alice", status="away", within=0.1)
    assert "* {" in str(failed.value)  # records before the match are marked


def test_expect_nothing_catches_a_flicker(rollcall_broker: BrokerProcess) -> None:
    """A crash and a new hello between two checks is a flicker: expect_nothing fails and shows it."""
    watch = rollcall_broker.watch("alice")
    alice = FakeUser(rollcall_broker, "alice").online()
    watch.expect("alice", status="online", within=1.0)
    alice.crash()
    alice.online()
    with pytest.raises(AssertionError) as failed:
        watch.expect_nothing("alice", within=0.2)
    message = str(failed.value)
    assert "expected no new record of alice within 0.2 s" in message
    assert '"reason":"closed"' in message


def test_expect_nothing_ignores_the_state_when_watching_began(rollcall_broker: BrokerProcess) -> None:
    """The current record sent on subscribe is not news."""
    FakeUser(rollcall_broker, "alice").online()
    watch = rollcall_broker.watch("alice")
    watch.expect_nothing("alice", within=0.05)
    assert watch.latest("alice")["status"] == "online"


def test_group_expectations_and_their_failure(rollcall_broker: BrokerProcess) -> None:
    """A group watch sees the header change; a failing one lists the group's messages."""
    team = rollcall_broker.watch_group("team", members=["alice", "bob"])
    assert team.definition is not None and team.definition["total"] == 2
    team.expect(online=0, total=2, within=1.0)
    FakeUser(rollcall_broker, "alice").online()
    team.expect(online=1, total=2, within=1.0)
    with pytest.raises(AssertionError) as failed:
        team.expect(online=2, within=0.1)
    message = str(failed.value)
    assert "expected a message of group team with online=2 within 0.1 s" in message
    assert "1 of 2 online" in message and "changed [alice:online]" in message
    rollcall_broker.ungroup("team")
    team.expect(deleted=True, within=1.0)


def test_unknown_fields_and_users_are_mistakes(rollcall_broker: BrokerProcess) -> None:
    """A misspelt field or a user the watch does not follow fails at once, not after the deadline."""
    watch = rollcall_broker.watch("alice")
    with pytest.raises(TypeError, match="stauts"):
        watch.expect("alice", stauts="busy")
    with pytest.raises(KeyError):
        watch.expect("bob", status="busy")
