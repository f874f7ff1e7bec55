"""``python -m proxy.bench.peers.table RESULT.json...``: the markdown table of docs/peers.md.

One row per poller of each ``{tag}-peers.json`` that ``proxy bench peers`` wrote, plus the
issue 47 target per run: the proxy's completeness over the best real peer's (at equal feed
GETs) and its bytes per captured CEI against that peer's.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _bytes(n: int) -> str:
    return "-" if n < 0 else f"{n / 1000:.1f} kB"


def _peak(f: dict[str, Any]) -> str:
    """The peak of concurrent requests on one host; "-" when not measured (a replica, an older result)."""
    peak = f.get("peak_per_host", -1)
    return "-" if peak is None or peak < 0 else str(peak)


def _per_cei(f: dict[str, Any]) -> float | None:
    return f["bytes"] / f["captured"] if f["bytes"] >= 0 and f["captured"] else None


def rows(result: dict[str, Any]) -> list[str]:
    """The table rows of one result: each poller, then the target's check."""
    workload = result["workload"]
    # Every trace run is tagged "trace": name it by its file (its description starts "real trace FILE:").
    traced = re.match(r"real trace (\S+):", result.get("description", ""))
    if workload == "trace" and traced:
        workload = Path(traced.group(1)).stem
    name = f"{workload} C{result['tag'].split('-C')[1].split('-')[0]}"
    if "-drop" in result["tag"]:
        name += f", {result['tag'].split('-drop')[1].split('-')[0]} % pings dropped"
    out = []
    for p in result["pollers"]:
        f = p["figures"]
        per = _per_cei(f)
        delay = "/".join("-" if f[k] is None else f"{f[k]:.0f}" for k in ("delay_p50", "delay_p90"))
        out.append(f"| {name} | {p['name']} | {_pct(f['completeness'])} | {f['feed_gets']} | "
                   f"{_pct(f['conditional_share'])} | {_bytes(f['bytes'])} | "
                   f"{'-' if per is None else f'{per:.0f} B'} | {delay} | {_peak(f)} | "
                   f"{_pct(f['entry_completeness'])} |")
    proxy = result["pollers"][0]["figures"]
    peers = [p for p in result["pollers"] if p["name"].startswith("peer ")]
    if peers:
        best = max(peers, key=lambda p: p["figures"]["completeness"])
        bf = best["figures"]
        ratio = proxy["completeness"] / bf["completeness"] if bf["completeness"] else float("inf")
        mine, theirs = _per_cei(proxy), _per_cei(bf)
        cheaper = "-" if mine is None or theirs is None else ("yes" if mine <= theirs else "no")
        out.append(f"| {name} | **proxy / best peer ({best['name'][5:]})** | **{ratio:.2f}x** | | | | "
                   f"no more bytes per CEI: {cheaper} | | | |")
    return out


HEADER = ("| run | poller | CEI completeness | feed GETs | conditional | bytes | bytes per captured CEI "
          "| delay p50/p90 (chronons) | peak per host | entries seen |\n|---|---|---|---|---|---|---|---|---|---|")


def main(paths: list[str]) -> None:
    print(HEADER)
    for path in paths:
        for row in rows(json.loads(Path(path).read_text(encoding="utf-8"))):
            print(row)


if __name__ == "__main__":
    main(sys.argv[1:])
