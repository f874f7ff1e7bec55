"""``/metrics`` by Prometheus' conventions, and totals that survive a restart (issue 23)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client import generate_latest

from proxy import __version__
from proxy.farm import FeedFarm
from proxy.service.metrics import ServiceMetrics
from tests.test_e2e_support import e2e_settings, eventually, motivating, parse_metrics, running


def test_names_follow_prometheus_conventions() -> None:
    text = generate_latest(ServiceMetrics().registry).decode()
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert not [n for n in names if n.endswith("_created")]
    assert "proxy_completeness_ratio" in names and "proxy_completeness" not in names
    assert {"proxy_chronon_budget_probes", "proxy_chronon_used_probes"} <= names
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "python_info"} <= names
    assert re.search(rf'^proxy_build_info\{{.*version="{re.escape(__version__)}".*\}} 1\.0$', text, re.M)
    # Every proxy counter ends in _total, every gauge of a share in _ratio.
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    for name, kind in types.items():
        if name.startswith("proxy_") and kind == "counter":
            assert f"{name}_total" in names or name.endswith("_total"), name


def test_restored_totals_are_counted_once() -> None:
    m = ServiceMetrics()
    m.restore_totals({"ok": 5, "http_error": 2}, 7, 10, {"captured": 3, "missed": 1, "pending": 4},
                     {"delivered": 6, "retry": 2})
    m.restore_totals({"ok": 50}, 70, 100, {"captured": 30}, {"delivered": 60})  # the lease lost and won again: no-op
    m.show_ceis({"captured": 1, "missed": 0, "pending": 2})
    text = parse_metrics(generate_latest(m.registry).decode())
    assert text['proxy_probes_total{outcome="ok"}'] == 5
    assert text['proxy_probes_total{outcome="http_error"}'] == 2
    assert text["proxy_budget_used_probes_total"] == 7
    assert text['proxy_deliveries_total{outcome="delivered"}'] == 6
    assert text['proxy_deliveries_total{outcome="retry"}'] == 2
    assert text['proxy_deliveries_total{outcome="gone"}'] == 0
    assert text["proxy_budget_offered_probes_total"] == 10
    assert text['proxy_ceis{state="captured"}'] == 4
    assert text['proxy_ceis{state="missed"}'] == 1
    assert text['proxy_ceis{state="pending"}'] == 2  # pending CEIs are the engine's (restored into it)
    assert text["proxy_completeness_ratio"] == 0.8


@pytest.mark.slow
async def test_totals_survive_a_restart(sqlite_url: str) -> None:
    settings = e2e_settings(sqlite_url)
    async with FeedFarm(["mish", "cnn", "money"], prefill=2) as farm:
        async with running(settings) as px:
            ids = [(await px.post("/api/v1/feeds", {"url": farm.url(n)})).json()["id"]
                   for n in ("mish", "cnn", "money")]
            body = motivating(*ids, every="1s", slack="1s", within="1s")
            assert (await px.post("/api/v1/profiles", body)).status_code == 201

            async def some() -> dict[str, float] | None:
                m = parse_metrics((await px.client.get("/metrics")).text)
                return m if m['proxy_ceis{state="captured"}'] >= 2 else None

            await eventually(some, within=60, what="captured CEIs")
            await px.service.flush()
            before: dict[str, Any] = parse_metrics((await px.client.get("/metrics")).text)
            stored = await px.service.store.metric_totals()
        async with running(settings) as px:
            after = parse_metrics((await px.client.get("/metrics")).text)
    # At least what the database held at the first stop (the second process may have ticked on).
    assert after['proxy_probes_total{outcome="ok"}'] >= stored.probes.get("ok", 0) > 0
    assert after["proxy_budget_used_probes_total"] >= stored.budget_used > 0
    assert after["proxy_budget_offered_probes_total"] >= stored.budget_offered > 0
    assert after['proxy_ceis{state="captured"}'] >= stored.ceis["captured"] >= before['proxy_ceis{state="captured"}']
    assert 0 < after["proxy_completeness_ratio"] <= 1


@pytest.mark.slow
async def test_delivery_totals_survive_a_restart(sqlite_url: str) -> None:
    from tests.receiver import Receiver
    from tests.test_e2e_delivery import FAST_RETRIES, setup_profile

    settings = e2e_settings(sqlite_url, **FAST_RETRIES)
    async with FeedFarm(["blog"], prefill=2) as farm, Receiver(mode="ok") as rx:
        async with running(settings) as px:
            await setup_profile(px, farm, [{"webhook": rx.url}])

            async def some() -> dict[str, float] | None:
                m = parse_metrics((await px.client.get("/metrics")).text)
                return m if m['proxy_deliveries_total{outcome="delivered"}'] >= 2 else None

            before = await eventually(some, within=30, what="delivered notifications")
        # Stopped: what the rows say now is what the next process starts from.
        async with running(settings) as px:
            stored = (await px.service.store.metric_totals()).deliveries
            after = parse_metrics((await px.client.get("/metrics")).text)
    assert stored["delivered"] >= before['proxy_deliveries_total{outcome="delivered"}'] >= 2
    assert after['proxy_deliveries_total{outcome="delivered"}'] >= stored["delivered"]
