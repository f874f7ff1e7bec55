"""`proxy demo` runs the real farm and service together and says what the proxy decides."""

from __future__ import annotations

import io
import re
import socket

import pytest
import structlog

from proxy.ports import free_port
from proxy.service.demo import DemoPrinter, run_demo


def test_printer_renders_probe_and_cei_lines_with_names() -> None:
    out = io.StringIO()
    printer = DemoPrinter(names={3: "mish"}, out=out)
    printer.own_rules({"name": "business analyst", "rules": [{"id": 7}]})
    for event in (
        {"event": "probe", "feed": 3, "chronon": 12, "outcome": "ok", "new_entries": 2, "captured_eis": 1},
        {"event": "cei_captured", "cei": "r7:0", "chronon": 12},
        {"event": "cei_missed", "cei": "r9:4", "chronon": 13},
        {"event": "selected", "feeds": [3], "chronon": 14, "budget": 1},
        {"event": "service_started"},
    ):
        with pytest.raises(structlog.DropEvent):
            printer(None, "info", event)
    lines = out.getvalue().splitlines()
    assert lines == [
        "chronon   12  probe   mish           ok, 2 new, captured 1 EI(s)",
        "chronon   12  CEI r7:0 (business analyst) captured",
        "chronon   13  CEI r9:4 MISSED",
        "chronon   14  decide  probe mish  (budget 1)",
    ]
    assert printer.counts == {"probes": 1, "captured": 1, "missed": 1}


@pytest.mark.slow
async def test_demo_shows_probes_and_ceis_and_prints_key_and_docs(tmp_path) -> None:
    out = io.StringIO()
    port = free_port()
    try:
        counts = await run_demo(port=port, seconds=5.0, chronon=0.2, budget=1, policy="mrsf-p",
                                database=tmp_path / "demo.sqlite3", seed=1, out=out)
    finally:
        structlog.reset_defaults()
    text = out.getvalue()
    assert re.search(r"^API key: \S{20,}$", text, re.M)
    assert f"http://127.0.0.1:{port}/docs" in text
    assert "profile 'business analyst'" in text
    assert counts["probes"] >= 5
    assert re.search(r"probe   mish +ok", text)
    assert counts["captured"] >= 1
    assert counts["captured"] + counts["missed"] == len(re.findall(r"CEI r\d+:\d+ .*(captured|MISSED)$", text, re.M))
    assert (tmp_path / "demo.sqlite3").exists()


@pytest.mark.slow
async def test_demo_takes_a_free_port_when_its_port_is_taken(tmp_path) -> None:
    out = io.StringIO()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            await run_demo(port=port, seconds=0.0, chronon=0.2, budget=1, policy="mrsf-p",
                           database=tmp_path / "demo.sqlite3", seed=1, out=out)
        finally:
            structlog.reset_defaults()
    text = out.getvalue()
    moved = re.search(rf"^port {port} is taken: the demo's API listens on port (\d+) instead$", text, re.M)
    assert moved, text
    other = int(moved.group(1))
    assert other != port
    assert f"http://127.0.0.1:{other}/docs" in text
