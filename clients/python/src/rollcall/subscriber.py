"""The update endpoint: a SUB socket and its messages."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional

import zmq

from .curve import Curve


@dataclass(frozen=True)
class Update:
    """One message from the update endpoint: its topic (``presence/alice/``, ``group/team/``, ``broker/``) and body."""

    topic: str
    body: Dict[str, Any]


def is_for(topic: str, viewer: Optional[str]) -> bool:
    """Whether a message on ``topic`` is for a subscriber whose key is bound to ``viewer`` (``None``: a reader, an
    operator or open access): ``presence/<user>/<v>/`` and ``group/<id>/<v>/`` are the copies for viewer ``v`` only;
    every other topic is for all who receive it (§8.2)."""
    family = next((f for f in ("presence/", "group/") if topic.startswith(f)), None)
    if family is None:
        return True
    parts = topic[len(family) : -1].split("/")
    return len(parts) == 1 or parts[1] == "*" or parts[1] == viewer


class Subscriber:
    """A SUB connected to the broker's update endpoint (protocol §8).

    Subscribing to one user or one group makes the broker publish its current record or aggregate at once (§8.3,
    §8.6): wait for that first message before relying on the subscription, as `Watch` does.

    ``viewer`` is the user a CURVE ``user`` key is bound to: the records of users with privacy settings come to it on
    ``presence/<user>/<viewer>/``, and copies for other viewers (which readers and operators receive too) are dropped
    here (§8.2).
    """

    def __init__(
        self, update_endpoint: str, *, curve: Optional[Curve] = None, viewer: Optional[str] = None
    ) -> None:
        self.endpoint = update_endpoint
        self.viewer = viewer
        socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
        socket.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.apply(socket)
        socket.connect(update_endpoint)
        self._socket: Optional[zmq.Socket[bytes]] = socket

    def subscribe_users(self, *users: str) -> None:
        """Follows these users (``presence/<user>/``); each brings its current record."""
        for user in users:
            self._subscribe(f"presence/{user}/")

    def subscribe_groups(self, *groups: str) -> None:
        """Follows these groups (``group/<id>/``); each brings its aggregate."""
        for group in groups:
            self._subscribe(f"group/{group}/")

    def subscribe_all(self) -> None:
        """Follows every user (``presence/``); brings no current records, so that subscribing floods no one."""
        self._subscribe("presence/")

    def subscribe_broker(self) -> None:
        """Follows the broker's heartbeat (``broker/``); brings one heartbeat at once (§8.9)."""
        self._subscribe("broker/")

    def next(self, timeout: float) -> Update:
        """The next message; raises `TimeoutError` if none comes within ``timeout`` seconds."""
        socket = self._open_socket()
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not socket.poll(max(1, math.ceil(remaining * 1000))):
                raise TimeoutError(f"no update from {self.endpoint} within {timeout} s")
            frames = socket.recv_multipart()
            # §8.1: exactly two frames; anything else is not ours to read. §8.2: another viewer's copy is not ours.
            if len(frames) == 2 and is_for(frames[0].decode(), self.viewer):
                return Update(frames[0].decode(), json.loads(frames[1]))

    def close(self) -> None:
        """Closes the socket at once."""
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _subscribe(self, topic: str) -> None:
        self._open_socket().setsockopt(zmq.SUBSCRIBE, topic.encode())

    def _open_socket(self) -> zmq.Socket[bytes]:
        if self._socket is None:
            raise RuntimeError(f"the subscriber to {self.endpoint} is closed")
        return self._socket
