"""RollCall over a WebSocket (docs/websocket.md), for Python without pyzmq on the path: the optional extra
``rollcall[websocket]`` (Python's `websockets` package, 11 or later, whose synchronous client this uses)."""

from __future__ import annotations

import collections
import itertools
import json
import time
from typing import Any, Deque, Dict, Optional, Tuple

from .errors import BrokerError

Reply = Dict[str, Any]


class WebSocketConnection:
    """One WebSocket connection to ``rollcall serve --ws-endpoint``: requests and their replies, and the updates of
    the topics it subscribes to, in the order they arrive (an update can come before the reply of the request that
    caused it, such as one's own ``hello``). Closing it is a connection close for the broker: sessions kept alive by
    it (``hello(..., keepalive="connection")``) end. Not thread-safe: one thread uses it.
    """

    def __init__(self, url: str, *, token: Optional[str] = None, timeout: float = 5.0) -> None:
        from websockets.sync.client import connect  # the optional extra, imported only when used

        self.url = url
        self.timeout = timeout
        headers = {"Authorization": f"Bearer {token}"} if token else None
        # Entered as its context manager does (websockets 16 and later warn about a connection used otherwise);
        # `close` leaves it.
        self._socket = connect(url, additional_headers=headers, open_timeout=timeout).__enter__()
        self._ids = itertools.count(1)
        self._updates: Deque[Tuple[str, Dict[str, Any]]] = collections.deque()

    def request(self, op: str, *, timeout: Optional[float] = None, **fields: Any) -> Reply:
        """Sends ``{"op": op, ...fields}`` and returns the reply; fields that are None are left out. Updates that
        arrive meanwhile are kept for `next_update`. Raises `BrokerError` on a refusal, `TimeoutError` if no reply
        comes within ``timeout`` seconds."""
        request_id = next(self._ids)
        body = {"op": op, "id": request_id, **{k: v for k, v in fields.items() if v is not None}}
        self._socket.send(json.dumps(body))
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            frame = self._receive(deadline)
            if frame is None:
                raise TimeoutError(f"no reply to {op} from {self.url} in time")
            if "topic" in frame:
                self._updates.append((frame["topic"], frame["message"]))
            elif frame.get("id") == request_id:
                if not frame["ok"]:
                    raise BrokerError(op, frame["error"]["code"], frame["error"]["message"])
                return frame

    def hello(self, user: str, *, keepalive: str = "ttl", **fields: Any) -> str:
        """Opens a session for ``user`` and returns its id; ``keepalive="connection"`` keeps it alive by this
        connection alone (no heartbeats needed)."""
        return str(self.request("hello", user=user, keepalive=keepalive, **fields)["session"])

    def subscribe(self, *topics: str) -> None:
        """Follows the topics (``presence/<user>/``, ``group/<id>/``, ``broker/``); each one's last value follows."""
        self.request("subscribe", topics=list(topics))

    def next_update(self, timeout: Optional[float] = None) -> Optional[Tuple[str, Dict[str, Any]]]:
        """The next update as ``(topic, message)``, or None if none comes within ``timeout`` seconds."""
        if self._updates:
            return self._updates.popleft()
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            frame = self._receive(deadline)
            if frame is None:
                return None
            if "topic" in frame:
                return frame["topic"], frame["message"]

    def close(self) -> None:
        """Closes the connection (a WebSocket close frame)."""
        self._socket.close()

    def __enter__(self) -> WebSocketConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _receive(self, deadline: float) -> Optional[Dict[str, Any]]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            text = self._socket.recv(timeout=remaining)
        except TimeoutError:
            return None
        message: Dict[str, Any] = json.loads(text)
        return message
