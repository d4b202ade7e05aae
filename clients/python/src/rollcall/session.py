"""A user's session on one device: hello, heartbeats, status, bye."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Optional

import zmq

from .connection import Connection
from .errors import BrokerError

if TYPE_CHECKING:
    from .broker import Broker


class Session:
    """A session opened with ``hello`` on a connection of its own (protocol §6.1).

    Each session has its own connection because the broker ties a session to the connection its latest request
    came on (§10.4): closing one device's connection must not end another device's session.

    With ``heartbeat=True`` the session keeps itself alive at the granted ``heartbeat_ms``: on a background thread
    against a normal broker, and through `Broker.advance` against a broker in test mode, whose clock moves only
    when told to, so that wall-clock heartbeats would mean nothing there. A heartbeat that fails (the session
    ended, the broker went away) stops the heartbeats and is kept in `heartbeat_error`; the session does not say
    ``hello`` again by itself, so that a test sees exactly what happened.
    """

    def __init__(
        self,
        broker: Broker,
        user: str,
        *,
        device: Optional[str] = None,
        status: Optional[str] = None,
        text: Optional[str] = None,
        ttl_ms: Optional[int] = None,
        heartbeat: bool = True,
    ) -> None:
        self.broker = broker
        self.user = user
        self.device = device
        self.connection = Connection(broker.command, timeout=broker.timeout, curve=broker.curve)
        try:
            reply = self.connection.request("hello", user=user, device=device, status=status, text=text, ttl_ms=ttl_ms)
        except BaseException:
            self.connection.close()
            raise
        self.token: str = reply["session"]
        self.heartbeat_ms: int = reply["heartbeat_ms"]
        self.ttl_ms: int = reply["ttl_ms"]
        self.heartbeat_error: Optional[Exception] = None
        self.heartbeats = 0
        self.keeps_alive = False
        self._heartbeat = heartbeat
        self._stopped = threading.Event()
        self._thread: Optional[threading.Thread] = None
        broker._adopt(self)
        if heartbeat:
            self._keep_alive()

    def heartbeat(self) -> None:
        """Sends one ``heartbeat``: renews the session for a full TTL, on this session's connection."""
        self.connection.request("heartbeat", session=self.token)
        self.heartbeats += 1  # counted once answered, so a test can wait for the thread's next one

    def set_status(self, status: str, text: Optional[str] = None) -> None:
        """Replaces the session's status and text (``status``; leaving out ``text`` clears it, §6.3)."""
        self.connection.request("status", session=self.token, status=status, text=text)

    def bye(self) -> None:
        """Ends the session with ``bye`` and closes its connection; raises `BrokerError` if it had already ended."""
        self.stop_heartbeats()
        try:
            self.connection.request("bye", session=self.token)
        finally:
            self.connection.close()

    def stop_heartbeats(self) -> None:
        """Stops heartbeating and keeps the connection open: the broker sees silence, as from a frozen process."""
        self.keeps_alive = False
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            # At most one heartbeat is in flight, and it gives up within the connection's timeout.
            thread.join(self.connection.timeout + 1.0)

    def close(self) -> None:
        """Closes the connection without ``bye`` (linger 0): the broker sees it close, as after ``kill -9``."""
        self.stop_heartbeats()
        self.connection.close()

    def reconnect(self) -> None:
        """Replaces the connection with a new one and renews the session over it (§6.2).

        This is a client whose connection dropped coming back: within the broker's ``--offline-grace-ms`` the
        session lives on and nothing is published; later, this raises `BrokerError` with ``unknown_session``.
        """
        self.stop_heartbeats()
        self.connection.close()
        self.connection = Connection(self.broker.command, timeout=self.broker.timeout, curve=self.broker.curve)
        self.heartbeat()
        if self._heartbeat:
            self._keep_alive()

    def _keep_alive(self) -> None:
        """Starts heartbeating: a thread against a normal broker, `Broker.advance` against one in test mode."""
        self.heartbeat_error = None
        self.keeps_alive = True
        self._stopped = threading.Event()
        if not self.broker.test_mode:
            self._thread = threading.Thread(target=self._beat, name=f"rollcall-heartbeat-{self.user}", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        """The heartbeat thread: one heartbeat per interval until stopped or until one fails."""
        stopped = self._stopped
        while not stopped.wait(self.heartbeat_ms / 1000):
            try:
                self.heartbeat()
            except (BrokerError, TimeoutError, RuntimeError, zmq.ZMQError) as error:
                self._fail(error)
                return

    def _fail(self, error: Exception) -> None:
        """Keeps the error of a failed heartbeat and stops heartbeating."""
        self.heartbeat_error = error
        self.keeps_alive = False
        self._stopped.set()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Says ``bye`` if the session may still be live, else just closes the connection."""
        if self.connection.closed:
            return
        try:
            self.bye()
        except BrokerError:
            pass

    def __repr__(self) -> str:
        return f"Session(user={self.user!r}, device={self.device!r}, token={self.token!r})"
