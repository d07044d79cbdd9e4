"""The fixtures' start-up retry (conftest.StartFailed, start_retrying): a
child killed by a signal before it is ready is started again, a child that
exits with its own status is not."""

from __future__ import annotations

import sys

import pytest

from conftest import START_ATTEMPTS, Process, StartFailed, start_retrying


def child(tmp_path, attempt: int, code: str) -> Process:
    """A Python child running code, its log in tmp_path; waits for it to end."""
    p = Process("child", [sys.executable, "-c", code], tmp_path / f"child-{attempt}.log")
    p.proc.wait(timeout=30)
    return p


@pytest.mark.parametrize(
    "code, retried",
    [
        ("import os, signal; print('aborting'); os.kill(os.getpid(), signal.SIGABRT)", True),
        ("print('listen tcp: bind: address already in use'); raise SystemExit(1)", True),
        ("print('bad flag'); raise SystemExit(2)", False),
    ],
)
def test_start_retrying(tmp_path, code, retried):
    attempts = []

    def start(attempt: int) -> int:
        attempts.append(attempt)
        raise StartFailed(child(tmp_path, attempt, code), "exited before ready")

    with pytest.raises(StartFailed) as e:
        start_retrying(start)
    assert attempts == (list(range(START_ATTEMPTS)) if retried else [0])
    assert e.value.retry == retried
    assert code.split("'")[1] in str(e.value)  # the child's own output


def test_start_retrying_returns_the_first_success(tmp_path):
    attempts = []

    def start(attempt: int) -> int:
        attempts.append(attempt)
        if attempt == 0:
            raise StartFailed(child(tmp_path, attempt, "import os; os.abort()"), "exited before ready")
        return attempt

    assert start_retrying(start) == 1
    assert attempts == [0, 1]
