"""``proxy bench peers`` (issue 47): each installed real reader polls the farm, and the one scorer scores it.

Each peer runs a few seconds against a farm playing a tiny workload: its requests
must be in the farm's request log (with its own User-Agent), count as feed GETs
and be scored from the saved log exactly as during the run.  A peer is skipped
only when ``benchmarks/peers/install.sh`` has not been run (the reason says so).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from proxy.bench._options import WORKLOAD_OPTION_NAMES, WorkloadOptions, with_workload_options
from proxy.bench.live import LiveConfig, poisson_workload, reader_view
from proxy.bench.metrics import ProbeRec, Pub, cei_outcome
from proxy.bench.peers._peers import (
    PEER_NAMES,
    PeerPlan,
    cdio_interval,
    cdio_window,
    get_peer,
    rounds_for,
)
from proxy.bench.peers._run import PollerResult, _score_run, gets_note, run_peer
from proxy.bench.peers._score import RunClock, line, score
from proxy.core.model import CEI, EI
from proxy.farm import RequestKind, RequestRecord, load_publications, load_requests

AGENTS = {"rss2email": "feedparser", "reader": "python-reader", "newsboat": "newsboat",
          "changedetection": "mozilla/5.0"}
"""What each peer's requests say they are (rss2email fetches through feedparser's default agent,
changedetection.io as a desktop browser)."""


def _get(t_ms: int, feed: str, *, inm: str | None = None, status: int = 200, kind: RequestKind = RequestKind.FEED,
         size: int = 100, start_ms: float | None = None, host: str = "farm") -> RequestRecord:
    return RequestRecord(t_ms, "GET", f"/feeds/{feed}.xml", kind, feed, status, inm, None, size, "t",
                         start_ms=start_ms, end_ms=None if start_ms is None else float(t_ms), host=host)


def test_the_scorer_reads_feed_gets_only_and_matches_cei_outcome() -> None:
    clock = RunClock(anchor=100.0, chronon_seconds=0.5, chronons=10)
    ceis = [CEI("a", "p", (EI(0, 2, 5, 2), EI(1, 2, 5, 2))), CEI("b", "p", (EI(0, 7, 9, 7),))]
    pubs = [Pub(0, 1.9), Pub(1, 1.9), Pub(0, 6.9)]
    published = {(0, 2): 1.9, (1, 2): 1.9, (0, 7): 6.9}
    records = [
        _get(100_000 + 1500, "0"),  # chronon 3
        _get(100_000 + 2000, "1", inm='"x"', status=304),  # chronon 4: a 304 is a successful probe
        _get(100_000 + 2100, "0", kind=RequestKind.HEAD),  # HEAD: never a feed GET
        _get(100_000 + 2200, "0", kind=RequestKind.FAVICON, size=50),
        _get(100_000 + 4000, "0", status=500),  # chronon 8, failed: captures nothing
        _get(100_000 + 9000, "0"),  # after the run
    ]
    f = score(records, clock, ceis, pubs, published, frozenset({0, 1}), feed_window=20)
    probes = [ProbeRec(0, 3, 3.0), ProbeRec(1, 4, 4.0), ProbeRec(0, 8, 8.0, ok=False)]
    assert f.captured == cei_outcome(ceis, probes, published).captured == 1
    assert (f.feed_gets, f.not_modified, f.failed, f.other_requests) == (3, 1, 1, 2)
    assert f.conditional_share == pytest.approx(1 / 3)
    assert f.bytes == 100 + 100 + 100 + 50 + 100
    assert line("peer x", f).startswith("peer x: completeness 50.0%  feed GETs 3  conditional 33%  bytes ")
    assert (f.delay_p50, f.delay_p90) == pytest.approx((1.1, 2.1))  # the failed GET saw nothing
    assert "delay p50/p90 1/2" in line("proxy", f)
    assert f.peak_per_host == -1 and line("proxy", f).endswith("delay p50/p90 1/2  peak per host -")


def test_the_peak_per_host_counts_every_request_in_the_run_on_its_busiest_host() -> None:
    clock = RunClock(anchor=100.0, chronon_seconds=0.5, chronons=10)
    records = [
        _get(101_000, "0", start_ms=100_990.0),
        _get(101_005, "1", start_ms=100_995.0),  # in progress with the first
        _get(101_003, "0", kind=RequestKind.FAVICON, start_ms=101_001.0),  # a favicon loads the host too
        _get(101_004, "1", start_ms=100_999.0, host="other"),  # another host
        _get(99_000, "0", start_ms=98_990.0), _get(99_002, "1", start_ms=98_980.0),  # before the run
        _get(99_004, "1", start_ms=98_980.0),
    ]
    f = score(records, clock, [], [], {}, frozenset(), feed_window=20)
    assert (f.peak_per_host, f.feed_gets, f.other_requests) == (2, 3, 1)
    assert f.as_dict()["peak_per_host"] == 2
    assert line("peer x", f, "note").endswith("delay p50/p90 -/-  peak per host 2  note")


@pytest.mark.parametrize(("feeds", "gets", "rounds"), [(37, 300, 8), (10, 3, 1), (63, 600, 10)])
def test_rounds_match_the_proxys_gets(feeds: int, gets: int, rounds: int) -> None:
    assert rounds_for(feeds, gets) == rounds


@pytest.mark.slow
@pytest.mark.parametrize("name", PEER_NAMES)
async def test_each_installed_peer_polls_the_farm_and_is_scored(name: str, tmp_path: Path) -> None:
    peer = get_peer(name)
    why = peer.missing()
    if why is not None:
        pytest.skip(f"{name}: {why}")
    bw = poisson_workload(resources=4, profiles=3, chronons=20, lam=4, rank=2, window=5, seed=2)
    cfg = LiveConfig(chronon_seconds=0.25)
    feeds = len(reader_view(bw).feeds)
    # Two rounds in 5 s: a 2.5 s minute (newsboat's real minute is longer: its start-up round only).
    plan = PeerPlan(chronon_seconds=0.25, minute_chronons=10, rounds=2)
    res = await run_peer(bw, cfg, peer, plan, tmp_path, "t")
    gets = [r for r in res.requests if r.kind is RequestKind.FEED]
    assert gets, f"{name} made no feed GET (its log: {tmp_path / f't-peer-{name}.log'})"
    assert all(AGENTS[name] in (r.user_agent or "").lower() for r in gets)
    assert {r.feed for r in gets} == {str(f) for f in reader_view(bw).feeds}  # the rules' feeds only
    assert load_requests(tmp_path / f"t-peer-{name}-requests.jsonl") == list(res.requests)
    f = res.figures
    assert f.feed_gets >= feeds and f.ceis == len(bw.workload.ceis) and 0 <= f.completeness <= 1
    assert math.isnan(f.delay_p50) or f.delay_p50 >= 0
    assert all(r.start_ms is not None and r.host == "127.0.0.1" for r in res.requests)
    assert f.peak_per_host >= 1
    # The saved logs score to the same figures: the result can be re-scored without the peer.
    again = _score_run(bw, cfg, res.clock, load_publications(tmp_path / f"t-peer-{name}-pubs.jsonl"),
                       load_requests(tmp_path / f"t-peer-{name}-requests.jsonl"))
    assert again == f
    assert gets_note(res, res, feeds) == ""  # its own GETs are within 5 % of themselves


LIVE_ONLY = {
    "database_url": "the peers bench keeps the proxy's database in --out",
    "service": "the proxy runs as a process, as the peers do",
    "ping_delay": "its pings are held by --ping-lag only",
    "doc": "the peers' page is made by proxy.bench.peers.table",
    "rule_kind": "one watch rule per profile: the peers' feeds are its feeds",
    "push_share": "no hub: no peer subscribes to one",
    "revisit_factor": "the proxy runs with its own settings",
    "co_update": "the proxy runs with its own settings",
    "publisher_hints": "no real trace states its feeds' update intervals (issue 45); the peers' farm states none",
}
"""The options of ``bench live`` that ``bench peers`` deliberately lacks, and why."""


def _commands() -> tuple[dict[str, Any], dict[str, Any]]:
    from typer.core import TyperGroup
    from typer.main import get_command

    from proxy.bench.cli import bench_app

    group = get_command(bench_app)
    assert isinstance(group, TyperGroup)
    live, peers = (group.commands[name] for name in ("live", "peers"))
    return {p.name: p for p in live.params}, {p.name: p for p in peers.params}


def test_peers_takes_every_live_workload_option_as_live_declares_it() -> None:
    live, peers = _commands()
    for name in WORKLOAD_OPTION_NAMES:
        a, b = live[name], peers[name]
        assert (b.opts, b.secondary_opts, b.help) == (a.opts, a.secondary_opts, a.help), name
        assert b.default == a.default or name == "workload", name
    assert (live["workload"].default, peers["workload"].default) == ("poisson", "trace")
    # Any other option live gains must be taken by peers too, or be listed above with a reason.
    assert set(live) - set(peers) <= set(LIVE_ONLY)


def test_peers_parses_each_workload_option() -> None:
    from typer.core import TyperGroup
    from typer.main import get_command

    from proxy.bench.cli import bench_app

    group = get_command(bench_app)
    assert isinstance(group, TyperGroup)
    args = ["--workload", "poisson", "--trace", "t.csv", "--days", "3.5", "--feeds", "7", "--lam", "2.5",
            "--profiles", "9", "--rank", "2", "--window", "4", "--chronons", "50", "--history", "--seed", "5"]
    assert len(args) == 2 * len(WORKLOAD_OPTION_NAMES) - 1  # one value each but the --history flag
    with group.commands["peers"].make_context("peers", args) as ctx:
        got = {k: ctx.params[k] for k in WORKLOAD_OPTION_NAMES}
    assert got == {"workload": "poisson", "trace": Path("t.csv"), "days": 3.5, "feeds": 7, "lam": 2.5,
                   "profiles": 9, "rank": 2, "window": 4, "chronons": 50, "history": True, "seed": 5}


def test_a_command_with_the_workload_options_gets_them_as_one_value() -> None:
    got: list[tuple[WorkloadOptions, int]] = []

    app = typer.Typer()

    @app.command()
    @with_workload_options(profiles=7)
    def cmd(wl: WorkloadOptions, budget: int = 1) -> None:
        got.append((wl, budget))

    result = CliRunner().invoke(app, ["--feeds", "12", "--budget", "3"])
    assert result.exit_code == 0, result.output
    assert got == [(WorkloadOptions(feeds=12, profiles=7), 3)]
    bw = got[0][0].build()
    assert (bw.workload.resources, bw.workload.chronons) == (12, 300)
    with pytest.raises(TypeError, match="not workload options: budget"):
        with_workload_options(budget=2)


def _cdio_checks(interval: int, window: float, first_tick: float, tick: float, lag: float) -> int:
    """changedetection.io's checks of one watch in ``window`` seconds, as its source makes them:
    a ticker every ``tick`` s queues the watch once ``now - last_checked >= T``, and a worker
    starts the check ``lag`` s later and stamps ``last_checked = round(start)``.  The window starts
    at a whole second plus 0.37 s (any phase)."""
    base = 1000.37
    last, checks, t = None, 0, base + first_tick
    while t < base + window:
        if last is None or t - last >= interval:
            start = t + lag
            if start >= base + window:
                break
            checks += 1
            last = round(start)
        t += tick
    return checks


@pytest.mark.parametrize("rounds", [2, 8, 16, 17, 30])
def test_changedetection_makes_its_rounds_whatever_the_phase_of_its_ticker(rounds: int) -> None:
    plan = get_peer("changedetection").plan(37, 300, 37 * rounds, 0.3)
    interval = round(plan.minute_seconds)
    window = 300 * plan.chronon_seconds
    assert interval == cdio_interval(rounds, 90.0) >= 2 * rounds
    assert window == pytest.approx(cdio_window(rounds, interval))
    for first_tick in (0.0, 0.3, 0.6, 0.95):
        for tick in (1.0, 1.002):
            for lag in (0.0, 0.05, 0.4):
                assert _cdio_checks(interval, window, first_tick, tick, lag) == rounds, (first_tick, tick, lag)


def test_the_old_changedetection_plan_lost_a_round_at_c2() -> None:
    """The plan before: T = round(K c / R) = 6 s and a window of exactly R T = 96 s at R = 16;
    checks 6 or 7 s apart made 14 or 15 rounds (557 and 551 GETs for 592 planned, docs/peers.md)."""
    assert {_cdio_checks(6, 96.0, f, 1.0, lag) for f in (0.0, 0.5) for lag in (0.0, 0.3)} <= {14, 15, 16}
    assert min(_cdio_checks(6, 96.0, f, 1.0, lag) for f in (0.0, 0.5) for lag in (0.0, 0.3)) < 16


def test_the_table_names_a_trace_run_by_its_file_and_shows_the_peak_and_the_target() -> None:
    from proxy.bench.peers.table import HEADER, rows

    def poller(name: str, completeness: float, captured: int, size: int, peak: int) -> dict[str, Any]:
        return {"name": name, "figures": {
            "completeness": completeness, "captured": captured, "feed_gets": 300, "conditional_share": 0.5,
            "bytes": size, "delay_p50": 2.0, "delay_p90": 9.0, "entry_completeness": 0.8, "peak_per_host": peak}}

    result = {"workload": "trace", "tag": "trace-mrsf-p-C2", "description": "real trace synth-a.csv: 9 feeds",
              "pollers": [poller("proxy", 0.9, 90, 9000, 2), poller("replica miniflux-round-robin", 0.2, 20, -1, -1),
                          poller("peer reader", 0.3, 30, 6000, 1), poller("peer changedetection", 0.45, 45, 9000, 7)]}
    got = rows(result)
    assert [r.count("|") for r in HEADER.splitlines()] == [11, 11] and {r.count("|") for r in got} == {11}
    assert got[0] == "| synth-a C2 | proxy | 90.0% | 300 | 50.0% | 9.0 kB | 100 B | 2/9 | 2 | 80.0% |"
    assert "| - | 2/9 | - | 80.0% |" in got[1]  # a replica: bytes and peak not measured
    assert "| 2/9 | 7 |" in got[3]
    assert got[-1].startswith("| synth-a C2 | **proxy / best peer (changedetection)** | **2.00x** |")
    assert "no more bytes per CEI: yes" in got[-1]


def test_the_gets_note_says_why_a_poller_is_off_by_more_than_5_percent() -> None:
    clock = RunClock(0.0, 1.0, 1000)

    def with_gets(n: int) -> PollerResult:
        records = [_get(t, "0") for t in range(0, n * 10, 10)]
        f = score(records, clock, [], [], {}, frozenset(), feed_window=20)
        return PollerResult("x", f, clock, {}, tuple(records))

    proxy = with_gets(60)
    assert [gets_note(with_gets(n), proxy, 3) == "" for n in (56, 57, 63, 64)] == [False, True, True, False]
    assert gets_note(with_gets(64), proxy, 4).endswith("so its GETs come in steps of 4")
    assert gets_note(with_gets(56), proxy, None) == (
        "feed GETs 56 vs the proxy's 60: off by more than 5 %; its minute's bisection found no closer count")
