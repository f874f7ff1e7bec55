"""The budget comes first: probing and tick jitter while `wrk` loads the API (issue 24.4).

    .venv/bin/python benchmarks/machinery/bench_api_load.py                 # SQLite, 30 s phases
    .venv/bin/python benchmarks/machinery/bench_api_load.py \
        --database-url postgresql+asyncpg://postgres@127.0.0.1/bench_load   # an existing, empty database

A real ``proxy serve`` subprocess (budget 10 per 0.5 s chronon: 20 probes/s)
polls a farm subprocess of 200 feeds that publish (each about every 20 s),
with 50 profiles whose rules fire every 3 s (a trigger feed, one or two query
feeds within 2 s), all created over the API. Then, one phase after the other,
each ``--duration`` seconds long:

- ``idle``: no API load (the unloaded probing rate);
- ``profiles``: ``wrk -c20`` on ``GET /api/v1/profiles``;
- ``summary``: ``wrk -c20`` on ``GET /api/v1/metrics/summary``;
- ``mixed``: ``wrk -c20`` where every fifth request creates a profile (of a
  second user, with a rule that fires hourly) and the others list profiles.

Per phase it prints one line: probes started per second (from
``proxy_budget_used_probes_total``) and as a share of the idle phase's, tick
jitter p99 (from ``proxy_tick_jitter_seconds``: the bucket bound that holds
99 % of the phase's ticks), ticks, and wrk's requests per second, p99 latency
and non-2xx count. Figures go to ``docs/bench-api-load.md`` by hand, with the
machine's load at the time (the script prints ``os.getloadavg()``).

Needs ``wrk`` on the PATH (``apt-get install -y wrk``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from _procs import stop  # beside this script: a child may already be gone

from proxy.farm import FarmProcess
from proxy.ports import free_port
from proxy.rules.durations import parse_duration

JITTER_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class BenchError(RuntimeError):
    pass



def service_env(database_url: str, budget: int, chronon: float, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    env.update({
        "PROXY_DATABASE_URL": database_url,
        "PROXY_CHRONON_SECONDS": str(chronon),
        "PROXY_BUDGET": str(budget),
        "PROXY_POLICY": "mrsf-p",
        "PROXY_ALLOW_PRIVATE_NETWORKS": "true",
        "PROXY_PER_HOST_CONCURRENCY": "50",
        "PROXY_PER_HOST_MIN_DELAY_SECONDS": "0",
        "PROXY_RESPECT_CACHE_HINTS": "false",
        "PROXY_RETENTION_DAYS": "0",
        "PROXY_LOG_LEVEL": "WARNING",
        "PROXY_LOG_FORMAT": "json",
    })
    env.update(extra)
    return env


async def _cli(env: dict[str, str], *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy.cli", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise BenchError(f"proxy {' '.join(args)} failed: {err.decode()[-2000:]}")
    return out.decode()


@contextlib.asynccontextmanager
async def serving(env: dict[str, str], port: int, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    with log.open("ab") as sink:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy.cli", "serve", "--port", str(port), env=env,
            stdout=sink, stderr=sink)
    try:
        yield proc
    finally:
        await stop(proc, signal.SIGTERM, grace=20)  # nothing to do for one already gone


async def ready(api: httpx.AsyncClient, proc: asyncio.subprocess.Process, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise BenchError(f"proxy serve exited with {proc.returncode} before it was ready")
        with contextlib.suppress(httpx.TransportError):
            if (await api.get("/readyz")).status_code == 200:
                return
        await asyncio.sleep(0.2)
    raise BenchError(f"proxy serve not ready within {within} s")


def parse_metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def jitter_p99(before: dict[str, float], after: dict[str, float]) -> tuple[str, int]:
    """The smallest histogram bound holding 99 % of the phase's ticks, and the tick count."""
    total = after["proxy_tick_jitter_seconds_count"] - before["proxy_tick_jitter_seconds_count"]
    if total <= 0:
        return "n/a", 0
    for bound in JITTER_BUCKETS:
        key = f'proxy_tick_jitter_seconds_bucket{{le="{bound}"}}'
        if after[key] - before[key] >= 0.99 * total:
            return f"<={bound * 1000:g}ms", int(total)
    return ">1000ms", int(total)


def rule(rng: random.Random, feeds: list[int], every: str, within: str) -> dict[str, Any]:
    trigger, *queries = rng.sample(feeds, 1 + rng.choice((1, 2)))
    return {"name": "r", "trigger": {"feed": str(trigger), "every": every, "slack": "1s"},
            "query": [{"feed": str(q), "within": within} for q in queries]}


MIXED_LUA = """
local counter = 0
local feeds = {FEEDS}
local key = "{KEY}"
local nthreads = 0
local threads = {}
setup = function(thread)
  nthreads = nthreads + 1
  thread:set("tid", nthreads)  -- a global of the thread's own state, read by request()
  table.insert(threads, thread)
end
statuses = {}
response = function(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end
done = function(summary, latency, requests)
  for _, thread in ipairs(threads) do
    local counts = thread:get("statuses")
    for status, n in pairs(counts) do
      io.write(string.format("status %d: %d\\n", status, n))
    end
  end
end
request = function()
  counter = counter + 1
  local headers = {}
  headers["Authorization"] = "Bearer " .. key
  if counter % 5 == 0 then
    headers["Content-Type"] = "application/json"
    local f = feeds[(counter % #feeds) + 1]
    local q = feeds[((counter * 7) % #feeds) + 1]
    local body = '{"name": "mix ' .. tostring(tid) .. '-' .. counter .. '", "rules": [{"name": "h", ' ..
      '"trigger": {"feed": "' .. f .. '", "every": "1h"}, "query": [{"feed": "' .. q .. '", "within": "1h"}]}]}'
    return wrk.format("POST", "/api/v1/profiles", headers, body)
  end
  return wrk.format("GET", "/api/v1/profiles", headers, nil)
end
"""


def parse_wrk(out: str) -> dict[str, Any]:
    def seconds(value: str) -> float:
        number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value).groups()  # type: ignore[union-attr]
        return float(number) * {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[unit]

    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    requests = re.search(r"(\d+) requests in", out)
    errors = re.search(r"Socket errors: (.*)", out)
    statuses: dict[int, int] = {}
    for code, n in re.findall(r"^status (\d+): (\d+)$", out, re.M):
        statuses[int(code)] = statuses.get(int(code), 0) + int(n)
    return {
        "rps": float(rps.group(1)) if rps else 0.0,
        "p99_ms": seconds(p99.group(1)) * 1000 if p99 else float("nan"),
        "requests": int(requests.group(1)) if requests else 0,
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": errors.group(1).strip() if errors else "",
        "statuses": statuses,
    }


async def run_wrk(url: str, key: str, duration: float, connections: int,
                  script: Path | None) -> dict[str, Any]:
    args = ["wrk", f"-c{connections}", "-t2", f"-d{int(duration)}s", "--latency",
            "-H", f"Authorization: Bearer {key}"]
    if script is not None:
        args += ["-s", str(script)]
    proc = await asyncio.create_subprocess_exec(*args, url, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise BenchError(f"wrk failed: {err.decode()[-1000:]}")
    return parse_wrk(out.decode())


async def main(args: argparse.Namespace) -> None:
    if shutil.which("wrk") is None:
        raise BenchError("wrk is not on the PATH: apt-get install -y wrk")
    work = Path(tempfile.mkdtemp(prefix="bench-api-load-"))
    database_url = args.database_url or f"sqlite+aiosqlite:///{work}/proxy.sqlite3"
    env = service_env(database_url, args.budget, args.chronon, dict(kv.split("=", 1) for kv in args.env))
    key = (await _cli(env, "users", "create", "bench")).strip().splitlines()[-1]
    mixed_key = (await _cli(env, "users", "create", "mixer")).strip().splitlines()[-1]
    rng = random.Random(args.seed)
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')} {platform.node()} {os.cpu_count()} cores, "
          f"loadavg {' '.join(f'{x:.2f}' for x in os.getloadavg())}; db "
          f"{database_url.split(':', 1)[0]}; budget {args.budget} per {args.chronon} s chronon", flush=True)
    farm_args = ["--feeds", str(args.feeds), "--rate", str(1 / args.publish_every),
                 "--seconds-per-trace-unit", "1", "--prefill", "5", "--seed", str(args.seed)]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with FarmProcess(farm_args) as farm:
        async with serving(env, port, work / "serve.log") as proc, \
                httpx.AsyncClient(base_url=base, timeout=30) as api:
            await ready(api, proc, 60)
            auth = {"Authorization": f"Bearer {key}"}
            feeds: list[int] = []
            for i in range(args.feeds):
                r = await api.post("/api/v1/feeds", json={"url": f"{farm.url}/feeds/{i}.xml"}, headers=auth)
                if r.status_code not in (200, 201):
                    raise BenchError(f"feed registration failed: {r.status_code} {r.text}")
                feeds.append(r.json()["id"])
            # A rule's schedule starts at the tick after its create, so the creates are spread
            # over one period: the rules then come due evenly, whatever a create costs. (Created
            # back to back, faster creates bunched them into the same chronons, and the idle
            # rate went from 18.6 to 12 probes/s with nothing else changed.)
            spread = parse_duration(args.every).total_seconds() / max(args.profiles, 1)
            for i in range(args.profiles):
                began = time.monotonic()
                body = {"name": f"p{i}", "rules": [rule(rng, feeds, args.every, "2s")]}
                r = await api.post("/api/v1/profiles", json=body, headers=auth)
                if r.status_code != 201:
                    raise BenchError(f"profile creation failed: {r.status_code} {r.text}")
                await asyncio.sleep(max(0.0, spread - (time.monotonic() - began)))
            # The mixing user registers a few feeds of its own to create profiles on.
            mixer = {"Authorization": f"Bearer {mixed_key}"}
            mixed_feeds = []
            for i in range(10):
                r = await api.post("/api/v1/feeds", json={"url": f"{farm.url}/feeds/{i}.xml"}, headers=mixer)
                mixed_feeds.append(str(r.json()["id"]))
            script = work / "mixed.lua"
            script.write_text(MIXED_LUA.replace("{FEEDS}", "{" + ", ".join(f'"{f}"' for f in mixed_feeds) + "}")
                              .replace("{KEY}", mixed_key))
            await asyncio.sleep(args.warmup)
            phases: dict[str, tuple[str, Path | None, str] | None] = {
                "idle": None,
                "profiles": ("/api/v1/profiles", None, key),
                "summary": ("/api/v1/metrics/summary", None, key),
                "mixed": ("/api/v1/profiles", script, mixed_key),
            }
            idle_rate = None
            for name in args.phases:
                spec = phases[name]
                before = parse_metrics((await api.get("/metrics")).text)
                began = time.monotonic()
                wrk: dict[str, Any] = {}
                if spec is None:
                    await asyncio.sleep(args.duration)
                else:
                    path, lua, who = spec
                    wrk = await run_wrk(base + path, who, args.duration, args.connections, lua)
                elapsed = time.monotonic() - began
                after = parse_metrics((await api.get("/metrics")).text)
                probes = after["proxy_budget_used_probes_total"] - before["proxy_budget_used_probes_total"]
                rate = probes / elapsed
                if name == "idle":
                    idle_rate = rate
                share = f"{rate / idle_rate:.1%}" if idle_rate else "n/a"
                p99, ticks = jitter_p99(before, after)
                line = {"phase": name, "probes_per_s": round(rate, 2), "of_idle": share,
                        "jitter_p99": p99, "ticks": ticks, "loadavg": round(os.getloadavg()[0], 2)}
                if wrk:
                    line |= {"rps": wrk["rps"], "p99_ms": round(wrk["p99_ms"], 1),
                             "requests": wrk["requests"], "non2xx": wrk["non2xx"]}
                    if wrk["statuses"]:
                        line["statuses"] = ",".join(f"{k}:{v}" for k, v in sorted(wrk["statuses"].items()))
                    if wrk["socket_errors"]:
                        line["socket_errors"] = wrk["socket_errors"]
                print(" ".join(f"{k}={v}" for k, v in line.items()), flush=True)
        print(f"# serve log: {work / 'serve.log'}; farm {farm.url}", file=sys.stderr)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--database-url", default="", help="default: a SQLite file in a temp directory")
    p.add_argument("--feeds", type=int, default=200)
    p.add_argument("--profiles", type=int, default=50)
    p.add_argument("--every", default="3s", help="how often each profile's rule fires")
    p.add_argument("--publish-every", type=float, default=20.0, help="mean seconds between a feed's entries")
    p.add_argument("--budget", type=int, default=10)
    p.add_argument("--chronon", type=float, default=0.5)
    p.add_argument("--duration", type=float, default=30.0, help="seconds per phase")
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--connections", type=int, default=20)
    p.add_argument("--phases", nargs="+", default=["idle", "profiles", "summary", "mixed"],
                   choices=["idle", "profiles", "summary", "mixed"])
    p.add_argument("--env", nargs="*", default=[], help="extra PROXY_*=value for proxy serve")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
