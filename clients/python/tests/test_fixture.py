"""The pytest plugin: a test-mode broker per test, extra arguments, a factory, and a checked exit."""

from __future__ import annotations

import os
import textwrap
from typing import Callable, List

import pytest

from rollcall import BrokerProcess, Session

Factory = Callable[..., BrokerProcess]


def test_the_fixture_is_a_test_mode_broker_on_loopback(rollcall_broker: BrokerProcess) -> None:
    """rollcall_broker runs serve --test-mode on free loopback ports."""
    assert rollcall_broker.command.startswith("tcp://127.0.0.1:")
    assert rollcall_broker.update.startswith("tcp://127.0.0.1:")
    assert rollcall_broker.test_mode
    assert rollcall_broker.process.poll() is None
    assert "--test-mode" in rollcall_broker.args and "--print-endpoints" in rollcall_broker.args


class TestExtraArguments:
    @pytest.fixture
    def rollcall_broker_args(self) -> List[str]:
        return ["--ttl-ms", "5000"]

    def test_overriding_the_args_fixture_configures_the_broker(self, rollcall_broker: BrokerProcess) -> None:
        """rollcall_broker_args, overridden here, reaches rollcall serve."""
        assert Session(rollcall_broker, "alice").ttl_ms == 5000


def test_the_factory_starts_brokers_of_their_own(rollcall_broker_factory: Factory) -> None:
    """Each broker from the factory is its own run, with its own arguments."""
    first = rollcall_broker_factory()
    second = rollcall_broker_factory("--ttl-ms", "4000")
    assert first.epoch != second.epoch
    assert Session(second, "alice").ttl_ms == 4000
    assert second.stop() == 0  # stopping early is fine; teardown checks it again


def test_sigterm_stops_the_broker_with_status_zero(rollcall_broker: BrokerProcess) -> None:
    """stop() closes the test's connections, sends SIGTERM and answers the exit status."""
    Session(rollcall_broker, "alice")
    assert rollcall_broker.stop() == 0


def test_teardown_fails_the_test_when_the_broker_exits_badly(pytester: pytest.Pytester) -> None:
    """A broker that does not exit 0 after SIGTERM makes the test fail at teardown, quoting the status."""
    pytester.makepyfile(
        textwrap.dedent(
            """
            import os, signal

            def test_broker_killed(rollcall_broker):
                os.kill(rollcall_broker.pid, signal.SIGKILL)
                rollcall_broker.process.wait(5)
            """
        )
    )
    # Without plugin autoloading (how RollCall's own suite runs this, from the source tree) the inner run is told
    # to load the plugin; an installed package loads it through its entry point.
    explicit = ["-p", "rollcall.pytest_plugin"] if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") else []
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *explicit)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*exited with status -9 on SIGTERM*"])


def test_a_missing_binary_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a usable ROLLCALL_BIN the error says which variable to set."""
    monkeypatch.setenv("ROLLCALL_BIN", "/nonexistent/rollcall")
    with pytest.raises(FileNotFoundError, match="ROLLCALL_BIN"):
        BrokerProcess()


def test_a_broker_that_will_not_start_shows_its_log() -> None:
    """A refused setting ends the start at once, with the broker's own complaint."""
    with pytest.raises(RuntimeError, match="exited with status") as refused:
        BrokerProcess(["--ttl-ms", "0"])
    assert "--ttl-ms must be from 1" in str(refused.value)
