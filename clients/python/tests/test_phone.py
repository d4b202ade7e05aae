"""The fake phone over the WebSocket: background and foreground without a flicker, a killed app, a silent network."""

from __future__ import annotations

from typing import Callable

import pytest

from rollcall import BrokerProcess

pytest.importorskip("websockets")

from rollcall.phone import FakePhone  # noqa: E402  (only with the extra installed)


def test_a_quick_background_switch_shows_nothing(rollcall_broker_factory: Callable[..., BrokerProcess]) -> None:
    """Background (offline held 5 s) and back after 2 s on the test clock: watchers see no record at all, and the
    record keeps its seq."""
    broker = rollcall_broker_factory("--ws-endpoint", "127.0.0.1:0")
    assert broker.ws is not None
    with broker.watch("alice") as watch, FakePhone(broker.ws, "alice") as phone:
        phone.online()
        online = watch.expect("alice", status="online")
        assert phone.background(after_ms=5_000) is True
        broker.advance(2_000)
        phone.foreground()
        broker.advance(10_000)
        watch.expect_nothing("alice")
        assert broker.query("alice")["alice"]["seq"] == online["seq"]


def test_staying_in_the_background_goes_offline_on_time(
    rollcall_broker_factory: Callable[..., BrokerProcess],
) -> None:
    """Background with offline held 5 s: nothing at 4.999 s, offline (one session still open) at 5 s."""
    broker = rollcall_broker_factory("--ws-endpoint", "127.0.0.1:0")
    assert broker.ws is not None
    with broker.watch("alice") as watch, FakePhone(broker.ws, "alice") as phone:
        phone.online()
        watch.expect("alice", status="online")
        phone.background(after_ms=5_000)
        broker.advance(4_999)
        watch.expect_nothing("alice")
        broker.advance(1)
        watch.expect("alice", status="offline", sessions=1)


def test_a_killed_app_is_offline_at_once(rollcall_broker_factory: Callable[..., BrokerProcess]) -> None:
    """The phone's process killed: the kernel closes the connection, and the user is offline with reason closed."""
    broker = rollcall_broker_factory("--ws-endpoint", "127.0.0.1:0")
    assert broker.ws is not None
    with broker.watch("alice") as watch, FakePhone(broker.ws, "alice") as phone:
        phone.online()
        watch.expect("alice", status="online")
        phone.crash()
        watch.expect("alice", status="offline", reason="closed", within=5.0)


def test_a_silent_phone_is_cut_by_the_pings(rollcall_broker_factory: Callable[..., BrokerProcess]) -> None:
    """The phone's network goes silent without a FIN: the broker's pings (every 10 s, on the test clock) go
    unanswered, and two pings later the connection is cut and the user is offline (reason closed); an idle phone
    that answers them stays online however far the clock moves."""
    broker = rollcall_broker_factory("--ws-endpoint", "127.0.0.1:0", "--ws-ping-ms", "10000")
    assert broker.ws is not None
    with broker.watch("alice") as watch, FakePhone(broker.ws, "alice") as phone:
        phone.online()
        watch.expect("alice", status="online")
        for _ in range(3):
            broker.advance(10_000)  # idle but answering pings: still online
        watch.expect_nothing("alice")
        phone.go_silent()
        broker.advance(10_000)  # a ping nobody answers
        broker.advance(10_000)  # the next one finds nothing since: cut
        watch.expect("alice", status="offline", reason="closed", within=5.0)
        phone.online()  # the network is back: a new connection, a new session
        watch.expect("alice", status="online")
