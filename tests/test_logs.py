"""A failing dependency is logged as its transitions: a handful of lines, not one a try."""

import logging

import pytest

from gpufleet.logs import OutageLog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def outage(caplog):
    caplog.set_level(logging.INFO, logger="test.outage")
    clock = Clock()
    log = OutageLog(
        logging.getLogger("test.outage"), "cannot reach X", remind_seconds=300, clock=clock
    )
    return log, clock, caplog


def test_a_day_of_failures_every_second_is_a_few_lines(outage):
    log, clock, caplog = outage
    for second in range(86_400):
        clock.now = float(second)
        log.failed("connection refused")
    log.recovered()
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "cannot reach X: connection refused"
    assert (
        messages[1]
        == "cannot reach X: connection refused (still, 300 failures since the last line)"
    )
    assert len(messages) == 86_400 // 300 + 1  # the first, a reminder per 5 minutes, recovery
    assert messages[-1] == "cannot reach X: works again, after 86400 failures"
    assert [r.levelname for r in caplog.records][-2:] == ["WARNING", "INFO"]


def test_a_new_reason_is_said_at_once_and_recovery_only_after_a_failure(outage):
    log, clock, caplog = outage
    log.recovered()
    assert log.failures == 0
    log.failed("timeout")
    clock.now = 1.0
    log.failed("timeout")
    clock.now = 2.0
    log.failed("HTTP 503")
    assert log.failures == 3
    log.recovered()
    log.recovered()
    assert [r.getMessage() for r in caplog.records] == [
        "cannot reach X: timeout",
        "cannot reach X: HTTP 503",
        "cannot reach X: works again, after 3 failures",
    ]


def test_a_kind_tells_reasons_apart_when_their_text_varies(outage):
    log, _clock, caplog = outage
    log.failed("refused by <conn at 0x1>", kind="unavailable")
    log.failed("refused by <conn at 0x2>", kind="unavailable")
    log.failed("took 10 s", kind="timeout")
    assert [r.getMessage() for r in caplog.records] == [
        "cannot reach X: refused by <conn at 0x1>",
        "cannot reach X: took 10 s",
    ]


def test_a_dependency_failing_every_other_try_is_a_few_lines(outage):
    """Each change was a line: a Prometheus timing out every other tick logged 99 lines
    in 100 ticks. Past a burst, one change per half reminder period; the next line says
    how many were not logged."""
    log, clock, caplog = outage
    for second in range(3600):
        clock.now = float(second)
        if second % 2:
            log.recovered()
        else:
            log.failed("timeout")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) <= 4 + 3600 // 150 + 1, messages
    assert "changes not logged before it" in messages[-1]


def test_a_failure_after_a_quiet_while_is_said_at_once(outage):
    log, clock, caplog = outage
    for second in range(4):  # the burst: four changes
        clock.now = float(second)
        if second % 2:
            log.recovered()
        else:
            log.failed("timeout")
    clock.now = 3600.0
    log.failed("refused")
    assert caplog.records[-1].getMessage() == "cannot reach X: refused"


def test_an_exception_is_its_traceback_once_an_outage_and_bounded(outage):
    """What nothing expected (a bug, or data nothing checked): the traceback goes with the
    outage's first line only, and its text is cut to a line."""
    log, clock, caplog = outage
    for second in range(3):
        clock.now = float(second)
        try:
            raise ValueError("x" * 10_000)
        except ValueError as err:
            log.raised(err)
    log.recovered()
    try:
        raise KeyError("again")
    except KeyError as err:
        log.raised(err)
    first, recovered, again = caplog.records
    assert first.levelname == "ERROR" and first.exc_info is not None
    assert first.getMessage().startswith("cannot reach X: ValueError: xxx")
    assert len(first.getMessage()) < 160
    assert recovered.getMessage() == "cannot reach X: works again, after 3 failures"
    assert again.exc_info is not None  # a new outage: its traceback too
