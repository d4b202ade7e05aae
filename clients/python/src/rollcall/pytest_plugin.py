"""The pytest plugin (entry point ``pytest11``): fixtures that run a test-mode broker per test."""

from __future__ import annotations

from typing import Callable, Iterator, List

import pytest

from .process import BrokerProcess

STOP_TIMEOUT = 10.0


@pytest.fixture
def rollcall_broker_args() -> List[str]:
    """Extra arguments for ``rollcall serve`` in `rollcall_broker`; override it in a module or conftest.py.

    For example ``return ["--offline-grace-ms", "1000"]``.
    """
    return []


@pytest.fixture
def rollcall_broker_factory() -> Iterator[Callable[..., BrokerProcess]]:
    """Starts brokers: ``rollcall_broker_factory("--offline-grace-ms", "500")``; each is stopped at teardown.

    Teardown sends SIGTERM, and fails the test unless each broker exits with status 0 within 10 s.
    """
    brokers: List[BrokerProcess] = []

    def start(*args: str) -> BrokerProcess:
        broker = BrokerProcess(args)
        brokers.append(broker)
        return broker

    yield start
    failures = []
    for broker in brokers:
        try:
            status = broker.stop(STOP_TIMEOUT)
        except RuntimeError as error:
            failures.append(str(error))
            continue
        if status != 0:
            failures.append(
                f"rollcall serve (pid {broker.pid}) exited with status {status} on SIGTERM.\n{broker.log()}"
            )
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


@pytest.fixture
def rollcall_broker(
    rollcall_broker_factory: Callable[..., BrokerProcess], rollcall_broker_args: List[str]
) -> BrokerProcess:
    """A ``rollcall serve --test-mode`` broker for this test, started with `rollcall_broker_args`."""
    return rollcall_broker_factory(*rollcall_broker_args)
