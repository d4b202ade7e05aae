"""The process behind a `FakePhone`: one WebSocket connection, driven by JSON requests on stdin, one answer line on
stdout each (``{"reply": ...}`` or ``{"error": [code, message]}``). Not for use on its own."""

from __future__ import annotations

import json
import sys

from .errors import BrokerError
from .websocket import WebSocketConnection


def main() -> None:
    url, token, timeout = sys.argv[1], sys.argv[2] or None, float(sys.argv[3])
    connection = WebSocketConnection(url, token=token, timeout=timeout)
    for line in sys.stdin:
        fields = json.loads(line)
        op = fields.pop("op")
        try:
            answer = {"reply": connection.request(op, **fields)}
        except BrokerError as error:
            answer = {"error": [error.code, error.message]}
        print(json.dumps(answer), flush=True)
    connection.close()


if __name__ == "__main__":
    main()
