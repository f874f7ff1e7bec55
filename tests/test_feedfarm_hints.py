"""The farm's publisher hints from a trace (issue 45): what each feed states of its own pace."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest

from proxy.farm import FarmProcess, TraceEvent, trace_intervals
from proxy.feeds.hints import PublisherHints, publisher_hints

EVENTS = [TraceEvent(t, f) for t, f in [(1.0, "a"), (2.0, "a"), (3.0, "a"), (4.0, "a"), (4.0, "b")]]


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, {"a": 900.0, "b": 3600.0, "c": 7200.0}),  # span 4 units of 900 s; c has no event: half of one
    ({"horizon": 2.0}, {"a": 900.0, "b": 3600.0, "c": 3600.0}),  # a: 2 events in 1,800 s; b: none
])
def test_intervals_are_each_feeds_mean_over_the_span(kwargs: dict[str, float], expected: dict[str, float]) -> None:
    assert trace_intervals(EVENTS, ["a", "b", "c"], 900.0, **kwargs) == pytest.approx(expected)


def test_noise_is_log_normal_per_feed_and_seeded() -> None:
    exact = trace_intervals(EVENTS, ["a", "b"], 900.0)
    noisy = trace_intervals(EVENTS, ["a", "b"], 900.0, sigma=0.5, seed=3)
    assert noisy == trace_intervals(EVENTS, ["a", "b"], 900.0, sigma=0.5, seed=3)
    assert noisy != exact
    assert all(abs(math.log(noisy[f] / exact[f])) < 0.5 * 4 for f in exact)  # within four sigma
    with pytest.raises(ValueError, match="sigma"):
        trace_intervals(EVENTS, ["a"], 900.0, sigma=-1.0)
    with pytest.raises(ValueError, match="spans"):
        trace_intervals([], ["a"], 900.0)


def test_farm_serve_states_the_traces_rates(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("feed_id,timestamp\n" + "".join(f"{e.feed_id},{e.trace_time:g}\n" for e in EVENTS))
    args = ["--trace", str(trace), "--seconds-per-trace-unit", "900", "--publisher-hints", "0",
            "--entries", "3", "--prefill", "1"]
    with FarmProcess(args) as farm, httpx.Client(base_url=farm.url, timeout=10.0) as c:
        a, b = (publisher_hints(c.get(f"/feeds/{f}.xml").content) for f in ("a", "b"))
        assert farm.stop() == 0
    assert a == PublisherHints(None, 900.0, None)  # "hourly, 4"
    assert b == PublisherHints(None, 3600.0, None)  # "hourly, 1"
