"""The one exception the broker's refusals become."""

from __future__ import annotations


class BrokerError(Exception):
    """The broker answered a request with ``{"ok": false}``.

    ``code`` is the protocol's stable error code (``bad_request``, ``unknown_session``, ``limit``, ...), so tests
    can assert on it; ``message`` is the broker's text for people, which may change and must not be parsed.
    """

    def __init__(self, op: str, code: str, message: str) -> None:
        super().__init__(f"{op}: {code}: {message}")
        self.op = op
        self.code = code
        self.message = message
