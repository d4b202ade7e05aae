"""The WebSocket client (the optional extra): sessions and subscriptions over ``rollcall serve --ws-endpoint``."""

from __future__ import annotations

from typing import Callable

import pytest

from rollcall import BrokerError, BrokerProcess

pytest.importorskip("websockets")

from rollcall.websocket import WebSocketConnection  # noqa: E402  (only with the extra installed)


def test_a_session_kept_alive_by_its_websocket_ends_when_it_closes(
    rollcall_broker_factory: Callable[..., BrokerProcess],
) -> None:
    """A hello kept alive by the connection outlives many TTLs of silence, and the close ends it (reason closed);
    a WebSocket subscriber sees every record, the last value first. The factory stops the broker (exit 0 asserted)."""
    broker = rollcall_broker_factory("--ws-endpoint", "127.0.0.1:0")
    assert broker.ws is not None and broker.ws.startswith("ws://")
    with WebSocketConnection(broker.ws) as watcher:
        watcher.subscribe("presence/pia/")
        topic, last = watcher.next_update()  # type: ignore[misc]
        assert (topic, last["status"], last["seq"]) == ("presence/pia/", "offline", 0)
        phone = WebSocketConnection(broker.ws)
        phone.hello("pia", keepalive="connection", ttl_ms=1000)
        assert watcher.next_update()[1]["status"] == "online"  # type: ignore[index]
        broker.advance(60_000)  # sixty TTLs on the test clock, no request from the phone
        assert broker.query("pia")["pia"]["status"] == "online"
        with pytest.raises(BrokerError) as refused:
            phone.request("subscribe", topics=["presence/al"])
        assert refused.value.code == "bad_request"
        phone.close()
        update = watcher.next_update()
        assert update is not None and update[1]["status"] == "offline" and update[1]["reason"] == "closed"
