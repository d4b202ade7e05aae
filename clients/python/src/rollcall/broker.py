"""A broker's endpoints, and everything a test asks of it."""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Sequence, Union

from .connection import Connection, Reply
from .curve import Curve
from .expect import GroupWatch, Record, Watch
from .session import Session


class Broker:
    """A running broker, named by its command endpoint (ROUTER) and update endpoint (XPUB).

    Requests that name no session (`ping`, `query`, `group`, `ungroup`, `advance`) share one connection, opened
    on first use. Sessions get connections of their own (see `Session`). The broker object keeps every session
    opened against it, so that a frozen fake's connection stays open even when the test holds no reference to it,
    and so that `advance` can heartbeat the sessions that keep themselves alive.
    """

    def __init__(
        self,
        command: str,
        update: str,
        *,
        timeout: float = 5.0,
        test_mode: Optional[bool] = None,
        curve: Optional[Curve] = None,
    ) -> None:
        self.command = command
        self.update = update
        self.curve = curve
        """The CURVE credentials every connection to this broker uses; None for a broker without CURVE."""
        self.timeout = timeout
        self._test_mode = test_mode
        self._lock = threading.Lock()
        self._connection: Optional[Connection] = None
        self._sessions: List[Session] = []
        self._watches: List[Union[Watch, GroupWatch]] = []

    @property
    def test_mode(self) -> bool:
        """Whether the broker runs with ``--test-mode`` (its clock moves only through `advance`); asked once."""
        if self._test_mode is None:
            self._test_mode = bool(self.ping().get("test_mode", False))
        return self._test_mode

    def request(self, op: str, **fields: Any) -> Reply:
        """Sends any request on the shared connection and returns the reply (raises `BrokerError` on refusal)."""
        with self._lock:
            if self._connection is None:
                self._connection = Connection(self.command, timeout=self.timeout, curve=self.curve)
            connection = self._connection
        return connection.request(op, **fields)

    def ping(self) -> Reply:
        """``ping``: the broker's id, version, epoch and clock (and ``test_mode`` in test mode)."""
        return self.request("ping")

    def query(self, *users: str) -> Dict[str, Record]:
        """``query``: each user's current record, by user id."""
        presence: Dict[str, Record] = self.request("query", users=list(users))["presence"]
        return presence

    def group(
        self,
        group: str,
        *,
        members: Optional[Sequence[str]] = None,
        add: Optional[Sequence[str]] = None,
        remove: Optional[Sequence[str]] = None,
    ) -> Reply:
        """``group``: defines (``members``), edits (``add``/``remove``) or, with neither, reads a group.

        Returns the reply: ``online``, ``total``, ``counts``, ``members`` (each member's record) and ``seq``.
        """
        return self.request(
            "group",
            group=group,
            members=None if members is None else list(members),
            add=None if add is None else list(add),
            remove=None if remove is None else list(remove),
        )

    def ungroup(self, group: str) -> bool:
        """``ungroup``: deletes a group; answers whether it existed."""
        return bool(self.request("ungroup", group=group)["deleted"])

    def advance(self, ms: int) -> int:
        """Moves a test-mode broker's clock ``ms`` forward and returns its new time (``advance``).

        The broker fires every deadline on the way (TTLs, grace periods, group windows) and publishes what they
        cause before it answers. Sessions that keep themselves alive heartbeat on the way too, as a real client
        does every ``heartbeat_ms``: the clock moves in steps of at most the shortest such interval, and each of
        those sessions heartbeats after each step. So advancing past a TTL ends only the frozen sessions.
        """
        if ms < 0:
            raise ValueError(f"advance: ms must be at least 0, not {ms}")
        remaining = ms
        while True:
            alive = self._sessions_kept_alive()
            step = min([remaining] + [session.heartbeat_ms for session in alive])
            now: int = self.request("advance", ms=step)["time"]
            remaining -= step
            for session in alive:
                if session.keeps_alive:
                    try:
                        session.heartbeat()
                    except Exception as error:  # kept on the session, as its heartbeat thread would
                        session._fail(error)
            if remaining <= 0:
                return now

    def settle(self) -> None:
        """Returns once the broker has taken note of connections that closed, such as a `FakeUser.crash`.

        A close reaches the broker as an event beside the requests, so an ``advance`` sent right after a crash can
        overtake it, and a grace period would then start after the advance instead of before it (89 of 200
        crashes in a loop). The broker reads its pending connection events before it answers the first request of
        a new connection, so a ``ping`` on a new connection is the barrier, once `Connection.close` has waited for
        libzmq to close the TCP connection (without that wait, 13 of 300 still raced beside three busy CPU loops;
        with it, 0 of 500).
        """
        connection = Connection(self.command, timeout=self.timeout, curve=self.curve)
        try:
            connection.request("ping")
        finally:
            connection.close()

    def watch(self, *users: str, timeout: Optional[float] = None) -> Watch:
        """Follows these users' records, for `Watch.expect` and `Watch.expect_nothing`."""
        watch = Watch(self, users, timeout=self.timeout if timeout is None else timeout)
        with self._lock:
            self._watches.append(watch)
        return watch

    def watch_group(
        self, group: str, *, members: Optional[Sequence[str]] = None, timeout: Optional[float] = None
    ) -> GroupWatch:
        """Follows a group's messages, defining it first with ``members`` if given, for `GroupWatch.expect`."""
        watch = GroupWatch(self, group, members=members, timeout=self.timeout if timeout is None else timeout)
        with self._lock:
            self._watches.append(watch)
        return watch

    def close(self) -> None:
        """Closes every connection this object opened: the sessions' (without ``bye``) and the watches'."""
        with self._lock:
            sessions, self._sessions = self._sessions, []
            watches, self._watches = self._watches, []
            connection, self._connection = self._connection, None
        for watch in watches:
            watch.close()
        for session in sessions:
            session.close()
        if connection is not None:
            connection.close()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(command={self.command!r}, update={self.update!r})"

    def _adopt(self, session: Session) -> None:
        """Keeps a new session (called by `Session`)."""
        with self._lock:
            self._sessions.append(session)

    def _sessions_kept_alive(self) -> List[Session]:
        with self._lock:
            return [session for session in self._sessions if session.keeps_alive]
