"""``rollcall serve --test-mode`` as a child process of the test run."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import IO, Optional, Sequence

from .broker import Broker


def find_binary() -> str:
    """The ``rollcall`` executable: ``$ROLLCALL_BIN`` if set, else ``rollcall`` on the ``PATH``."""
    configured = os.environ.get("ROLLCALL_BIN")
    if configured:
        if not os.access(configured, os.X_OK):
            raise FileNotFoundError(f"ROLLCALL_BIN={configured} is not an executable file")
        return configured
    found = shutil.which("rollcall")
    if found is None:
        raise FileNotFoundError("no rollcall executable: set ROLLCALL_BIN, or put rollcall on the PATH")
    return found


class BrokerProcess(Broker):
    """A broker started as ``rollcall serve --test-mode --print-endpoints [args]``, on free loopback ports.

    Test mode keeps nothing and moves its clock only through `advance`, so tests of TTLs and grace periods take
    milliseconds and do not depend on the machine's load. Unless ``args`` set ``--group-batch-ms``, the broker runs
    with ``--group-batch-ms 0``: on a clock that moves only when told, a group message waiting for its window would
    otherwise wait for the next ``advance``, and a group expectation would not see it. The broker's log goes to a
    temporary file, quoted when the broker fails to start or to stop.
    """

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        binary: Optional[str] = None,
        start_timeout: float = 10.0,
        timeout: float = 5.0,
    ) -> None:
        self.binary = binary or find_binary()
        batching = [] if any(arg.startswith("--group-batch-ms") for arg in args) else ["--group-batch-ms", "0"]
        self.args = ["serve", "--test-mode", "--print-endpoints", *batching, *args]
        self._log: IO[bytes] = tempfile.TemporaryFile(prefix="rollcall-serve-", suffix=".log")
        self.process = subprocess.Popen(
            [self.binary, *self.args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log
        )
        try:
            line = self._read_endpoints(start_timeout)
        except BaseException:
            self.process.kill()
            self.process.wait()
            raise
        endpoints = json.loads(line)
        self.epoch: str = endpoints.get("epoch", "")
        # The WebSocket endpoint's URL, when ``args`` give ``--ws-endpoint`` (docs/websocket.md).
        self.ws: Optional[str] = endpoints.get("ws")
        super().__init__(
            endpoints["command"], endpoints["update"], timeout=timeout, test_mode=bool(endpoints.get("test_mode"))
        )

    @property
    def pid(self) -> int:
        """The broker's process id."""
        return self.process.pid

    def log(self) -> str:
        """What the broker wrote to stderr so far."""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def stop(self, timeout: float = 10.0) -> int:
        """Closes this object's connections, sends SIGTERM and waits for the exit; returns the exit status.

        Raises `RuntimeError` (after ``kill -9``) if the broker has not exited within ``timeout`` seconds.
        A status that is not 0 is returned, not raised: the pytest fixture turns it into a failure.
        """
        self.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            status = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(
                f"rollcall serve (pid {self.pid}) did not exit within {timeout} s of SIGTERM; killed.\n{self.log()}"
            ) from None
        return status

    def _read_endpoints(self, timeout: float) -> str:
        """The JSON line ``--print-endpoints`` writes once the broker is ready; raises if it does not come."""
        assert self.process.stdout is not None
        stdout = self.process.stdout
        deadline = time.monotonic() + timeout
        pending = b""
        while b"\n" not in pending:
            remaining = deadline - time.monotonic()
            ready = remaining > 0 and select.select([stdout], [], [], remaining)[0]
            chunk = os.read(stdout.fileno(), 4096) if ready else b""
            if not chunk:
                why = f"printed no endpoints in {timeout} s"
                if ready:  # end of file: the broker is exiting, so its status comes within moments
                    try:
                        why = f"exited with status {self.process.wait(max(remaining, 1.0))}"
                    except subprocess.TimeoutExpired:
                        why = "closed its stdout without printing endpoints"
                raise RuntimeError(f"{self.binary} {' '.join(self.args)} {why}.\n{self.log()}")
            pending += chunk
        line = pending.split(b"\n", 1)[0]
        # The broker prints nothing more, but a full pipe must never block it: read whatever comes, until EOF.
        threading.Thread(target=self._drain, args=(stdout,), daemon=True).start()
        return line.decode()

    @staticmethod
    def _drain(stdout: IO[bytes]) -> None:
        while os.read(stdout.fileno(), 4096):
            pass
