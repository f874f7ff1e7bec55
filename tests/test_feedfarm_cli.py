"""``proxy farm serve`` as a subprocess: prints its port, serves, obeys its control API, exits on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from proxy.farm import FarmProcess, FarmProcessError, load_publications
from tests.proc_support import poll_until, signal_process


def test_subprocess_farm_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "pubs.jsonl"
    args = ["--feeds", "20", "--entries", "5", "--format", "atom", "--log", str(log)]
    args += ["--fault", "3:gone", "--fault", "4:rate_limited:retry_after=9,times=1"]
    with FarmProcess(args) as farm:
        assert farm.url == f"http://127.0.0.1:{farm.port}"
        assert farm.info["feeds"] == 20
        with httpx.Client(base_url=farm.url, timeout=10.0) as c:
            doc = c.get("/feeds/0.atom")
            assert doc.status_code == 200
            assert doc.text.count("<entry>") == 5
            assert c.get("/feeds/3.atom").status_code == 410
            limited = c.get("/feeds/4.atom")
            assert (limited.status_code, limited.headers["retry-after"]) == (429, "9")
            assert c.get("/feeds/4.atom").status_code == 200

            entry_id = c.post("/_farm/feeds/7/publish", json={"title": "Oil spill"}).json()[
                "entry_id"
            ]
            assert entry_id == "urn:feedfarm:7:6"
            assert "Oil spill" in c.get("/feeds/7.atom").text
            assert c.put("/_farm/feeds/7/fault", json={"mode": "error500"}).status_code == 200
            assert c.get("/feeds/7.atom").status_code == 500
            assert c.delete("/_farm/feeds/7/fault").status_code == 200
            bad = c.put("/_farm/feeds/7/fault", json={"mode": "explode"})
            assert bad.status_code == 400 and "unknown fault mode" in bad.text

            stats = c.get("/_farm/stats").json()
            assert stats["requests"] == 6
            assert stats["by_status"] == {"200": 3, "410": 1, "429": 1, "500": 1}
            assert stats["publications"] == 1
            pubs = c.get("/_farm/publications").json()
            assert [p["entry_id"] for p in pubs] == [entry_id]
        code = farm.stop()
    assert code == 0
    assert farm.summary is not None and farm.summary["requests"] == 6
    assert [p.entry_id for p in load_publications(log)] == [entry_id]


def test_sigint_also_stops_it_and_a_poisson_rate_publishes() -> None:
    cmd = [sys.executable, "-m", "proxy.farm", "serve", "--feeds", "5", "--rate", "2"]
    cmd += ["--seconds-per-trace-unit", "0.01"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["event"] == "listening" and first["port"] > 0
        with httpx.Client(timeout=10.0) as c:  # a deadline, not a count of tries: shared machine
            poll_until(lambda: c.get(f"{first['url']}/_farm/stats").json()["publications"] >= 10,
                       within=30)
        signal_process(proc, signal.SIGINT)
        out, _ = proc.communicate(timeout=15)
    finally:
        if signal_process(proc, signal.SIGKILL):  # only when it did not stop
            proc.communicate(timeout=30)
    assert proc.returncode == 0
    last = json.loads(out.strip().splitlines()[-1])
    assert last["event"] == "stopped" and last["publications"] >= 10


def test_bad_options_fail_with_a_message() -> None:
    with pytest.raises(FarmProcessError, match="did not print its address"):
        FarmProcess(["--fault", "3:explode"]).start()
    proc = subprocess.run(
        [sys.executable, "-m", "proxy.farm", "serve", "--fault", "3:explode"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "unknown fault mode 'explode'" in proc.stderr


def test_subprocess_plays_a_csv_trace_and_logs_it(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("feed_id,timestamp\nalpha,0.5\nbeta,1\nalpha,2\nbeta,1000000\n")
    log = tmp_path / "pubs.csv"
    args = ["--trace", str(trace), "--seconds-per-trace-unit", "0.01", "--log", str(log)]
    args += ["--entries", "3", "--prefill", "0"]
    with FarmProcess(args) as farm:
        assert farm.info["feeds"] == 2
        with httpx.Client(base_url=farm.url, timeout=10.0) as c:
            poll_until(lambda: c.get("/_farm/stats").json()["publications"] >= 3, within=30)
            body = c.get("/feeds/alpha.xml").text
        assert farm.stop() == 0
    assert body.count("<item>") == 2
    pubs = load_publications(log)
    assert [(p.feed_id, p.trace_time) for p in pubs] == [
        ("alpha", 0.5),
        ("beta", 1.0),
        ("alpha", 2.0),
    ]


def test_sigterm_is_not_held_up_by_hanging_requests() -> None:
    import threading

    outcomes: list[str] = []

    def hang(url: str) -> None:
        try:
            httpx.get(url, timeout=60.0)
            outcomes.append("answered")
        except httpx.HTTPError as exc:
            outcomes.append(type(exc).__name__)

    args = ["--feeds", "3", "--fault", "1:timeout", "--fault", "2:slow_drip:delay=30"]
    with FarmProcess(args) as farm:
        threads = [
            threading.Thread(target=hang, args=(f"{farm.url}/feeds/{i}.xml",)) for i in (1, 2)
        ]
        for t in threads:
            t.start()
        with httpx.Client(timeout=10.0) as c:  # wait until both requests have arrived
            poll_until(lambda: c.get(f"{farm.url}/_farm/stats").json()["requests"] == 2, within=30)
        assert farm.stop(wait=20.0) == 0
        for t in threads:
            t.join(timeout=30)
    # the hanging requests were cut off, never answered with a status
    assert sorted(outcomes) == ["RemoteProtocolError", "RemoteProtocolError"]
