"""Generator properties (main paper §4.1, Table 1) and the real-trace loader."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from proxy.core.model import EI
from proxy.sim.generate import (
    GenParams,
    Life,
    Reveal,
    ei_for_update,
    generate,
    poisson_updates,
    profile_ceis,
    zipf_weights,
)
from proxy.sim.traces import (
    DEFAULT_NOT_BEFORE,
    FAR_FUTURE,
    TraceError,
    header_columns,
    load_trace,
    parse_timestamp,
)
from proxy.sim.workload_io import dumps_workload

SMALL = GenParams(resources=200, profiles=60, chronons=400, lam=12.0, rank=4, window=5)


def test_same_seed_same_file_other_seed_other_file() -> None:
    a = dumps_workload(generate(SMALL, seed=3))
    assert a == dumps_workload(generate(SMALL, seed=3))
    assert a != dumps_workload(generate(SMALL, seed=4))


def test_meta_records_params_and_seed() -> None:
    wl = generate(SMALL, seed=11)
    assert wl.meta["seed"] == 11
    params = wl.meta["params"]
    assert isinstance(params, dict)
    assert params["lam"] == 12.0 and params["life"] == "window" and params["rank"] == 4


def test_ranks_distinct_resources_and_range() -> None:
    wl = generate(SMALL, seed=1)
    assert len(wl.ceis) > 100
    ranks = Counter(len(c.eis) for c in wl.ceis)
    assert set(ranks) <= {1, 2, 3, 4}
    assert len(ranks) >= 3  # β = 0: ranks drawn uniformly from 1..k
    for c in wl.ceis:
        assert len({ei.resource for ei in c.eis}) == len(c.eis)
        for ei in c.eis:
            assert 0 <= ei.start <= ei.finish <= SMALL.chronons - 1
            assert ei.reveal is None


def test_window_width() -> None:
    wl = generate(SMALL, seed=2)
    for c in wl.ceis:
        for ei in c.eis:
            assert ei.finish == min(ei.start + SMALL.window, SMALL.chronons - 1)


def test_overwrite_ends_where_the_next_update_begins() -> None:
    params = GenParams(resources=50, profiles=40, chronons=300, lam=10.0, life=Life.OVERWRITE)
    wl = generate(params, seed=5)
    starts: dict[int, set[int]] = {}
    for c in wl.ceis:
        for ei in c.eis:
            starts.setdefault(ei.resource, set()).add(ei.start)
    # Replaying the generator's stage 1 gives the updates each EI was made from.
    updates = poisson_updates(np.random.default_rng(5), 50, 300, 10.0)
    for c in wl.ceis:
        for ei in c.eis:
            ups = updates[ei.resource]
            later = [u for u in ups if u > ei.start]
            assert ei.start in ups
            assert ei.finish == (later[0] - 1 if later else 299)


@pytest.mark.parametrize(
    ("updates", "index", "life", "window", "expected"),
    [
        ([3, 9, 20], 0, Life.WINDOW, 10, (3, 13)),
        ([3, 9, 95], 2, Life.WINDOW, 10, (95, 99)),  # clipped at K-1
        ([3, 9, 20], 1, Life.WINDOW, 0, (9, 9)),
        ([3, 9, 20], 0, Life.OVERWRITE, 10, (3, 8)),
        ([3, 4, 20], 0, Life.OVERWRITE, 10, (3, 3)),  # next update one chronon later: width 1
        ([3, 9, 20], 2, Life.OVERWRITE, 10, (20, 99)),  # last update lives to the end
    ],
)
def test_ei_for_update(updates: list[int], index: int, life: Life, window: int, expected: tuple[int, int]) -> None:
    assert ei_for_update(updates, index, life, window, 100) == expected


def test_auction_watch_waits_for_a_new_update_on_every_resource() -> None:
    # r0 updates at 1, 5, 30; r1 at 2, 3, 40; r2 at 10 and 50.
    updates = [[1, 5, 30], [2, 3, 40], [10, 50]]
    ceis = profile_ceis([0, 1, 2], updates, Life.WINDOW, 2, 100, Reveal.RELEASE)
    assert ceis == [
        (EI(0, 1, 3), EI(1, 2, 4), EI(2, 10, 12)),
        # Waits for updates strictly after 10, the last start of the first CEI.
        (EI(0, 30, 32), EI(1, 40, 42), EI(2, 50, 52)),
    ]  # then r0 has nothing after 50: the profile ends.


def test_reveal_update_reveals_each_ei_at_its_start() -> None:
    wl = generate(GenParams(resources=50, profiles=20, chronons=200, lam=8.0, reveal=Reveal.UPDATE), seed=1)
    assert wl.ceis
    for c in wl.ceis:
        assert all(ei.reveal == ei.start for ei in c.eis)
        assert c.effective_release == min(ei.start for ei in c.eis)


def test_exact_rank() -> None:
    wl = generate(GenParams(resources=100, profiles=30, chronons=300, rank=5, exact_rank=True), seed=1)
    assert {len(c.eis) for c in wl.ceis} == {5}


def test_beta_prefers_simple_profiles() -> None:
    flat = generate(GenParams(resources=300, profiles=400, chronons=200, rank=5, beta=0.0), seed=1)
    skew = generate(GenParams(resources=300, profiles=400, chronons=200, rank=5, beta=2.0), seed=1)

    def rank1_share(wl: object) -> float:
        per_profile = {c.profile: len(c.eis) for c in wl.ceis}  # type: ignore[attr-defined]
        return sum(1 for r in per_profile.values() if r == 1) / len(per_profile)

    assert rank1_share(flat) < 0.3  # about 1/5
    assert rank1_share(skew) > 0.55  # 1 / (1 + 1/4 + 1/9 + 1/16 + 1/25) ≈ 0.68


def test_alpha_skews_resource_popularity() -> None:
    def top10_share(alpha: float) -> float:
        wl = generate(GenParams(resources=500, profiles=300, chronons=100, lam=5.0, rank=3, alpha=alpha), seed=9)
        per_profile = {c.profile: {ei.resource for ei in c.eis} for c in wl.ceis}
        counts = Counter(r for res in per_profile.values() for r in res)
        total = sum(counts.values())
        return sum(n for _, n in counts.most_common(10)) / total

    assert top10_share(0.0) < 0.1
    assert top10_share(2.0) > 0.5


def test_zipf_weights() -> None:
    assert zipf_weights(4, 0.0).tolist() == [0.25] * 4
    w = zipf_weights(3, 1.0)
    assert w == pytest.approx(np.array([1, 1 / 2, 1 / 3]) / (11 / 6))


def test_poisson_mean_and_heterogeneous_rates() -> None:
    rng = np.random.default_rng(0)
    flat = [len(u) for u in poisson_updates(rng, 2000, 10_000, 20.0)]
    het = [len(u) for u in poisson_updates(rng, 2000, 10_000, 20.0, rate_sigma=1.0)]
    assert np.mean(flat) == pytest.approx(20.0, rel=0.05)
    assert np.mean(het) == pytest.approx(20.0, rel=0.1)
    assert np.var(flat) == pytest.approx(20.0, rel=0.2)  # Poisson: variance = mean
    assert np.var(het) > 3 * np.var(flat)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [({"resources": 0}, "resources must be >= 1"), ({"lam": -1.0}, "lam must be >= 0"),
     ({"window": -2}, "window must be >= 0")],
)
def test_bad_params_are_named(change: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        generate(GenParams(**change), seed=0)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# traces

TRACE = """feed_id,timestamp_utc_iso
b,2026-02-10T12:00:00Z
a,2026-02-10T00:00:00Z
a,0001-01-01T00:00:00Z
a,2099-01-01T00:00:00Z
b,not a date
a,2026-02-19T23:59:59Z
b,2026-02-11T06:00:00+02:00
c,2020-01-01T00:00:00Z
"""


def test_trace_loader_maps_window_and_counts_junk(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(TRACE, encoding="utf-8")
    trace = load_trace(
        path, 10,
        start=datetime(2026, 2, 10, tzinfo=UTC), end=datetime(2026, 2, 20, tzinfo=UTC),
        not_after=datetime(2026, 3, 1, tzinfo=UTC),
    )
    assert trace.names == ("a", "b", "c")
    # One chronon per day: a at day 0 and day 9; b at day 0 (noon) and day 1 (04:00 UTC).
    assert trace.updates == ((0, 9), (0, 1), ())
    s = trace.stats
    assert (s.rows, s.kept, s.placeholder, s.future, s.unparseable, s.outside_window, s.date_only) == (
        8, 4, 1, 1, 1, 1, 1)
    assert "skipped 1 placeholder, 1 future" in s.summary()


def test_trace_default_window_ends_at_latest_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(TRACE, encoding="utf-8")
    trace = load_trace(path, 100, days=2.0, not_after=datetime(2026, 3, 1, tzinfo=UTC))
    # Only a's 2026-02-19T23:59:59 lies in the last two days; it is the final chronon.
    assert trace.updates[0] == (99,)
    assert trace.stats.kept == 1


def test_trace_feeds_the_generator(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("r,t\n" + "".join(f"{i % 4},2026-01-01T{i % 24:02d}:00:00Z\n" for i in range(96)), encoding="utf-8")
    trace = load_trace(path, 48, start=datetime(2026, 1, 1, tzinfo=UTC), end=datetime(2026, 1, 2, tzinfo=UTC))
    wl = generate(GenParams(resources=4, profiles=3, chronons=48, rank=2, window=1), 0, updates=trace.updates)
    assert wl.ceis
    starts = {(ei.resource, ei.start) for c in wl.ceis for ei in c.eis}
    assert all(s in trace.updates[r] for r, s in starts)


def test_trace_errors(tmp_path: Path) -> None:
    empty = tmp_path / "e.csv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(TraceError, match="no data rows"):
        load_trace(empty, 10)
    short = tmp_path / "s.csv"
    short.write_text("r,t\na,2026-02-18T01:41:13Z\n\nb\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"s\.csv, line 4: expected 2 columns"):
        load_trace(short, 10)
    junk = tmp_path / "j.csv"
    junk.write_text("r,t\na,0001-01-01\n", encoding="utf-8")
    with pytest.raises(TraceError, match="no usable timestamps among 1 rows"):
        load_trace(junk, 10)
    junk.write_text("r,t\na,garbage\nb,soon\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"among 2 rows \(2 unparseable") as err:
        load_trace(junk, 10)
    assert "first column" not in str(err.value)  # no hint of swapped columns where they are not


def test_parse_timestamp() -> None:
    when = datetime(2026, 2, 18, 1, 41, 13, tzinfo=UTC)
    assert parse_timestamp("2026-02-18T01:41:13Z") == when
    assert parse_timestamp("2026-02-18T02:41:13+01:00") == when
    assert parse_timestamp("2026-02-18 01:41:13") == when  # naive is UTC
    assert parse_timestamp("2026-02-18 01:41:13 UTC") == when  # as BigQuery exports a TIMESTAMP
    assert parse_timestamp("2026-02-18T01:41:13 gmt") == when
    # As RSS writes dates (RFC 822), and as Unix epoch seconds or milliseconds.
    assert parse_timestamp("Wed, 18 Feb 2026 01:41:13 GMT") == when
    assert parse_timestamp("Wed, 18 Feb 2026 02:41:13 +0100") == when
    assert parse_timestamp(str(int(when.timestamp()))) == when
    assert parse_timestamp(f"{when.timestamp():.3f}") == when
    assert parse_timestamp(str(int(when.timestamp()) * 1000)) == when
    for junk in ("garbage", "", "  ", "nan", "inf", "1e400", "feed_id", "timestamp_utc_iso"):
        assert parse_timestamp(junk) is None, junk


def test_placeholder_and_far_future_dates_stay_junk() -> None:
    """Year 0001 in RFC 822 form is a placeholder, not 2001; dates at the ends of the calendar do not crash."""
    assert parse_timestamp("Tue, 02 Jun 21 09:30:00 GMT") == datetime(2021, 6, 2, 9, 30, tzinfo=UTC)  # a 2-digit year
    for placeholder in ("Mon, 01 Jan 0001 00:00:00 +0000", "01 Jan 0001 00:00 GMT", "Sat, 01 Jan 0000 00:00:00 GMT",
                        "Mon, 01 Jan 0099 00:00:00 GMT", "0001-01-01T00:00:00+01:00", "0001-01-01"):
        when = parse_timestamp(placeholder)
        assert when is not None and when < DEFAULT_NOT_BEFORE, placeholder
    for future in ("9999-12-31T23:59:59-01:00", "9999-12-31T23:59:59Z", "Fri, 31 Dec 9999 23:59:59 GMT"):
        when = parse_timestamp(future)
        assert when is not None and when >= FAR_FUTURE, future


def test_trace_counts_junk_at_both_ends_of_the_calendar(tmp_path: Path) -> None:
    """Such rows are counted as placeholders and future dates; the window is the real rows'."""
    path = tmp_path / "junk.csv"
    path.write_text(
        "feed_id,published\n"
        "a,0001-01-01T00:00:00+01:00\n"
        "a,2025-03-01T06:00:00Z\n"
        'b,"Mon, 01 Jan 0001 00:00:00 +0000"\n'
        'b,"Sun, 02 Mar 2025 06:00:00 +0000"\n'
        "c,9999-12-31T23:59:59-01:00\n"
        "c,9999-12-31T23:59:59Z\n"
        "c,2025-03-03T06:00:00Z\n",
        encoding="utf-8",
    )
    trace = load_trace(path, 3, days=3)
    assert (trace.stats.placeholder, trace.stats.future, trace.stats.kept) == (2, 2, 3)
    assert trace.stats.window_end == "2025-03-03T06:00:01+00:00"
    assert trace.updates == ((0,), (1,), (2,))


def test_trace_header_is_optional_and_formats_mix(tmp_path: Path) -> None:
    """A first row that reads as data is data; a BOM and blank lines are no rows."""
    rows = "a,2026-02-18T01:00:00Z\nb,\"Wed, 18 Feb 2026 05:00:00 GMT\"\n\na,1771398000\n"
    with_header = tmp_path / "h.csv"
    with_header.write_text("\ufefffeed_id,timestamp_utc_iso\n" + rows, encoding="utf-8")
    without = tmp_path / "n.csv"
    without.write_text("\n" + rows, encoding="utf-8")
    start = datetime(2026, 2, 18, tzinfo=UTC)
    for path in (with_header, without):
        trace = load_trace(path, 24, start=start, end=start + timedelta(days=1))
        assert trace.names == ("a", "b"), path
        # 01:00 and 1771398000 (07:00) for a, 05:00 for b, hourly chronons.
        assert trace.updates == ((1, 7), (5,)), path
        assert trace.stats.rows == 3 and trace.stats.unparseable == 0, path


def test_trace_header_names_the_columns(tmp_path: Path) -> None:
    """An export with more columns, in another order, is read by its header's names."""
    path = tmp_path / "export.csv"
    path.write_text(
        "Title,Published_At,Feed_URL\n"
        "hello,2026-02-18T01:00:00Z,https://a.example/feed\n"
        '"a, b",2026-02-18T05:00:00Z,https://b.example/feed\n'
        "late,2026-02-18T07:00:00Z,https://a.example/feed\n",
        encoding="utf-8",
    )
    start = datetime(2026, 2, 18, tzinfo=UTC)
    trace = load_trace(path, 24, start=start, end=start + timedelta(days=1))
    assert trace.names == ("https://a.example/feed", "https://b.example/feed")
    assert trace.updates == ((1, 7), (5,))
    assert trace.stats.unparseable == 0
    assert header_columns(["feed_id", "timestamp_utc_iso"]) == (0, 1)
    assert header_columns(["date", "source"]) == (1, 0)
    assert header_columns(["when_seen", "updated", "x"]) == (0, 1)  # names only the time: the resource is the first other
    assert header_columns(["r", "t"]) == (0, 1)  # names neither: the first two columns
    short = tmp_path / "short.csv"
    short.write_text("title,published,feed\nx,2026-02-18T01:00:00Z\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"short\.csv, line 2: expected 3 columns"):
        load_trace(short, 10)


def test_swapped_columns_get_a_hint(tmp_path: Path) -> None:
    """Timestamps in the first column fail with an error that says so, not only "no usable timestamps"."""
    path = tmp_path / "swapped.csv"
    path.write_text("2026-02-18T01:00:00Z,a\n2026-02-18T05:00:00Z,b\n2026-02-18T07:00:00Z,a\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"no usable timestamps.*first column holds the timestamps"):
        load_trace(path, 10)


def test_real_trace_loads() -> None:
    real = Path("/work/shared/traces/real_feeds_items.csv")
    if not real.exists():
        pytest.skip("shared traces not present")
    trace = load_trace(real, 1000)
    assert len(trace.names) == 198
    assert trace.stats.placeholder == 36  # the 0001-01-01 rows
    assert trace.stats.kept > 500
