"""The one retry helper: bounded and unbounded policies, refused failures, the deadline."""

from __future__ import annotations

import time

import anyio
import pytest
from subagents.retry import RetryPolicy, retry_call


class Flaky:
    """Fails ``failures`` times with ``error``, then answers ``"ok"``."""

    def __init__(self, failures: int, error: type[Exception] = ConnectionError) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return "ok"


async def test_a_policy_without_a_limit_retries_until_an_attempt_succeeds():
    flaky = Flaky(7)
    asked: list[int] = []

    def delay(attempt: int, _error: BaseException) -> float:
        asked.append(attempt)
        return 0.001

    with anyio.fail_after(10):
        result = await retry_call(flaky, RetryPolicy(attempts=None, retry_on=lambda _e: True,
                                                     delay=delay))
    assert result == "ok"
    assert flaky.calls == 8
    assert sorted(set(asked)) == [1, 2, 3, 4, 5, 6, 7]  # one pause after each failure


async def test_a_bounded_policy_raises_the_last_failure_after_its_attempts():
    flaky = Flaky(10)
    with anyio.fail_after(10), pytest.raises(ConnectionError, match="failure 3"):
        await retry_call(flaky, RetryPolicy(attempts=3, retry_on=lambda _e: True,
                                            delay=lambda _n, _e: 0.001))
    assert flaky.calls == 3


async def test_a_failure_the_policy_refuses_is_raised_at_once():
    flaky = Flaky(10, error=ValueError)
    with anyio.fail_after(10), pytest.raises(ValueError, match="failure 1"):
        await retry_call(flaky, RetryPolicy(
            attempts=None, retry_on=lambda error: isinstance(error, ConnectionError),
            delay=lambda _n, _e: 0.001))
    assert flaky.calls == 1


async def test_the_deadline_ends_an_unbounded_policy_with_the_last_failure():
    flaky = Flaky(10_000)
    policy = RetryPolicy(attempts=None, retry_on=lambda _e: True,
                         delay=lambda _n, _e: 0.01, deadline=time.monotonic() + 0.1)
    with anyio.fail_after(10), pytest.raises(ConnectionError):
        await retry_call(flaky, policy)
    assert 1 < flaky.calls < 100
