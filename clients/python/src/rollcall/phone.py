"""A fake phone over the WebSocket (docs/websocket.md), for tests of an app's mobile side: it goes online with a
session kept alive by its connection, goes to the background and comes back (a held status, ``after_ms``), and
fails the ways phones fail: killed (the connection closes) or silent (the network is gone without a FIN, so pings go
unanswered). Needs the optional extra ``rollcall[websocket]``.

The phone's WebSocket lives in a child process, so that "silent" is real: the process is stopped (SIGSTOP) with its
connection open, and neither the OS nor the WebSocket library answers the broker's pings any more, exactly as when a
phone loses its radio. Killing it (SIGKILL) closes the connection as the kernel does for a killed app.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any, Dict, Optional

from .errors import BrokerError


class FakePhone:
    """One phone of a user, over ``rollcall serve --ws-endpoint``.

    ``FakePhone(broker.ws, "alice", token=...)`` connects nothing yet; `online` connects and says hello with
    ``keepalive="connection"`` (an idle phone sends nothing; the broker's pings keep it online). After `crash`,
    `go_silent` or `bye`, `online` connects anew, as a relaunched app would.
    """

    def __init__(
        self, url: str, user: str, *, token: Optional[str] = None, device: str = "phone", timeout: float = 5.0
    ) -> None:
        self.url = url
        self.user = user
        self.token = token
        self.device = device
        self.timeout = timeout
        self.session: Optional[str] = None
        self._child: Optional[subprocess.Popen[str]] = None
        self._silent: Optional[subprocess.Popen[str]] = None

    def online(self, status: str = "online", text: Optional[str] = None) -> FakePhone:
        """Connects and says hello (or, with a live session, sets the status and text)."""
        if self.session is not None:
            return self.set(status, text)
        self._child = subprocess.Popen(
            [sys.executable, "-m", "rollcall._phone_child", self.url, self.token or "", str(self.timeout)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": _child_path()},
        )
        reply = self._request(
            "hello", user=self.user, device=self.device, status=status, text=text, keepalive="connection"
        )
        self.session = str(reply["session"])
        return self

    def set(self, status: str, text: Optional[str] = None) -> FakePhone:
        """``status`` at once: a held change is replaced (or cancelled, when this is what the session has)."""
        self._request("status", session=self._live("set"), status=status, text=text)
        return self

    def background(self, *, status: str = "offline", after_ms: int = 5_000) -> bool:
        """The app goes to the background: ``status`` held for ``after_ms`` (the broker publishes it then unless
        `foreground` comes first). Returns whether the broker holds a change."""
        reply = self._request("status", session=self._live("background"), status=status, after_ms=after_ms)
        return bool(reply.get("held", False))

    def foreground(self, status: str = "online", text: Optional[str] = None) -> FakePhone:
        """The app is back: the status it shows; a held background status still waiting is cancelled."""
        return self.set(status, text)

    def bye(self) -> None:
        """Says ``bye`` and closes the connection."""
        self._request("bye", session=self._live("bye"))
        self._end(signal.SIGTERM)

    def crash(self) -> None:
        """The app is killed: the kernel closes its connection (a FIN), with no ``bye``."""
        self._live("crash")
        self._end(signal.SIGKILL)

    def go_silent(self) -> None:
        """The phone loses its network without a FIN: the connection stays open and nothing answers the broker's
        pings, so the broker cuts it after ``--ws-ping-ms`` (twice at most) and the session ends (reason
        ``closed``, after the grace period if any). The process is killed when the phone goes online again or
        is closed."""
        self._live("go_silent")
        assert self._child is not None
        self._child.send_signal(signal.SIGSTOP)
        self._silent, self._child, self.session = self._child, None, None

    def close(self) -> None:
        """Ends the phone's process, whatever it was doing."""
        if self._child is not None:
            self._end(signal.SIGKILL)
        if self._silent is not None:
            self._silent.kill()
            self._silent.wait()
            self._silent = None

    def __enter__(self) -> FakePhone:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _live(self, what: str) -> str:
        if self.session is None or self._child is None:
            raise RuntimeError(f"{what}: the phone of {self.user} is not online")
        return self.session

    def _request(self, op: str, **fields: Any) -> Dict[str, Any]:
        child = self._child
        assert child is not None and child.stdin is not None and child.stdout is not None
        child.stdin.write(json.dumps({"op": op, **{k: v for k, v in fields.items() if v is not None}}) + "\n")
        child.stdin.flush()
        line = child.stdout.readline()
        if not line:
            raise RuntimeError(f"the phone of {self.user} ended: {child.wait()}")
        answer: Dict[str, Any] = json.loads(line)
        if "error" in answer:
            code, message = answer["error"]
            raise BrokerError(op, code, message)
        reply: Dict[str, Any] = answer["reply"]
        return reply

    def _end(self, how: signal.Signals) -> None:
        child, self._child, self.session = self._child, None, None
        if child is not None:
            child.send_signal(how)
            child.wait(timeout=self.timeout)


def _child_path() -> str:
    """The child's PYTHONPATH: the folder that holds this ``rollcall`` package first, so that the child imports the
    same copy of it, installed or not."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
