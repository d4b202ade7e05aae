"""The client, thin over the protocol: requests, replies, refusals, sessions, subscriptions, the clock."""

from __future__ import annotations

import time

import pytest

from rollcall import Broker, BrokerError, BrokerProcess, Session, Subscriber

UNKNOWN = {"status": "offline", "since": None, "last_seen": None, "sessions": 0, "seq": 0}


def test_ping_says_test_mode_and_the_printed_epoch(rollcall_broker: BrokerProcess) -> None:
    """ping answers the broker's identity, with test_mode and the epoch the endpoints line printed."""
    reply = rollcall_broker.ping()
    assert reply["test_mode"] is True
    assert reply["epoch"] == rollcall_broker.epoch
    assert isinstance(reply["time"], int)


def test_query_answers_the_unknown_record(rollcall_broker: BrokerProcess) -> None:
    """A user never seen is answered with the unknown record (seq 0)."""
    assert rollcall_broker.query("zoe") == {"zoe": {"user": "zoe", **UNKNOWN}}


def test_a_refusal_raises_broker_error_with_code_and_message(rollcall_broker: BrokerProcess) -> None:
    """The broker's error code and message reach the test in a typed exception."""
    with pytest.raises(BrokerError) as refused:
        rollcall_broker.query("bob smith")
    assert (refused.value.op, refused.value.code) == ("query", "bad_user")
    assert "bob smith" in refused.value.message
    with pytest.raises(BrokerError) as refused:
        Session(rollcall_broker, "alice", status="asleep")
    assert refused.value.code == "bad_request"


def test_a_session_says_hello_sets_status_and_bye(rollcall_broker: BrokerProcess) -> None:
    """hello, status and bye each publish the user's record; the ended session is then unknown."""
    with Subscriber(rollcall_broker.update) as updates:
        updates.subscribe_users("alice")
        assert updates.next(2.0).body == {"user": "alice", **UNKNOWN}
        session = Session(rollcall_broker, "alice", device="laptop", text="hi")
        assert (session.ttl_ms, session.heartbeat_ms) == (3000, 1000)
        online = updates.next(2.0)
        assert online.topic == "presence/alice/"
        assert (online.body["status"], online.body["text"], online.body["sessions"]) == ("online", "hi", 1)
        session.set_status("away", "lunch")
        assert (updates.next(2.0).body["status"], session.heartbeat_error) == ("away", None)
        session.bye()
        gone = updates.next(2.0).body
        assert (gone["status"], gone["reason"], gone["sessions"]) == ("offline", "bye", 0)
    with pytest.raises(BrokerError) as refused:
        rollcall_broker.request("heartbeat", session=session.token)
    assert refused.value.code == "unknown_session"


def test_next_gives_up_at_its_deadline(rollcall_broker: BrokerProcess) -> None:
    """next(timeout) raises TimeoutError once the timeout has passed with nothing to read."""
    with Subscriber(rollcall_broker.update) as updates:
        updates.subscribe_users("nobody")
        updates.next(2.0)  # the current record: the subscription is live
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            updates.next(0.2)
        waited = time.monotonic() - started
    print(f"next(0.2) gave up after {waited:.3f} s")
    assert 0.2 <= waited < 1.5


def test_subscriber_follows_everyone_groups_and_the_broker(rollcall_broker: BrokerProcess) -> None:
    """presence/ brings every user's records, group/<id>/ the aggregate, broker/ a heartbeat at once."""
    with Subscriber(rollcall_broker.update) as updates:
        updates.subscribe_broker()
        updates.subscribe_groups("crew")
        topics = {updates.next(2.0).topic, updates.next(2.0).topic}
        assert topics == {"broker/", "group/crew/"}
        updates.subscribe_all()
        # presence/ brings no last value; the aggregate of a group subscribed after it shows that it arrived,
        # since one SUB's subscriptions reach the broker in order.
        updates.subscribe_groups("crew2")
        assert updates.next(2.0).topic == "group/crew2/"
        Session(rollcall_broker, "bob")
        record = updates.next(2.0)
        assert (record.topic, record.body["user"], record.body["status"]) == ("presence/bob/", "bob", "online")


def test_group_defines_edits_reads_and_deletes(rollcall_broker: BrokerProcess) -> None:
    """group with members defines, with add/remove edits, with neither reads; ungroup says if it existed."""
    Session(rollcall_broker, "a")
    defined = rollcall_broker.group("team", members=["a", "b"])
    assert (defined["online"], defined["total"], sorted(defined["members"])) == (1, 2, ["a", "b"])
    edited = rollcall_broker.group("team", add=["c"], remove=["a"])
    assert (edited["online"], edited["total"], sorted(edited["members"])) == (0, 2, ["b", "c"])
    assert sorted(rollcall_broker.group("team")["members"]) == ["b", "c"]
    assert rollcall_broker.ungroup("team") is True
    assert rollcall_broker.ungroup("team") is False


def test_advance_moves_the_broker_clock(rollcall_broker: BrokerProcess) -> None:
    """advance moves the clock by exactly ms and answers the new time; a bad ms is refused."""
    before = rollcall_broker.ping()["time"]
    assert rollcall_broker.advance(2500) == before + 2500
    assert rollcall_broker.ping()["time"] == before + 2500
    with pytest.raises(ValueError):
        rollcall_broker.advance(-1)
    with pytest.raises(BrokerError) as refused:
        rollcall_broker.request("advance", ms=-1)
    assert refused.value.code == "bad_request"


def test_the_heartbeat_thread_keeps_a_session_alive(rollcall_broker: BrokerProcess) -> None:
    """Against a broker taken for a normal one, a session heartbeats on its own thread at the granted interval."""
    plain = Broker(rollcall_broker.command, rollcall_broker.update, test_mode=False)
    watch = rollcall_broker.watch("hb")
    session = Session(plain, "hb", ttl_ms=1000)  # the shortest TTL: heartbeats every 333 ms
    watch.expect("hb", status="online", within=1.0)
    rollcall_broker.advance(900)  # this object knows no session, so nothing heartbeats for it
    # Two more heartbeats: the second was sent after the advance had been answered, so it renewed at +900.
    counted = session.heartbeats
    deadline = time.monotonic() + 5.0
    while session.heartbeats < counted + 2:
        assert time.monotonic() < deadline, f"the thread sent {session.heartbeats - counted} heartbeats in 5 s"
        time.sleep(0.01)
    rollcall_broker.advance(900)  # 1800 ms after hello: alive only thanks to the thread
    watch.expect_nothing("hb", within=0.1)
    session.stop_heartbeats()
    rollcall_broker.advance(1000)
    watch.expect("hb", status="offline", reason="timeout", within=1.0)
    plain.close()


def test_a_viewers_copy_is_for_that_viewer_only() -> None:
    from rollcall.subscriber import is_for

    for topic in ["presence/alice/", "presence/alice/*/", "group/team/", "group/team/*/", "broker/"]:
        assert is_for(topic, None) and is_for(topic, "bob"), topic
    for topic in ["presence/alice/bob/", "group/team/bob/"]:
        assert is_for(topic, "bob") and not is_for(topic, "zoe") and not is_for(topic, None), topic
