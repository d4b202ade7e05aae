"""A broker with CURVE: the package's sockets use the keys given to `Broker`, and the broker's rules hold."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Dict, Tuple

import pytest
import zmq

from rollcall import Broker, BrokerError, BrokerProcess, Curve, Session

Factory = Callable[..., BrokerProcess]


def certificate(path: Path, public: bytes, secret: bytes) -> None:
    """A certificate in czmq's format, as `rollcall keygen` writes it (0600)."""
    path.write_text(f'curve\n    public-key = "{public.decode()}"\n    secret-key = "{secret.decode()}"\n')
    os.chmod(path, 0o600)


@pytest.fixture
def curve_broker(rollcall_broker_factory: Factory, tmp_path: Path) -> Tuple[BrokerProcess, Dict[str, Curve]]:
    """A test-mode broker with CURVE, and the credentials of alice (a user key), an operator and a stranger."""
    server_public, server_secret = zmq.curve_keypair()
    certificate(tmp_path / "broker.key", server_public, server_secret)
    keys = {name: zmq.curve_keypair() for name in ("alice", "op", "stranger")}
    (tmp_path / "authorized_keys").write_text(
        f"{keys['alice'][0].decode()}  user alice\n{keys['op'][0].decode()}  operator\n"
    )
    for name, (public, secret) in keys.items():
        certificate(tmp_path / f"{name}.key", public, secret)
    broker = rollcall_broker_factory(
        "--curve-secret-key-file", str(tmp_path / "broker.key"), "--authorized-keys", str(tmp_path / "authorized_keys")
    )
    credentials = {
        name: Curve.from_key_file(server_public.decode(), str(tmp_path / f"{name}.key")) for name in keys
    }
    return broker, credentials


def test_a_user_key_acts_as_its_user_only(curve_broker: Tuple[BrokerProcess, Dict[str, Curve]]) -> None:
    """alice's key opens alice's session, seen by the operator's watch; a hello as bob is forbidden."""
    process, keys = curve_broker
    alice = Broker(process.command, process.update, curve=keys["alice"], test_mode=True)
    operator = Broker(process.command, process.update, curve=keys["op"], test_mode=True)
    with operator.watch("alice") as watch:
        with Session(alice, "alice", status="busy"):
            watch.expect("alice", status="busy")
        with pytest.raises(BrokerError) as refused:
            Session(alice, "bob")
        assert refused.value.code == "forbidden"
        assert "alice" in refused.value.message
    alice.close()
    operator.close()


def test_an_unknown_key_gets_no_answer(curve_broker: Tuple[BrokerProcess, Dict[str, Curve]]) -> None:
    """A key the broker does not list never completes the handshake: its requests time out."""
    process, keys = curve_broker
    stranger = Broker(process.command, process.update, curve=keys["stranger"], timeout=0.5, test_mode=True)
    with pytest.raises(TimeoutError):
        stranger.ping()
    stranger.close()
