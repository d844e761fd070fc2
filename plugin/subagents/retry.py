"""The one retry helper: every retried operation of the package goes through it.

Model calls and a group's failover, MCP and A2A connections, agent attempts and the
background reconnection of what did not answer each describe *what* to retry in a
:class:`RetryPolicy` (how many attempts, which failures, how long to wait, by when to give
up); tenacity does the retrying. The first attempt runs before tenacity is involved: building
tenacity's state costs about 20 µs, which a model call that succeeds (nearly all of them)
should not pay.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_result,
    stop_after_attempt,
    stop_any,
    stop_never,
)
from tenacity.stop import stop_base

T = TypeVar("T")

MAX_BACKOFF = 8.0
"""Seconds: the longest pause :func:`backoff` makes between two attempts."""


def backoff(attempt: int, *, first: float = 0.5, longest: float = MAX_BACKOFF) -> float:
    """The pause after failed attempt number ``attempt`` (1-based): doubling from ``first``,
    at most ``longest``, with up to a quarter taken off at random so that many clients that
    failed together do not come back together."""
    return min(first * 2.0 ** min(attempt - 1, 64), longest) * (1 - 0.25 * random.random())


@dataclass(frozen=True)
class RetryPolicy:
    """How one operation is retried.

    Attributes:
        attempts: Attempts in all (1 = never retried); None retries until an attempt succeeds
            (or fails in a way ``retry_on`` refuses, or the deadline comes).
        retry_on: Whether a failure is worth another attempt.
        delay: Seconds to wait after failed attempt ``n`` (1-based) that raised ``error``.
        deadline: A ``time.monotonic()`` value: no attempt starts after it, and a wait that
            would end after it is not made (the last failure is raised instead).
    """

    attempts: int | None
    retry_on: Callable[[BaseException], bool]
    delay: Callable[[int, BaseException], float] = lambda attempt, _error: backoff(attempt)
    deadline: float | None = None


async def retry_call(operation: Callable[[], Awaitable[T]], policy: RetryPolicy) -> T:
    """Run ``operation``, retried as ``policy`` says; the last failure is raised as it is."""
    try:
        return await operation()
    except Exception as error:
        first_delay = policy.delay(1, error)
        if (policy.attempts is not None and policy.attempts <= 1) \
                or not policy.retry_on(error) or not _has_time(policy, first_delay):
            raise

    async def attempt() -> _Tried[T]:  # a coroutine function: tenacity awaits what it returns
        try:
            return _Tried(await operation())
        except Exception as error:  # noqa: BLE001 - handed back: retry_on decides
            return _Tried(error=error)

    pauses = _Pauses(policy)
    await asyncio.sleep(first_delay)
    retrying = AsyncRetrying(
        stop=stop_any(stop_never if policy.attempts is None
                      else stop_after_attempt(policy.attempts - 1), _OutOfTime(pauses)),
        wait=pauses, retry=retry_if_result(pauses.worth_another),
        retry_error_callback=_last_tried, sleep=asyncio.sleep)
    tried: _Tried[T] = await retrying(attempt)
    retrying.iter_state.reset()  # its pending actions refer back to it
    failure: Exception | None = tried.error
    if failure is None:
        return cast(T, tried.value)
    # The failure's traceback holds the frames it passed through and, on Python 3.13,
    # the frames that called them - tenacity's, which hold its state, which holds this last
    # outcome: the outcome lets go of the failure, and this frame of the rest, so no cycle
    # is left behind.
    tried.error = None
    del tried, retrying, pauses, attempt
    try:
        raise failure
    finally:
        failure = None  # this frame is in the failure's traceback: no cycle through it


@dataclass(slots=True)
class _Tried(Generic[T]):
    """What one attempt under tenacity gave: its result or its failure. A failure is handed
    back, not raised through tenacity: a traceback through its frames would hold its state,
    which holds the failure, in a cycle the garbage collector has to find."""

    value: T | None = None
    error: Exception | None = None


class _Pauses:
    """The pause after each failed attempt, chosen once: the deadline's check and the wait
    see the same value."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.attempt = 0
        self.pause = 0.0

    def __call__(self, state: RetryCallState) -> float:
        """The pause after the state's attempt (tenacity counts from the second one)."""
        attempt = state.attempt_number + 1
        if self.attempt != attempt:
            error = _failure(state)
            self.attempt = attempt
            self.pause = self.policy.delay(attempt, error) if error is not None else 0.0
        return self.pause

    def worth_another(self, tried: _Tried[object]) -> bool:
        """Whether an attempt's failure is retried."""
        return tried.error is not None and self.policy.retry_on(tried.error)


class _OutOfTime(stop_base):
    """Stops when the next pause would end after the policy's deadline."""

    def __init__(self, pauses: _Pauses) -> None:
        self.pauses = pauses

    def __call__(self, retry_state: RetryCallState) -> bool:
        return not _has_time(self.pauses.policy, self.pauses(retry_state))


def _failure(state: RetryCallState) -> Exception | None:
    outcome = state.outcome
    if outcome is None or outcome.failed:
        return None
    tried: _Tried[object] = outcome.result()
    return tried.error


def _last_tried(state: RetryCallState) -> object:
    """When tenacity stops: the last attempt's outcome, to be raised by :func:`retry_call`."""
    assert state.outcome is not None
    return state.outcome.result()


def _has_time(policy: RetryPolicy, wait: float) -> bool:
    return policy.deadline is None or time.monotonic() + wait < policy.deadline
