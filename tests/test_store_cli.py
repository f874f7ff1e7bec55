"""``proxy db upgrade`` and ``proxy users create`` through the real Typer app."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from proxy.cli import app
from proxy.store import Store, current_revision
from proxy.store.migrate import head_revision


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    import os

    for name in list(os.environ):
        if name.startswith("PROXY_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return CliRunner()


async def _authenticate(url: str, key: str) -> int | None:
    async with Store.from_url(url) as store:
        return await store.authenticate(key)


def test_users_create_prints_the_key_alone_on_the_last_line(
    runner: CliRunner, database_url: str
) -> None:
    result = runner.invoke(app, ["users", "create", "alice", "--database-url", database_url])
    assert result.exit_code == 0, result.output
    key = result.stdout.strip().splitlines()[-1]
    assert key == key.strip() and " " not in key and len(key) >= 40
    assert asyncio.run(_authenticate(database_url, key)) is not None


def test_users_create_twice_fails_clearly(runner: CliRunner, database_url: str) -> None:
    assert (
        runner.invoke(app, ["users", "create", "bob", "--database-url", database_url]).exit_code
        == 0
    )
    again = runner.invoke(app, ["users", "create", "bob", "--database-url", database_url])
    assert again.exit_code == 1
    assert "already exists" in again.stderr
    assert again.stdout == ""


def test_users_create_reads_the_environment_and_migrates_a_fresh_database(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'new' / 'proxy.sqlite3'}"
    monkeypatch.setenv("PROXY_DATABASE_URL", url)
    result = runner.invoke(app, ["users", "create", "carol"])
    assert result.exit_code == 0, result.output
    assert asyncio.run(_authenticate(url, result.stdout.splitlines()[-1])) is not None


def test_default_database_lives_under_data(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "data" / "proxy.sqlite3").is_file()
    assert f"revision {head_revision()}" in result.stdout


def test_db_upgrade_with_url_option(runner: CliRunner, sqlite_url: str) -> None:
    result = runner.invoke(app, ["db", "upgrade", "--database-url", sqlite_url])
    assert result.exit_code == 0, result.output
    head = head_revision()
    assert head is not None and head != "0001"  # the newest migration, not the first
    assert asyncio.run(current_revision(sqlite_url)) == head
    current = runner.invoke(app, ["db", "current", "--database-url", sqlite_url])
    assert current.stdout.strip() == head


def test_invalid_settings_stop_the_command(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROXY_BUDGET", "0")
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code == 1
    assert "PROXY_BUDGET" in result.stderr


def _key_of(result: object) -> str:
    return result.stdout.strip().splitlines()[-1]  # type: ignore[attr-defined]


async def _make_profile(url: str, user_id: int) -> None:
    from proxy.store import RuleInput

    async with Store.from_url(url) as store:
        await store.create_profile(user_id, "kept", [RuleInput("r", {"watch": {}})])


def test_users_list_rotate_delete(runner: CliRunner, database_url: str) -> None:
    db = ["--database-url", database_url]
    first = _key_of(runner.invoke(app, ["users", "create", "dora", *db]))
    runner.invoke(app, ["users", "create", "ed", *db])

    listed = runner.invoke(app, ["users", "list", *db])
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.strip().splitlines()
    assert [line.split("\t")[1] for line in lines] == ["dora", "ed"]
    assert f"1 active key(s): {first[:8]}" in lines[0]
    assert first not in listed.stdout  # only the prefix is ever shown

    kept = runner.invoke(app, ["users", "rotate", "dora", "--keep-old", *db])
    assert kept.exit_code == 0, kept.output
    second = _key_of(kept)
    assert asyncio.run(_authenticate(database_url, first)) is not None
    rotated = runner.invoke(app, ["users", "rotate", "dora", *db])
    assert "(2 old key(s) revoked)" in rotated.stdout
    third = _key_of(rotated)
    assert asyncio.run(_authenticate(database_url, first)) is None
    assert asyncio.run(_authenticate(database_url, second)) is None
    dora = asyncio.run(_authenticate(database_url, third))
    assert dora is not None

    missing = runner.invoke(app, ["users", "rotate", "nobody", *db])
    assert missing.exit_code == 1 and "user 'nobody' not found" in missing.stderr

    # A user with profiles is kept: the running service must drop them through the API.
    asyncio.run(_make_profile(database_url, dora))
    refused = runner.invoke(app, ["users", "delete", "dora", "--yes", *db])
    assert refused.exit_code == 1 and "'kept'" in refused.stderr
    assert asyncio.run(_authenticate(database_url, third)) == dora

    gone = runner.invoke(app, ["users", "delete", "ed", "--yes", *db])
    assert gone.exit_code == 0, gone.output
    names = [line.split("\t")[1] for line in runner.invoke(app, ["users", "list", *db]).stdout.strip().splitlines()]
    assert names == ["dora"]
