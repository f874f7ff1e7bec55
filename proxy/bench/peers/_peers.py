"""The real feed readers ``proxy bench peers`` runs, each driven by its own scheduler (issue 47).

Each peer gets a :class:`PeerPlan` from :meth:`Peer.plan`: the wall length of a
chronon for its run and how many chronons one of *its* minutes lasts, chosen so
that its feed GETs come out at the proxy's.  A peer that polls every feed in
each round (all four do) makes ``R = round(G / n)`` rounds for ``G`` GETs on
``n`` feeds; its minute is stretched or squeezed so that the run's ``K``
chronons hold exactly ``R`` of its rounds.  That is the only knob: what each
program fetches and when, within its minute, is its own decision.

- **rss2email** has no scheduler: cron runs ``r2e run`` every minute.  Emulated
  here at that 1-minute step (a peer minute = ``K / R`` chronons).
- **reader** (lemon24) runs scheduled updates (``interval`` 1 minute, no jitter)
  under ``faketime``, whose clock and sleep run ``60 / minute_seconds`` times
  fast.  Its first update is at start (new feeds are due at once), then one per
  minute boundary: the window is ``R - 1/2`` of its minutes, so it holds ``R``.
- **newsboat** reloads every feed every ``reload-time`` (whole, real) minutes;
  faketime breaks its sleep loop, so its minutes are real and the trace is
  compressed instead (a chronon = ``60 (R - 1/2) / K`` seconds).  Its reload
  thread keeps exact 60 s steps (it subtracts the reload's own time), so it
  makes its ``R`` rounds at any ``R``; it sleeps between them, so it runs beside
  the other peers (``idle``), each on its own farm.
- **changedetection.io** checks each watch every ``T`` whole seconds (its own
  1 s ticker), which come out as ``T`` or ``T + 1`` (:func:`cdio_interval`); the
  chronon is stretched so that ``R`` such periods fill the run (:func:`cdio_window`).

Deliberately not here: scoring (:mod:`proxy.bench.peers._score`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import fcntl
import math
import os
import pty
import shutil
import signal
import struct
import termios
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

PEERS_DIR_ENV = "FMP_PEERS_DIR"
PEER_NAMES = ("reader", "changedetection", "newsboat", "rss2email")
INSTALL = "benchmarks/peers/install.sh"


def peers_dir() -> Path:
    """Where install.sh put the peers' venvs (``$FMP_PEERS_DIR``, default ``~/.cache/fmp-peers``)."""
    return Path(os.environ.get(PEERS_DIR_ENV) or Path.home() / ".cache" / "fmp-peers")


@dataclass(frozen=True, slots=True)
class PeerPlan:
    """How one peer's run is timed: the wall chronon, its minute in chronons, its settings."""

    chronon_seconds: float
    minute_chronons: float
    rounds: int
    """Rounds over all feeds the window holds (each round: one GET per feed)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The peer's own configuration, as recorded in the result."""

    @property
    def minute_seconds(self) -> float:
        return self.minute_chronons * self.chronon_seconds


@dataclass(frozen=True, slots=True)
class PeerRun:
    """What a peer's driver is given: where to work, what to poll, the run's wall window."""

    workdir: Path
    urls: tuple[str, ...]
    plan: PeerPlan
    start: float
    end: float
    log: Path
    """The peer's own stdout/stderr (kept in --out beside the result)."""


class Peer(Protocol):
    """A real feed reader run as its own process(es) against the farm."""

    name: str
    fairness: str
    """Why its configuration is a fair match for the proxy's (printed in docs/peers.md)."""
    idle: bool
    """It sleeps through real minutes between rounds, so it runs beside the other peers."""

    def missing(self) -> str | None:
        """Why it cannot run here (not installed, not driven yet), or ``None``."""

    def plan(self, feeds: int, chronons: int, gets: int, chronon_seconds: float) -> PeerPlan:
        """Its timing for ``gets`` feed GETs over ``feeds`` feeds in ``chronons`` chronons."""

    async def prepare(self, run: PeerRun) -> None:
        """Configure and subscribe (no fetching); before the window starts."""

    async def run(self, run: PeerRun) -> None:
        """Poll from ``run.start`` to ``run.end`` by its own scheduler; stop everything it started."""


def rounds_for(feeds: int, gets: int) -> int:
    """Rounds over all ``feeds`` closest to ``gets`` GETs (at least one)."""
    return max(1, round(gets / max(1, feeds)))


async def _sleep_until(when: float) -> None:
    await asyncio.sleep(max(0.0, when - time.time()))


async def _stop(proc: asyncio.subprocess.Process, grace: float = 5.0) -> None:
    """SIGTERM the process group, then SIGKILL it after ``grace`` seconds."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), grace)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


class Rss2email:
    """rss2email 3.13 (Debian): ``r2e run`` from an emulated cron, once a peer minute."""

    idle = False
    name = "rss2email"
    fairness = (
        "cron's finest step is a minute, and r2e fetches every feed in config order on each run, so "
        "its only knob is how many runs the window holds; the peer minute is set so that it makes the "
        "proxy's number of feed GETs. Its own conditional-request logic (it drops validators after a "
        "304) is left as it is. Mail goes to a sendmail that discards it.")

    def missing(self) -> str | None:
        if shutil.which("r2e") is None:
            return f"r2e not found (Debian package rss2email; run {INSTALL})"
        return None

    def plan(self, feeds: int, chronons: int, gets: int, chronon_seconds: float) -> PeerPlan:
        rounds = rounds_for(feeds, gets)
        minute = chronons / rounds
        # A run must fit well inside its minute, as it does in real time (a second or two of 60):
        # about 1 s to start plus 20 ms a feed, here, times 4.
        length = max(chronon_seconds, 4 * (1.0 + 0.02 * feeds) / minute)
        return PeerPlan(length, minute, rounds, {
            "cron": "* * * * * r2e run (emulated: one run every peer minute, first at chronon 0)",
            "feed-timeout": 60, "email-protocol": "sendmail (a script that discards the mail)"})

    async def prepare(self, run: PeerRun) -> None:
        cfg, db = run.workdir / "r2e.cfg", run.workdir / "r2e.json"
        sendmail = run.workdir / "sendmail"
        sendmail.write_text("#!/bin/sh\ncat >/dev/null\n", encoding="utf-8")
        sendmail.chmod(0o755)
        with run.log.open("ab") as log:
            proc = await asyncio.create_subprocess_exec(
                "r2e", "-c", str(cfg), "-d", str(db), "new", "bench@example.org", stdout=log, stderr=log)
            if await proc.wait() != 0:
                raise RuntimeError(f"r2e new failed (log: {run.log})")
        text = cfg.read_text(encoding="utf-8")
        text = "\n".join(f"sendmail = {sendmail}" if line.startswith("sendmail =") else line
                         for line in text.splitlines())
        # The [feed.NAME] sections `r2e add` writes, at once (r2e add costs 0.5 s a feed).
        text += "".join(f"\n[feed.f{i}]\nurl = {url}\n" for i, url in enumerate(run.urls))
        cfg.write_text(text + "\n", encoding="utf-8")

    async def run(self, run: PeerRun) -> None:
        cfg, db = run.workdir / "r2e.cfg", run.workdir / "r2e.json"
        procs: list[asyncio.subprocess.Process] = []
        with run.log.open("ab") as log:
            try:
                for j in range(run.plan.rounds):
                    await _sleep_until(run.start + j * run.plan.minute_seconds)
                    # cron starts the job whether or not the last one finished.
                    procs.append(await asyncio.create_subprocess_exec(
                        "r2e", "-c", str(cfg), "-d", str(db), "run", stdout=log, stderr=log,
                        start_new_session=True))
                await _sleep_until(run.end)
            finally:
                for p in procs:
                    await _stop(p)


class Reader:
    """lemon24/reader 3.27: scheduled updates (interval 1 minute) under faketime."""

    idle = False
    name = "reader"
    fairness = (
        "reader decides itself which feeds are due (update_after on whole-minute interval boundaries, "
        "pushed back by Retry-After and Cache-Control); interval 1 minute, no jitter, one worker. "
        "faketime speeds its clock and sleeps so that its minute lasts the chronons that make its "
        "number of feed GETs the proxy's. It sends ETag/Last-Modified as it always does.")

    def python(self) -> Path:
        return peers_dir() / "reader" / "bin" / "python"

    def missing(self) -> str | None:
        if not self.python().exists():
            return f"no reader venv at {self.python().parent.parent} (run {INSTALL})"
        if shutil.which("faketime") is None:
            return f"faketime not found (Debian package faketime; run {INSTALL})"
        return None

    def plan(self, feeds: int, chronons: int, gets: int, chronon_seconds: float) -> PeerPlan:
        rounds = rounds_for(feeds, gets)
        # One update at start, then one per minute boundary: R - 1/2 minutes hold R rounds.
        minute = chronons / (rounds - 0.5)
        length = max(chronon_seconds, 4 * (1.0 + 0.02 * feeds) / minute)
        speed = 60.0 / (minute * length)
        return PeerPlan(length, minute, rounds, {
            ".reader.update": {"interval": 1, "jitter": 0}, "workers": 1,
            "faketime": f"x{speed:.4g} from 30 s past a minute boundary"})

    async def prepare(self, run: PeerRun) -> None:
        (run.workdir / "reader.sqlite").unlink(missing_ok=True)

    async def run(self, run: PeerRun) -> None:
        speed = 60.0 / run.plan.minute_seconds
        # The fake clock starts 30 s into a minute: the first update at start, then R - 1 boundaries.
        start = dt.datetime.fromtimestamp(60 * math.floor(time.time() / 60) + 30, dt.UTC)
        driver = Path(__file__).with_name("reader_driver.py")
        env = {**os.environ, "TZ": "UTC"}
        await _sleep_until(run.start)
        with run.log.open("ab") as log:
            proc = await asyncio.create_subprocess_exec(
                "faketime", "-f", f"@{start:%Y-%m-%d %H:%M:%S} x{speed:.6f}", str(self.python()),
                str(driver), str(run.workdir / "reader.sqlite"), "1", *run.urls,
                stdout=log, stderr=log, env=env, start_new_session=True)
            try:
                await _sleep_until(run.end)
                if proc.returncode is not None:
                    raise RuntimeError(f"reader exited early with status {proc.returncode} (log: {run.log})")
            finally:
                await _stop(proc)


class Newsboat:
    """newsboat 2.21 (Debian): auto-reload every ``reload-time`` real minutes, in a pseudo-terminal."""

    idle = True
    name = "newsboat"
    fairness = (
        "newsboat reloads every feed every reload-time minutes (1, its minimum) and at start-up; "
        "faketime breaks its sleep loop, so its minutes are real and the trace is compressed to fit "
        "its rounds instead. It sends If-Modified-Since/If-None-Match as it always does.")

    def missing(self) -> str | None:
        if shutil.which("newsboat") is None:
            return f"newsboat not found (Debian package newsboat; run {INSTALL})"
        return None

    def plan(self, feeds: int, chronons: int, gets: int, chronon_seconds: float) -> PeerPlan:
        rounds = rounds_for(feeds, gets)
        minute = chronons / (rounds - 0.5)
        return PeerPlan(60.0 / minute, minute, rounds, {
            "auto-reload": "yes", "reload-time": 1, "refresh-on-startup": "yes", "reload-threads": 1})

    async def prepare(self, run: PeerRun) -> None:
        (run.workdir / "urls").write_text("".join(f"{u}\n" for u in run.urls), encoding="utf-8")
        (run.workdir / "config").write_text(
            "auto-reload yes\nreload-time 1\nrefresh-on-startup yes\nreload-threads 1\n"
            "show-read-feeds yes\nnotify-program \"\"\n", encoding="utf-8")
        (run.workdir / "cache.db").unlink(missing_ok=True)

    async def run(self, run: PeerRun) -> None:
        # A curses program: give it a terminal (80x24) whose output nobody reads but a drain.
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        env = {**os.environ, "TERM": "xterm", "HOME": str(run.workdir)}
        await _sleep_until(run.start)
        loop = asyncio.get_running_loop()
        os.set_blocking(master, False)
        loop.add_reader(master, lambda: _drain(master))
        with run.log.open("ab") as log:
            proc = await asyncio.create_subprocess_exec(
                "newsboat", "-u", str(run.workdir / "urls"), "-C", str(run.workdir / "config"),
                "-c", str(run.workdir / "cache.db"), "-l", "3", "-d", str(run.workdir / "newsboat.log"),
                stdin=slave, stdout=slave, stderr=log, env=env, start_new_session=True)
            os.close(slave)
            try:
                await _sleep_until(run.end)
                if proc.returncode is not None:
                    raise RuntimeError(f"newsboat exited early with status {proc.returncode} (log: {run.log})")
            finally:
                await _stop(proc)
                loop.remove_reader(master)
                os.close(master)


def _drain(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.read(fd, 65536)


def cdio_interval(rounds: int, seconds: float) -> int:
    """changedetection.io's interval T (whole seconds) for ``rounds`` checks of each watch.

    Its worker stamps ``last_checked = round(time.time())`` when a check starts
    (``worker.py``) and its ticker looks every second plus its own work
    (``flask_app.py``, ``ticker_thread_check_time_launch_checks``), queueing a
    watch once ``now - last_checked >= T``.  So a watch's checks are T *or* T + 1
    seconds apart, depending on where in its second the check started, and the
    first comes up to a tick after the unpause.  For ``R`` rounds to fit a
    window whatever that phase, ``R`` periods must differ from ``R - 1`` by more
    than that second: T at least ``2 R`` (and no shorter than the proxy's run
    would make it).
    """
    return max(2 * rounds, round(seconds / rounds), 1)


def cdio_window(rounds: int, interval: int) -> float:
    """The run's wall length for ``rounds`` checks ``interval`` (+ 0 or 1) seconds apart.

    Checks fall at ``c0 + j P`` with the first tick ``c0`` in [0, 1] s and the period
    ``P`` in [T, T + 1]: half a second for the first tick, then ``R - 1/2`` periods of
    T + 1/2 puts the window's end half a period after the ``R``-th check, so ``R``
    checks of each watch fall in it for any ``P`` in (W - 1) / (R - 1) > P > W / R,
    which holds [T, T + 1] with about half a second to spare either side when T = 2 R.
    """
    return 0.5 + (rounds - 0.5) * (interval + 0.5)


class Changedetection:
    """changedetection.io 0.60.10: one watch per feed, its interval in seconds, its own 1 s ticker."""

    idle = False
    name = "changedetection"
    fairness = (
        "changedetection.io checks each watch when its own interval has passed since its last check "
        "(its ticker looks every second, most overdue first, FETCH_WORKERS 10 by default); every watch "
        "gets the same interval in whole seconds, and the chronon is stretched so that the run holds "
        "the number of its checks that makes the proxy's GETs, whether its 1 s ticker and the whole "
        "second it stamps each check with make a period T or T + 1 s. It sends no conditional requests, as it never does. "
        "MINIMUM_SECONDS_RECHECK_TIME=1, ALLOW_IANA_RESTRICTED_ADDRESSES=true for 127.0.0.1, "
        "DISABLE_VERSION_CHECK=yes; its example watches are deleted and the feeds' watches created "
        "paused, then unpaused at chronon 0.")

    def program(self) -> Path:
        return peers_dir() / "changedetection" / "bin" / "changedetection.io"

    def missing(self) -> str | None:
        if not self.program().exists():
            return f"no changedetection.io venv at {self.program().parent.parent} (run {INSTALL})"
        return None

    def plan(self, feeds: int, chronons: int, gets: int, chronon_seconds: float) -> PeerPlan:
        rounds = rounds_for(feeds, gets)
        interval = cdio_interval(rounds, chronons * chronon_seconds)
        window = cdio_window(rounds, interval)
        return PeerPlan(window / chronons, interval * chronons / window, rounds, {
            "time_between_check": {"seconds": interval}, "time_between_check_use_default": False,
            "MINIMUM_SECONDS_RECHECK_TIME": 1, "processor": "text_json_diff (its default)"})

    def _env(self) -> dict[str, str]:
        return {**os.environ, "ALLOW_IANA_RESTRICTED_ADDRESSES": "true", "DISABLE_VERSION_CHECK": "yes",
                "MINIMUM_SECONDS_RECHECK_TIME": "1"}

    async def prepare(self, run: PeerRun) -> None:
        from proxy.ports import free_port

        data = run.workdir / "datastore"
        data.mkdir(parents=True, exist_ok=True)
        port = free_port()
        log = run.log.open("ab")
        self._proc = await asyncio.create_subprocess_exec(
            str(self.program()), "-d", str(data), "-p", str(port), "-h", "127.0.0.1",
            stdout=log, stderr=log, env=self._env(), start_new_session=True)
        log.close()
        self._base = f"http://127.0.0.1:{port}/api/v1"
        try:
            await self._subscribe(run, data / "changedetection.json")
        except BaseException:
            await _stop(self._proc)  # no changedetection.io outlives a failed set-up
            raise

    async def _subscribe(self, run: PeerRun, settings: Path) -> None:
        """Wait for its API, delete its example watches, add one paused watch per feed."""
        import json

        import httpx

        deadline = time.time() + 60
        async with httpx.AsyncClient(timeout=10) as client:
            while True:
                if self._proc.returncode is not None:
                    raise RuntimeError(f"changedetection.io exited at start-up (log: {run.log})")
                if time.time() > deadline:
                    raise RuntimeError(f"changedetection.io did not answer within 60 s (log: {run.log})")
                with contextlib.suppress(OSError, ValueError, KeyError, httpx.HTTPError):
                    # A small file, read while waiting for the API anyway.
                    app = json.loads(settings.read_text(encoding="utf-8"))["settings"]["application"]  # noqa: ASYNC240
                    self._key = str(app["api_access_token"])
                    resp = await client.get(f"{self._base}/watch", headers={"x-api-key": self._key})
                    if resp.status_code == 200:
                        break
                await asyncio.sleep(0.2)
            head = {"x-api-key": self._key}
            for uuid in (await client.get(f"{self._base}/watch", headers=head)).json():
                (await client.delete(f"{self._base}/watch/{uuid}", headers=head)).raise_for_status()
            # The plan's minute is one interval (whole seconds).
            interval = max(1, round(run.plan.minute_seconds))
            self._uuids = []
            for url in run.urls:
                resp = await client.post(f"{self._base}/watch", headers=head, json={
                    "url": url, "paused": True, "time_between_check_use_default": False,
                    "time_between_check": {"seconds": interval}})
                resp.raise_for_status()
                self._uuids.append(str(resp.json()["uuid"]))

    async def run(self, run: PeerRun) -> None:
        import httpx

        proc = self._proc
        try:
            await _sleep_until(run.start)
            async with httpx.AsyncClient(timeout=10, headers={"x-api-key": self._key}) as client:
                for uuid in self._uuids:
                    (await client.get(f"{self._base}/watch/{uuid}", params={"paused": "unpaused"}
                                      )).raise_for_status()
            await _sleep_until(run.end)
            if proc.returncode is not None:
                raise RuntimeError(f"changedetection.io exited early with status {proc.returncode} "
                                   f"(log: {run.log})")
        finally:
            await _stop(proc)


def get_peer(name: str) -> Peer:
    """The peer called ``name`` (one of :data:`PEER_NAMES`)."""
    peers: dict[str, Peer] = {"reader": Reader(), "changedetection": Changedetection(),
                              "newsboat": Newsboat(), "rss2email": Rss2email()}
    try:
        return peers[name]
    except KeyError:
        raise ValueError(f"unknown peer {name!r}; the peers are {', '.join(PEER_NAMES)}") from None


__all__ = ["PEER_NAMES", "Peer", "PeerPlan", "PeerRun", "get_peer", "peers_dir", "rounds_for"]
