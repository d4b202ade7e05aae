"""CurveZMQ credentials for a broker started with ``--curve-secret-key-file`` (docs/security.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_KEY = re.compile(r'^\s*(public-key|secret-key)\s*=\s*"(.{40})"\s*$', re.M)


@dataclass(frozen=True)
class Curve:
    """The broker's public key and this client's key pair, each 40 characters of Z85.

    Every socket the client library opens for a `Broker` made with ``curve=`` sets them before it connects. A key
    the broker does not list gets no answer at all (the handshake fails), so requests time out.
    """

    server_key: str
    public_key: str
    secret_key: str

    @classmethod
    def from_key_file(cls, server_key: str, key_file: str) -> Curve:
        """The client's pair from a certificate file (``rollcall keygen``, or czmq's format)."""
        with open(key_file, encoding="utf-8") as file:
            keys = dict(_KEY.findall(file.read()))
        if "public-key" not in keys or "secret-key" not in keys:
            raise ValueError(f"{key_file}: a certificate with public-key and secret-key is needed")
        return cls(server_key=server_key, public_key=keys["public-key"], secret_key=keys["secret-key"])

    def apply(self, socket: Any) -> None:
        """Makes ``socket`` a CURVE client of the broker; call it before ``connect``."""
        socket.curve_serverkey = self.server_key.encode()
        socket.curve_publickey = self.public_key.encode()
        socket.curve_secretkey = self.secret_key.encode()
