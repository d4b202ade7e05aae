"""Expectations on what the broker publishes: wait with a deadline, and say what came instead."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence

from .subscriber import Subscriber

if TYPE_CHECKING:
    from .broker import Broker

Record = Dict[str, Any]

RECORD_FIELDS = frozenset({"user", "status", "text", "since", "last_seen", "sessions", "seq", "reason"})
GROUP_FIELDS = frozenset({"group", "online", "total", "counts", "changed", "removed", "deleted", "seq"})


def _describe(fields: Dict[str, Any]) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in fields.items()) or "any fields"


def _matches(body: Record, fields: Dict[str, Any]) -> bool:
    # A field left out of the body reads as None, so reason=None asks for "no reason".
    return all(body.get(key) == value for key, value in fields.items())


def _check_fields(fields: Dict[str, Any], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(fields) - known)
    if unknown:
        raise TypeError(f"{what} have no field {', '.join(unknown)}; known: {', '.join(sorted(known))}")


class _Stream:
    """The messages of one topic, in order, with the seq rule applied, and a cursor for expectations.

    Entry 0 is the state when watching began (the value the broker sends on subscribe). `expect` looks at the
    entries after the cursor and moves it past the one that matched; `expect_nothing` fails on any entry after
    the cursor other than that first state, so that it also catches what arrived before it was called.
    """

    def __init__(self) -> None:
        self.entries: List[Record] = []
        self.cursor = 0
        self._seq = -1

    def add(self, body: Record) -> None:
        seq = body.get("seq", 0)
        if isinstance(seq, int) and seq <= self._seq:
            return  # a repeat, such as the last value another subscription made the broker publish
        self._seq = seq if isinstance(seq, int) else self._seq
        self.entries.append(body)

    def find(self, fields: Dict[str, Any]) -> Optional[Record]:
        for index in range(self.cursor, len(self.entries)):
            if _matches(self.entries[index], fields):
                self.cursor = index + 1
                return self.entries[index]
        return None

    def unexpected(self) -> List[Record]:
        return self.entries[max(self.cursor, 1) :]

    def history(self, render: Callable[[Record], str]) -> str:
        if not self.entries:
            return "  (nothing)"
        lines = []
        for index, body in enumerate(self.entries):
            mark = "*" if index < self.cursor else " "
            lines.append(f"  {mark} {render(body)}")
        return "\n".join(lines)


def _compact(body: Record) -> str:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def _group_line(body: Record) -> str:
    if body.get("deleted"):
        return f"deleted (seq {body.get('seq')})"
    counts = body.get("counts") or {}
    changed = ", ".join(f"{record.get('user')}:{record.get('status')}" for record in body.get("changed") or [])
    removed = ", ".join(body.get("removed") or [])
    return (
        f"{body.get('online')} of {body.get('total')} online {_compact(counts)}"
        f" changed [{changed}] removed [{removed}] (seq {body.get('seq')})"
    )


class Watch:
    """Follows some users' records on the update endpoint, for `expect` and `expect_nothing`.

    It returns once the broker has sent each user's current record, so nothing published afterwards is missed.
    Records are kept per user with the seq rule (protocol §9.4): repeats of a record already seen are dropped.
    ``viewer`` is the user the broker's CURVE key is bound to, when it is a ``user`` key (see `Subscriber`).
    """

    def __init__(
        self, broker: Broker, users: Sequence[str], *, timeout: float = 5.0, viewer: Optional[str] = None
    ) -> None:
        update_endpoint = broker.update
        self._subscriber = Subscriber(update_endpoint, curve=broker.curve, viewer=viewer)
        self._streams: Dict[str, _Stream] = {user: _Stream() for user in users}
        self._subscriber.subscribe_users(*users)
        deadline = time.monotonic() + timeout
        while any(not stream.entries for stream in self._streams.values()):
            if not self._receive(deadline):
                silent = [user for user, stream in self._streams.items() if not stream.entries]
                self.close()
                raise TimeoutError(
                    f"watch: no current record for {', '.join(silent)} from {update_endpoint} within {timeout} s"
                )

    def records(self, user: str) -> List[Record]:
        """Every record of ``user`` seen so far, oldest first (the first is the state when watching began)."""
        self._drain()
        return list(self._stream(user).entries)

    def latest(self, user: str) -> Record:
        """The newest record of ``user`` seen so far."""
        return self.records(user)[-1]

    def expect(self, user: str, *, within: float = 2.0, **fields: Any) -> Record:
        """Waits for a record of ``user`` whose fields equal ``fields`` and returns it.

        Looks at the records after the last one an earlier `expect` matched (the first call also sees the state
        when watching began), then waits at most ``within`` seconds for new ones. Fails with `AssertionError`
        listing every record seen for ``user``.
        """
        _check_fields(fields, RECORD_FIELDS, "records")
        stream = self._stream(user)
        deadline = time.monotonic() + within
        while True:
            found = stream.find(fields)
            if found is not None:
                return found
            if not self._receive(deadline):
                raise AssertionError(
                    f"expected a record of {user} with {_describe(fields)} within {within} s; none came.\n"
                    f"Records seen for {user}, oldest first (* = before the last match):\n"
                    f"{stream.history(_compact)}"
                )

    def expect_nothing(self, user: str, *, within: float = 0.2) -> None:
        """Fails if any record of ``user`` comes after the last match, now or in the next ``within`` seconds.

        Records that arrived before the call count too: this is the check that a user did not flicker.
        """
        stream = self._stream(user)
        deadline = time.monotonic() + within
        while not stream.unexpected():
            if not self._receive(deadline):
                return
        raise AssertionError(
            f"expected no new record of {user} within {within} s; got "
            f"{len(stream.unexpected())}.\nRecords seen for {user}, oldest first (* = before the last match):\n"
            f"{stream.history(_compact)}"
        )

    def close(self) -> None:
        """Stops following the users."""
        self._subscriber.close()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _stream(self, user: str) -> _Stream:
        if user not in self._streams:
            raise KeyError(f"this watch follows {', '.join(self._streams)}, not {user}")
        return self._streams[user]

    def _receive(self, deadline: float) -> bool:
        """Files one message; False once the deadline has passed without one."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        try:
            update = self._subscriber.next(remaining)
        except TimeoutError:
            return False
        user = update.body.get("user")
        if update.topic.startswith("presence/") and user in self._streams:
            self._streams[user].add(update.body)
        return True

    def _drain(self) -> None:
        """Files whatever has already arrived, without waiting."""
        while self._receive(time.monotonic() + 0.001):
            pass


class GroupWatch:
    """Follows one group's messages on the update endpoint, for `expect` and `expect_nothing`.

    It subscribes to ``group/<id>/`` and waits for the aggregate the broker sends on subscribe (§8.6); then, if
    ``members`` is given, it defines the group with them and keeps the reply in `definition`. Only messages on
    the topic count for expectations, not the reply: the reply may show news that its message publishes later
    (§8.8). Messages are kept with the group seq rule. In test mode the broker's clock moves only through
    `Broker.advance`, so with a batch window (``--group-batch-ms``; `BrokerProcess` sets none unless told) a
    message that waits for the window goes out only when the clock is advanced past it.
    """

    def __init__(
        self,
        broker: Broker,
        group: str,
        *,
        members: Optional[Sequence[str]] = None,
        timeout: float = 5.0,
        viewer: Optional[str] = None,
    ) -> None:
        update_endpoint = broker.update
        self.broker = broker
        self.group = group
        self.definition: Optional[Record] = None
        self._subscriber = Subscriber(update_endpoint, curve=broker.curve, viewer=viewer)
        self._stream = _Stream()
        self._subscriber.subscribe_groups(group)
        deadline = time.monotonic() + timeout
        while not self._stream.entries:
            if not self._receive(deadline):
                self.close()
                raise TimeoutError(f"watch_group: no aggregate of {group} from {update_endpoint} within {timeout} s")
        if members is not None:
            self.definition = broker.group(group, members=members)

    def messages(self) -> List[Record]:
        """Every message of the group seen so far, oldest first (the first is the aggregate sent on subscribe)."""
        self._drain()
        return list(self._stream.entries)

    def expect(self, *, within: float = 2.0, **fields: Any) -> Record:
        """Waits for a message of the group whose fields equal ``fields`` (``online=2, total=5``) and returns it.

        As `Watch.expect`: looks after the last match, waits at most ``within`` seconds, and fails with
        `AssertionError` listing every message seen.
        """
        _check_fields(fields, GROUP_FIELDS, "group messages")
        deadline = time.monotonic() + within
        while True:
            found = self._stream.find(fields)
            if found is not None:
                return found
            if not self._receive(deadline):
                raise AssertionError(
                    f"expected a message of group {self.group} with {_describe(fields)} within {within} s; "
                    f"none came.\nMessages seen for {self.group}, oldest first (* = before the last match):\n"
                    f"{self._stream.history(_group_line)}{self._hint()}"
                )

    def expect_nothing(self, *, within: float = 0.2) -> None:
        """Fails if any message of the group comes after the last match, now or in the next ``within`` seconds."""
        deadline = time.monotonic() + within
        while not self._stream.unexpected():
            if not self._receive(deadline):
                return
        raise AssertionError(
            f"expected no new message of group {self.group} within {within} s; got "
            f"{len(self._stream.unexpected())}.\nMessages seen for {self.group}, oldest first "
            f"(* = before the last match):\n{self._stream.history(_group_line)}"
        )

    def _hint(self) -> str:
        if not self.broker.test_mode:
            return ""
        return (
            "\n(The broker is in test mode: a group message that waits for its batch window, --group-batch-ms, "
            "goes out only when broker.advance() moves the clock past it.)"
        )

    def close(self) -> None:
        """Stops following the group."""
        self._subscriber.close()

    def __enter__(self) -> GroupWatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _receive(self, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        try:
            update = self._subscriber.next(remaining)
        except TimeoutError:
            return False
        if update.topic.startswith(f"group/{self.group}/"):  # the group topic or its form for everyone (§8.2)
            self._stream.add(update.body)
        return True

    def _drain(self) -> None:
        while self._receive(time.monotonic() + 0.001):
            pass
