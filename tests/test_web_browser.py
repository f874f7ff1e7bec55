"""The web interface in a real browser (issue 20): Debian's Chromium driven by Playwright,
against the real service (loop, fetcher, store) polling the local feed farm over HTTP.

One scenario, in the order a person would go: sign in, add three feeds, build a two-feed
rule with the form, see its CEI captured on the timeline with the entry it brought, see
the failing feed explained, import an OPML file, look at the overview, sign out. Each page
is saved as a screenshot under the test's output directory (``tmp_path``, or
``PROXY_UI_SCREENSHOTS`` when set: ``docs/img/ui-timeline.png`` comes from there).

Playwright's own browser download cannot work on this machine; the test launches
``/usr/bin/chromium`` (``.ci/run`` installs the ``chromium`` package) and is skipped, saying
so, only where that executable is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import uvicorn

from proxy.api import make_app
from proxy.farm import FeedFarm
from tests.test_e2e_support import e2e_settings, running

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# Generous: the machine is shared and loaded; these bound waits, they measure nothing.
WAIT_MS = 60_000


@asynccontextmanager
async def _serve(app: object) -> AsyncIterator[int]:
    """Uvicorn on a free port (port 0) in this event loop; yields the port."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")  # type: ignore[arg-type]
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(400):
            if server.started:
                break
            await asyncio.sleep(0.05)
        assert server.started, "uvicorn did not start"
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await task


def _shots(tmp_path: Path) -> Path:
    out = Path(os.environ.get("PROXY_UI_SCREENSHOTS") or tmp_path / "screenshots")
    out.mkdir(parents=True, exist_ok=True)
    return out


async def test_a_person_uses_the_web_interface(sqlite_url: str, tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (/usr/bin/chromium missing; `apt-get install -y "
                    "chromium`, as .ci/run does): the browser tests cannot run here")
    playwright_api = pytest.importorskip("playwright.async_api")
    shots = _shots(tmp_path)
    settings = e2e_settings(sqlite_url, budget=4)
    async with FeedFarm(["mish", "cnn", "broken", "money"], prefill=2) as farm, running(settings) as px:
        farm.set_fault("broken", "error500")
        app = make_app(settings, service=px.service, manage_service=False)
        async with _serve(app) as port, playwright_api.async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1200, "height": 900})
                page.set_default_timeout(WAIT_MS)
                # localhost: a secure context, so the Secure session cookie is kept over HTTP.
                base = f"http://localhost:{port}/ui"

                # Sign in.
                await page.goto(base)
                await page.screenshot(path=shots / "sign-in.png", full_page=True)
                await page.fill("input[name=name]", "alice")
                await page.fill("input[name=key]", px.key)
                await page.click("#sign-in button")
                await page.wait_for_url(f"{base}/overview")
                assert await page.text_content("#user") == "alice"
                cookies = {c["name"]: c for c in await page.context.cookies()}
                assert cookies["proxy_ui_session"]["httpOnly"] is True
                assert cookies["proxy_ui_session"]["secure"] is True

                # Add three feeds with the form.
                await page.goto(f"{base}/feeds")
                for name in ("mish", "cnn", "broken"):
                    await page.fill("#add-feed input[name=url]", farm.url(name))
                    await page.click("#add-feed button")
                    await page.wait_for_selector("#message")
                    assert "added" in (await page.text_content("#message") or "")
                ids = {name: f.feed.id for name, f in zip(
                    ("mish", "cnn", "broken"), await px.service.store.list_registered_feeds(1), strict=True)}

                # Build a two-feed rule with the form: trigger "mish" on "oil", then "cnn".
                await page.goto(f"{base}/profiles")
                await page.fill("input[name=name]", "oil watch")
                await page.fill("input[name='rules.0.name']", "oil news")
                await page.select_option("select[name='rules.0.trigger.feed']", str(ids["mish"]))
                await page.check("input[name=schedule][value=every]")
                await page.fill("input[name='rules.0.trigger.every']", "1s")
                await page.fill("input[name='rules.0.trigger.slack']", "1s")
                await page.fill("input[name='rules.0.trigger.when.contains']", "oil, crude")
                await page.select_option("select[name='rules.0.query.0.feed']", str(ids["cnn"]))
                await page.fill("input[name='rules.0.query.0.within']", "2s")
                await page.screenshot(path=shots / "profiles-builder.png", full_page=True)
                await page.click("#builder button[type=submit]")
                await page.wait_for_url(re.compile(r".*/ui/profiles/\d+$"))
                profile_url = page.url

                # See it captured on the farm: publish "oil" until a CEI of two EIs is captured.
                captured = "g.cei-captured[data-eis='2']"  # trigger and query EI (rank-1 CEIs have one)
                for attempt in range(60):
                    farm.publish("mish", title=f"Oil prices jump {attempt}", summary="crude oil")
                    await asyncio.sleep(1.0)
                    await page.goto(profile_url)
                    if await page.locator(captured).count():
                        break
                assert await page.locator(captured).count() >= 1, await page.content()
                cei = page.locator(captured).first
                assert await cei.locator("rect.ei-captured").count() == 2
                assert await cei.locator("path.capture").count() == 2
                assert "Oil prices jump" in (await page.text_content("main") or "")

                # "cnn" fails: the next oil CEI is missed, drawn in red.
                farm.set_fault("cnn", "error500")
                missed = "g.cei-missed rect.ei-missed"
                for attempt in range(60):
                    farm.publish("mish", title=f"Oil again {attempt}", summary="oil")
                    await asyncio.sleep(1.0)
                    await page.goto(profile_url)
                    if await page.locator(missed).count():
                        break
                assert await page.locator(missed).first.get_attribute("fill") == "#c62828"
                farm.clear_fault("cnn")
                await page.locator("#timeline").screenshot(path=shots / "profile-timeline.png")
                await page.screenshot(path=shots / "profile.png", full_page=True)
                await page.select_option("#state-filter select", "captured")
                await page.wait_for_url(re.compile(r".*state=captured$"))
                assert await page.locator("g.cei-missed").count() == 0
                assert await page.locator("g.cei-pending").count() == 0
                assert await page.locator("g.cei-captured").count() >= 1

                # A second profile with the JSON editor (feed ids as numbers) reads the broken feed.
                await page.goto(f"{base}/profiles")
                await page.fill("#json-editor textarea", json.dumps(
                    {"name": "broken watch", "rules": [{"name": "b", "trigger": {"feed": ids["broken"], "every": "1s"},
                                                        "query": [{"feed": ids["cnn"], "within": "1s"}]}]}))
                await page.click("#json-editor button")
                await page.wait_for_url(re.compile(r".*/ui/profiles/\d+$"))

                # The failing feed, explained in words.
                async def broken_probed() -> bool:
                    feed = (await px.service.store.get_registered_feed(1, ids["broken"])).feed
                    return feed.last_outcome == "http_error"

                for _ in range(120):
                    if await broken_probed():
                        break
                    await asyncio.sleep(0.5)
                await page.goto(f"{base}/feeds")
                why = await page.text_content(f"tr[data-feed='{ids['broken']}'] td.why") or ""
                assert "The server answered with an HTTP error (500)" in why, why
                assert await page.locator(f"tr.failing[data-feed='{ids['broken']}']").count() == 1
                assert await page.locator(f"tr.healthy[data-feed='{ids['mish']}']").count() == 1
                await page.screenshot(path=shots / "feeds.png", full_page=True)
                await page.click(f"tr[data-feed='{ids['broken']}'] a")
                assert await page.locator("#probes tr.http_error").count() >= 1
                await page.screenshot(path=shots / "feed.png", full_page=True)

                # Import an OPML file (a nested folder, one refused URL).
                opml = tmp_path / "subscriptions.opml"
                opml.write_text(
                    '<?xml version="1.0"?><opml version="2.0"><head><title>s</title></head><body>'
                    f'<outline text="folder"><outline text="money" type="rss" xmlUrl="{farm.url("money")}"/>'
                    f'<outline text="mish" type="rss" xmlUrl="{farm.url("mish")}"/></outline>'
                    '<outline text="ftp" type="rss" xmlUrl="ftp://127.0.0.1/x.xml"/></body></opml>',
                    encoding="utf-8")
                await page.goto(f"{base}/feeds")
                await page.set_input_files("#opml-import input[type=file]", opml)
                await page.click("#opml-import button")
                await page.wait_for_selector("#opml-report")
                assert "OPML imported: 1 added, 1 known, 1 refused." in (await page.text_content("#message") or "")
                assert await page.locator("#opml-report tr.refused").count() == 1
                await page.screenshot(path=shots / "opml-import.png", full_page=True)

                # The overview: budget per chronon, completeness, policy; its live part refreshes.
                await page.goto(f"{base}/overview")
                assert await page.text_content("#policy") == "mrsf-p"
                assert await page.locator("svg.budget rect.used").count() >= 1
                assert await page.locator("svg.completeness polyline").count() == 1
                # Live: the script refetches the live part; the chronon it names moves on by itself.
                first = await page.text_content("#live-chronon")
                await page.wait_for_function(
                    "first => document.getElementById('live-chronon').textContent !== first", arg=first)
                await page.screenshot(path=shots / "overview.png", full_page=True)

                # Sign out: back to the sign-in form; the pages want a session again.
                await page.click("#sign-out")
                await page.wait_for_selector("#sign-in")
                await page.goto(f"{base}/feeds")
                assert await page.locator("#sign-in").count() == 1
                await page.screenshot(path=shots / "signed-out.png", full_page=True)
            finally:
                await browser.close()
    for name in ("sign-in", "profiles-builder", "profile-timeline", "profile", "feeds", "feed",
                 "opml-import", "overview", "signed-out"):
        assert (shots / f"{name}.png").stat().st_size > 1000, name


async def test_a_person_tests_an_alert_on_the_feed_before_creating_it(sqlite_url: str, tmp_path: Path) -> None:
    """The builder's alert kind (no query rows), its `all` / `exclude` / fields inputs, and
    "Test on the feed now": the entry the rule would match is marked, with why."""
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (/usr/bin/chromium missing; `apt-get install -y "
                    "chromium`, as .ci/run does): the browser tests cannot run here")
    playwright_api = pytest.importorskip("playwright.async_api")
    shots = _shots(tmp_path)
    settings = e2e_settings(sqlite_url, budget=4)
    async with FeedFarm(["mish"]) as farm, running(settings) as px:
        r = await px.post("/api/v1/feeds", {"url": farm.url("mish")})
        assert r.status_code == 201, r.text
        mish = r.json()["id"]
        farm.publish("mish", title="Opinion: oil is over", summary="a column")
        farm.publish("mish", title="Markets", summary="crude oil steady")
        farm.publish("mish", title="Oil jumps to $90", summary="news")
        app = make_app(settings, service=px.service, manage_service=False)
        async with _serve(app) as port, playwright_api.async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1200, "height": 900})
                page.set_default_timeout(WAIT_MS)
                base = f"http://localhost:{port}/ui"
                await page.goto(base)
                await page.fill("input[name=name]", "alice")
                await page.fill("input[name=key]", px.key)
                await page.click("#sign-in button")
                await page.wait_for_url(f"{base}/overview")

                await page.goto(f"{base}/profiles")
                await page.check("input[name=kind][value=alert]")
                # An alert has no query feeds: their fieldset goes, the trigger's stays.
                assert await page.is_hidden("select[name='rules.0.query.0.feed']")
                assert await page.is_visible("select[name='rules.0.trigger.feed']")
                await page.fill("input[name=name]", "alerts")
                await page.fill("input[name='rules.0.name']", "oil in titles")
                await page.select_option("select[name='rules.0.trigger.feed']", str(mish))
                await page.check("input[name=schedule][value=on]")
                await page.fill("input[name='rules.0.trigger.when.contains']", "oil")
                await page.fill("input[name='rules.0.trigger.when.exclude']", "opinion")
                await page.uncheck("input[name='rules.0.trigger.when.fields'][value=summary]")
                await page.click("#try-rule")
                await page.wait_for_selector("#dry-run")
                await page.screenshot(path=shots / "profiles-dry-run.png", full_page=True)
                marked = page.locator("#dry-run tr.match")
                assert await marked.count() == 1
                assert "Oil jumps to $90" in (await marked.inner_text())
                assert "“oil” in title" in (await marked.locator("td.why").inner_text())
                unmarked = await page.locator("#dry-run tr.no-match").all_inner_texts()
                assert len(unmarked) == 2 and any("Markets" in t for t in unmarked)
                # The form kept what was typed; creating it stores the alert.
                assert await page.is_checked("input[name=kind][value=alert]")
                assert not await page.is_checked("input[name='rules.0.trigger.when.fields'][value=summary]")
                await page.click("#builder button[type=submit]")
                await page.wait_for_url(re.compile(r".*/ui/profiles/\d+$"))
                (profile,) = await px.service.store.list_profiles(1)
                (rule,) = profile.rules
                assert rule.spec["trigger"]["when"] == {"contains": ["oil"], "exclude": ["opinion"],
                                                        "fields": ["title"]}
                assert not rule.spec.get("query")
            finally:
                await browser.close()
