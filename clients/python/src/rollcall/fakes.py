"""Fake users: one device of a user each, driven by the test, failing the ways real devices fail."""

from __future__ import annotations

from typing import Optional

from .broker import Broker
from .session import Session


class FakeUser:
    """One device of a user, as a test wants to drive it.

    ``FakeUser(broker, "alice", device="phone")`` opens nothing yet; `online` says hello. Several fakes with the
    same user are several devices. While online the fake heartbeats by itself (see `Session`) until it says
    `bye`, `crash`es or `freeze`s. After any of those, `online` opens a new session, as a restarted app would.
    """

    def __init__(
        self, broker: Broker, user: str, *, device: Optional[str] = None, ttl_ms: Optional[int] = None
    ) -> None:
        self.broker = broker
        self.user = user
        self.device = device
        self.ttl_ms = ttl_ms
        self.session: Optional[Session] = None
        self._crashed: Optional[Session] = None

    def online(self, status: str = "online", text: Optional[str] = None) -> FakeUser:
        """Says hello with this status and text, or, with a live session, sets them."""
        if self.session is None:
            self._crashed = None
            self.session = Session(
                self.broker, self.user, device=self.device, status=status, text=text, ttl_ms=self.ttl_ms
            )
        else:
            self.session.set_status(status, text)
        return self

    def set(self, status: str, text: Optional[str] = None) -> FakeUser:
        """Sets the session's status and text (``status``; no text clears it)."""
        self._live_session("set").set_status(status, text)
        return self

    def bye(self) -> None:
        """Says ``bye`` and closes the connection."""
        session = self._live_session("bye")
        self.session = None
        session.bye()

    def crash(self) -> None:
        """The app dies, as with ``kill -9``: its connection closes without ``bye``.

        Returns once the broker has taken note of the close (`Broker.settle`), so that a grace period starts now
        and not after the test's next ``advance``.
        """
        session = self._live_session("crash")
        self.session = None
        session.close()
        self._crashed = session
        self.broker.settle()

    def freeze(self) -> None:
        """The app hangs, as with ``kill -STOP``: heartbeats stop, the connection stays open (a silent death)."""
        self._live_session("freeze").stop_heartbeats()
        self.session = None

    def reconnect(self) -> FakeUser:
        """After `crash`, the app comes back with its old session over a new connection (§6.2).

        Within the broker's ``--offline-grace-ms`` of the crash the session lives on and nothing is published;
        later this raises `BrokerError` with ``unknown_session``.
        """
        session, self._crashed = self._crashed, None
        if session is None:
            raise RuntimeError(f"{self}: reconnect needs a crash first")
        session.reconnect()
        self.session = session
        return self

    def _live_session(self, what: str) -> Session:
        if self.session is None:
            raise RuntimeError(f"{self}: {what} needs a session; call online() first")
        return self.session

    def __repr__(self) -> str:
        device = "" if self.device is None else f", device={self.device!r}"
        return f"FakeUser({self.user!r}{device})"
