"""One connection to the command endpoint: a DEALER that sends a request and waits for its reply."""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
from typing import Any, Dict, Optional

import zmq
from zmq.utils.monitor import recv_monitor_message

from .curve import Curve
from .errors import BrokerError

Reply = Dict[str, Any]


class Connection:
    """A DEALER connected to the broker's command endpoint (protocol §3).

    A connection is what the broker watches for liveness: closing it ends the sessions whose latest request came
    on it (§10.4). So each `Session` owns one, and closing one without ``bye`` is how a crash looks to the broker.

    Requests are lock-step and thread-safe: a session's heartbeat thread and the test's thread may share one.
    Each request carries an ``id``; a reply with another ``id`` (a late answer to a request that timed out) is
    dropped. After a timeout the socket is kept, unlike the protocol's advice to recreate it (§3.3): recreating
    would close the connection and end sessions, which a test must decide, not the library.
    """

    def __init__(self, endpoint: str, *, timeout: float = 5.0, curve: Optional[Curve] = None) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        # No queueing for a connection that is not up: a send then waits (at most the timeout) instead of
        # delivering a stale request later (§3.3).
        socket.setsockopt(zmq.IMMEDIATE, 1)
        socket.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
        if curve is not None:
            curve.apply(socket)
        socket.connect(endpoint)
        self._socket: Optional[zmq.Socket[bytes]] = socket

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._socket is None

    def request(self, op: str, *, timeout: Optional[float] = None, **fields: Any) -> Reply:
        """Sends ``{"op": op, ...fields}`` and returns the reply; fields that are None are left out.

        Raises `BrokerError` when the broker refuses the request, and `TimeoutError` when no reply comes within
        ``timeout`` seconds (the connection's default if None).
        """
        limit = self.timeout if timeout is None else timeout
        body = {"op": op, **{key: value for key, value in fields.items() if value is not None}}
        with self._lock:
            socket = self._socket
            if socket is None:
                raise RuntimeError(f"{op}: the connection to {self.endpoint} is closed")
            request_id = next(self._ids)
            body["id"] = request_id
            deadline = time.monotonic() + limit
            try:
                socket.send(json.dumps(body).encode())
            except zmq.Again:
                raise TimeoutError(f"{op}: no connection to {self.endpoint} within {limit} s") from None
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not socket.poll(max(1, math.ceil(remaining * 1000))):
                    raise TimeoutError(f"{op}: no reply from {self.endpoint} within {limit} s")
                reply: Reply = json.loads(socket.recv_multipart()[-1])
                if reply.get("id") == request_id:
                    break
        if not reply.get("ok"):
            error = reply.get("error") or {}
            raise BrokerError(op, str(error.get("code")), str(error.get("message")))
        return reply

    def close(self) -> None:
        """Closes the socket at once (linger 0): the broker sees the connection close, as after ``kill -9``.

        Returns once libzmq has closed the TCP connection too (its monitor has stopped), not just queued the
        close: a test that goes on to `Broker.settle` relies on the close being on its way to the broker first.
        """
        with self._lock:
            socket, self._socket = self._socket, None
            if socket is None:
                return
            monitor = socket.get_monitor_socket(zmq.EVENT_MONITOR_STOPPED)
            socket.close(linger=0)
            try:
                deadline = time.monotonic() + self.timeout
                while (remaining := deadline - time.monotonic()) > 0 and monitor.poll(math.ceil(remaining * 1000)):
                    if recv_monitor_message(monitor)["event"] == zmq.EVENT_MONITOR_STOPPED:
                        break
            finally:
                monitor.close(linger=0)
