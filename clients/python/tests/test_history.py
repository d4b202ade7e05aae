"""The presence log from Python: docs/examples/catch_up.py against a real broker with a data directory."""

from __future__ import annotations

import importlib.util
import pathlib
import tempfile
from typing import Any, Dict, List

from rollcall import BrokerProcess, Session

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "docs" / "examples" / "catch_up.py"


def _catch_up() -> Any:
    spec = importlib.util.spec_from_file_location("catch_up", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.catch_up


def test_a_backend_catches_up_then_continues_and_starts_over_on_another_log() -> None:
    """The documented catch-up loop reads every transition in order, later only the new ones, and after being handed
    a cursor of another log reads the current state and continues from the broker's offset."""
    catch_up = _catch_up()
    with tempfile.TemporaryDirectory() as directory:
        broker = BrokerProcess(args=["--data-dir", directory])
        try:
            written: List[Dict[str, Any]] = []
            alice = Session(broker, "alice")
            alice.set_status("away")
            Session(broker, "bob")
            cursor, epoch = catch_up(broker, 0, None, ["alice", "bob"], written.append)
            assert [(r["user"], r["status"]) for r in written] == [
                ("alice", "online"), ("alice", "away"), ("bob", "online")]
            assert cursor == broker.ping()["offset"] and epoch == broker.ping()["log_epoch"]

            written.clear()
            alice.bye()
            cursor, epoch = catch_up(broker, cursor, epoch, ["alice", "bob"], written.append)
            assert [(r["user"], r["status"]) for r in written] == [("alice", "offline")]

            written.clear()
            again = catch_up(broker, cursor, "0000000000000000", ["alice", "bob"], written.append)
            assert sorted((r["user"], r["status"]) for r in written) == [("alice", "offline"), ("bob", "online")]
            assert again == (cursor, epoch)
        finally:
            assert broker.stop() == 0
