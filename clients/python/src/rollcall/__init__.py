"""RollCall for Python: a thin client for the presence broker, and what tests need around it.

- `Broker`: the endpoints (and, for a broker that runs CURVE, the `Curve` keys), plus ``ping``, ``query``, ``group``, ``advance`` (test mode) and the watches below.
- `Session`: ``hello``, heartbeats on their own, ``status``, ``bye``.
- `Subscriber`: the update endpoint's messages, one at a time.
- `FakeUser`: a device that goes online, changes status, says bye, crashes or freezes.
- `Watch` and `GroupWatch`: expectations with deadlines that say what came instead.
- `BrokerProcess`: a ``rollcall serve --test-mode`` child process; the pytest plugin's fixtures start one.
- `WebSocketConnection` (in ``rollcall.websocket``, with the optional extra ``rollcall[websocket]``): the same
  protocol over a WebSocket, as browsers and phones speak it; `FakePhone` (in ``rollcall.phone``, same extra): a phone
  app that goes to the background and back, is killed, or goes silent without a FIN.

The wire protocol is docs/protocol.md in the RollCall repository.
"""

from __future__ import annotations

from .broker import Broker
from .connection import Connection
from .curve import Curve
from .errors import BrokerError
from .expect import GroupWatch, Watch
from .fakes import FakeUser
from .process import BrokerProcess, find_binary
from .session import Session
from .subscriber import Subscriber, Update

__all__ = [
    "Broker",
    "BrokerError",
    "BrokerProcess",
    "Connection",
    "Curve",
    "FakeUser",
    "GroupWatch",
    "Session",
    "Subscriber",
    "Update",
    "Watch",
    "find_binary",
]
