"""The queue a new node would meet (`backlog.queue_at`): arrivals against the capacity
serving and the capacity on its way, never below an empty queue."""

import pytest

from gpufleet.autoscaler.core.backlog import queue_at


@pytest.mark.parametrize(
    ("queue", "arrival", "serving", "arriving", "want"),
    [
        pytest.param(100.0, 20.0, 10.0, [], 100.0 + 10 * 60, id="short-of-capacity: it grows"),
        pytest.param(100.0, 10.0, 20.0, [], 0.0, id="ahead: it drains, and stays empty"),
        pytest.param(
            100.0, 20.0, 10.0, [(30.0, 20.0)], 100.0 + 10 * 30 - 10 * 30, id="help arrives"
        ),
        pytest.param(100.0, 20.0, 10.0, [(-5.0, 20.0)], 0.0, id="overdue help serves from now"),
        pytest.param(100.0, 20.0, 10.0, [(60.0, 1000.0)], 700.0, id="help at the horizon: none"),
        pytest.param(
            0.0,
            10.0,
            20.0,
            [(30.0, -15.0)],
            5.0 * 30,
            id="an empty queue stores no service for when capacity leaves",
        ),
        pytest.param(
            100.0,
            30.0,
            10.0,
            [(40.0, 10.0), (20.0, 10.0)],
            100.0 + 20 * 20 + 10 * 20,
            id="in time order, whatever the order given",
        ),
    ],
)
def test_queue_at_the_horizon(queue, arrival, serving, arriving, want) -> None:
    left = queue_at(
        queue, arrival_rps=arrival, serving_rps=serving, arriving=arriving, horizon_seconds=60.0
    )
    assert left == pytest.approx(want)
