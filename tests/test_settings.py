"""Settings: defaults, environment overrides, and errors that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.errors import ProxyError
from proxy.settings import (
    GROUPS,
    SPEC_POLICY_NAMES,
    Settings,
    SettingsError,
    env_name,
    known_policy_names,
    load_settings,
    settings_by_group,
    settings_table_markdown,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No PROXY_* from the developer's shell, and no .env from the checkout."""
    import os

    for name in list(os.environ):
        if name.startswith("PROXY_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_defaults() -> None:
    s = load_settings()
    assert s.database_url == "sqlite+aiosqlite:///./data/proxy.sqlite3"
    assert (s.chronon_seconds, s.budget, s.policy) == (60.0, 10, "adm-edf")
    assert s.allow_private_networks is False
    assert (s.host, s.port) == ("127.0.0.1", 8000)
    assert s.migrate_on_start is True
    assert s.log_format == "console" and s.log_level == "INFO"
    assert s.is_sqlite


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXY_DATABASE_URL", "postgresql+asyncpg://u:p@db:5432/proxy")
    monkeypatch.setenv("PROXY_CHRONON_SECONDS", "0.05")
    monkeypatch.setenv("PROXY_BUDGET", "3")
    monkeypatch.setenv("PROXY_POLICY", "s-edf-np")
    monkeypatch.setenv("PROXY_ALLOW_PRIVATE_NETWORKS", "true")
    monkeypatch.setenv("PROXY_LOG_LEVEL", "debug")
    monkeypatch.setenv("PROXY_LOG_FORMAT", "json")
    monkeypatch.setenv("PROXY_MIGRATE_ON_START", "false")
    s = load_settings()
    assert s.database_url == "postgresql+asyncpg://u:p@db:5432/proxy"
    assert (s.chronon_seconds, s.budget, s.policy) == (0.05, 3, "s-edf-np")
    assert s.allow_private_networks is True
    assert (s.log_level, s.log_format, s.migrate_on_start) == ("DEBUG", "json", False)
    assert not s.is_sqlite


def test_overrides_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXY_BUDGET", "3")
    assert load_settings(budget=7).budget == 7


def test_dotenv_file_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("PROXY_BUDGET=4\nUNRELATED=1\n", encoding="utf-8")
    assert load_settings().budget == 4


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///./x.db", "sqlite+aiosqlite:///./x.db"),
        ("postgresql://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("postgres://u:p%40ss@h/db", "postgresql+asyncpg://u:p%40ss@h/db"),
    ],
)
def test_plain_dialects_map_to_async_drivers(url: str, expected: str) -> None:
    assert load_settings(database_url=url).database_url == expected


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("PROXY_BUDGET", "0", "greater than or equal to 1"),
        ("PROXY_BUDGET", "many", "valid integer"),
        ("PROXY_CHRONON_SECONDS", "0", "greater than or equal to 0.01"),
        ("PROXY_CHRONON_SECONDS", "-1", "greater than or equal to 0.01"),
        ("PROXY_POLICY", "fastest", "unknown policy 'fastest'"),
        ("PROXY_PORT", "70000", "less than or equal to 65535"),
        ("PROXY_DATABASE_URL", "mysql://u@h/db", "unsupported database"),
        ("PROXY_DATABASE_URL", "nonsense", "not a database URL"),
        ("PROXY_DATABASE_URL", "sqlite+aiosqlite://", "SQLite needs a file path"),
        ("PROXY_LOG_FORMAT", "xml", "'json' or 'console'"),
        ("PROXY_LOG_LEVEL", "LOUD", "unknown log level"),
        ("PROXY_ALLOW_PRIVATE_NETWORKS", "maybe", "valid boolean"),
        ("PROXY_PER_HOST_CONCURRENCY", "0", "greater than or equal to 1"),
        ("PROXY_MAX_BODY_BYTES", "10", "greater than or equal to 1024"),
        ("PROXY_RETENTION_DAYS", "-1", "greater than or equal to 0"),
        # Issue 24.3: numeric settings within sane ranges, refused at start naming the variable.
        ("PROXY_CHRONON_SECONDS", "0.000001", "greater than or equal to 0.01"),
        ("PROXY_CHRONON_SECONDS", "0.009", "greater than or equal to 0.01"),
        ("PROXY_CHRONON_SECONDS", "1e9", "less than or equal to 86400"),
        ("PROXY_CHRONON_SECONDS", "nan", "finite number"),
        ("PROXY_PER_HOST_MIN_DELAY_SECONDS", "inf", "finite number"),
        ("PROXY_BUDGET", "1000001", "less than or equal to 100000"),
        ("PROXY_RETENTION_DAYS", "99999999", "less than or equal to 36500"),
        ("PROXY_PROBE_PROCESSES", "100000", "less than or equal to 256"),
        ("PROXY_MAX_BODY_BYTES", "99999999999999", "less than or equal to 1073741824"),
        ("PROXY_HTTP_TOTAL_TIMEOUT_SECONDS", "0.0001", "greater than or equal to 0.01"),
        ("PROXY_HTTP_CONNECT_TIMEOUT_SECONDS", "1e12", "less than or equal to 3600"),
        ("PROXY_DELIVERY_POLL_SECONDS", "0", "greater than or equal to 0.01"),
        ("PROXY_DELIVERY_CONCURRENCY", "1000000", "less than or equal to 10000"),
        ("PROXY_LEASE_TTL_SECONDS", "-5", "greater than or equal to 0"),
        ("PROXY_SSE_KEEPALIVE_SECONDS", "0.000001", "greater than or equal to 0.01"),
        ("PROXY_PING_RATE_PER_MINUTE", "0", "greater than or equal to 0.01"),
        ("PROXY_PING_BURST", "0", "greater than or equal to 1"),
    ],
)
def test_invalid_values_name_the_variable_and_reason(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, reason: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert f"{variable}:" in message
    assert reason in message
    assert isinstance(info.value, ProxyError)


def test_every_invalid_variable_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXY_BUDGET", "0")
    monkeypatch.setenv("PROXY_PORT", "0")
    with pytest.raises(SettingsError, match=r"PROXY_BUDGET: .*PROXY_PORT: "):
        load_settings()


def test_unknown_override_is_refused() -> None:
    with pytest.raises(SettingsError, match="budgett"):
        load_settings(budgett=3)


def test_policy_names_come_from_the_registry_or_the_spec() -> None:
    names = known_policy_names()
    assert "mrsf-p" in names
    assert len(set(names)) == len(names)
    from proxy.core.policies import policy_names

    assert names == tuple(policy_names())
    assert set(SPEC_POLICY_NAMES) <= set(names), "the fallback list must not accept unknown names"
    for name in names:
        assert load_settings(policy=name).policy == name


def test_settings_table_lists_every_variable_with_a_description() -> None:
    table = settings_table_markdown()
    rows = [line for line in table.splitlines() if line.startswith("| `PROXY_")]
    assert len(rows) == len(Settings.model_fields)
    assert table.count("| Variable | Default | Description |") == len(GROUPS)
    for required in (
        "PROXY_DATABASE_URL",
        "PROXY_CHRONON_SECONDS",
        "PROXY_BUDGET",
        "PROXY_POLICY",
        "PROXY_ALLOW_PRIVATE_NETWORKS",
        "PROXY_MIGRATE_ON_START",
    ):
        assert f"| `{required}` |" in table
    for name, field in Settings.model_fields.items():
        assert field.description, f"{name} has no description"
    assert "| `PROXY_BUDGET` | `10` |" in table
    assert "| `PROXY_ALLOW_PRIVATE_NETWORKS` | `false` |" in table


def test_configuration_doc_is_up_to_date() -> None:
    doc = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
    assert settings_table_markdown() in doc.read_text(encoding="utf-8"), (
        "docs/configuration.md is stale: regenerate the table with `.venv/bin/python -m proxy.settings`"
    )


def test_user_agent_names_the_project_and_is_header_safe() -> None:
    from proxy import PROJECT_URL, __version__

    default = load_settings().user_agent
    assert default.startswith(f"feed-monitoring-proxy/{__version__} ") and PROJECT_URL in default
    assert load_settings(user_agent="acme-reader/2 (+mailto:ops@example.org)").user_agent == (
        "acme-reader/2 (+mailto:ops@example.org)")
    for bad in ("", "   ", "evil\r\nX-Injected: 1", "caf\u00e9"):
        with pytest.raises(SettingsError, match="PROXY_USER_AGENT"):
            load_settings(user_agent=bad)


def test_the_fetcher_sends_the_configured_user_agent() -> None:
    from proxy.service.service import fetcher_settings

    settings = load_settings(user_agent="acme-reader/2 (+https://acme.example/bot)")
    assert fetcher_settings(settings).user_agent == "acme-reader/2 (+https://acme.example/bot)"
def test_bounds_accept_their_limits() -> None:
    """The bounds are inclusive: a 10 ms chronon and the largest budget start."""
    settings = load_settings(chronon_seconds=0.01, budget=100_000, retention_days=36500)
    assert (settings.chronon_seconds, settings.budget, settings.retention_days) == (0.01, 100_000, 36500)


def test_serve_refuses_a_microsecond_chronon_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """`proxy serve` exits with status 2 naming the variable before opening anything."""
    from typer.testing import CliRunner

    from proxy.cli import app

    monkeypatch.setenv("PROXY_CHRONON_SECONDS", "0.000001")
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 2
    assert "PROXY_CHRONON_SECONDS: Input should be greater than or equal to 0.01" in result.output


def test_the_metrics_token_can_come_from_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "metrics_token"
    secret.write_text("s3cret-token\nignored second line\n", encoding="utf-8")
    monkeypatch.setenv("PROXY_METRICS_TOKEN_FILE", str(secret))
    token = load_settings().metrics_token
    assert token is not None and token.get_secret_value() == "s3cret-token"
    # An empty PROXY_METRICS_TOKEN= line beside it is "unset", as everywhere else.
    monkeypatch.setenv("PROXY_METRICS_TOKEN", "")
    token = load_settings().metrics_token
    assert token is not None and token.get_secret_value() == "s3cret-token"


@pytest.mark.parametrize(
    ("content", "also_env", "expected"),
    [
        (None, None, "cannot read it"),
        ("\n", None, "is empty"),
        ("abc\n", "other", "not both"),
    ],
)
def test_a_bad_metrics_token_file_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    content: str | None, also_env: str | None, expected: str,
) -> None:
    secret = tmp_path / "metrics_token"
    if content is not None:
        secret.write_text(content, encoding="utf-8")
    monkeypatch.setenv("PROXY_METRICS_TOKEN_FILE", str(secret))
    if also_env is not None:
        monkeypatch.setenv("PROXY_METRICS_TOKEN", also_env)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "PROXY_METRICS_TOKEN_FILE" in str(caught.value) and expected in str(caught.value)


def test_every_setting_is_in_exactly_one_group_and_keeps_its_flat_name() -> None:
    """The groups (issue 46) partition the settings: none lost, none twice, names unchanged."""
    seen: list[str] = []
    for title, names in settings_by_group():
        assert title and names, f"group {title!r} is empty"
        seen += names
    assert sorted(seen) == sorted(Settings.model_fields)
    assert len(seen) == len(set(seen))
    assert env_name("budget") == "PROXY_BUDGET"
    # A group's validator still runs through the composed class, under the flat env name.
    with pytest.raises(SettingsError, match="PROXY_BROKER_URL"):
        load_settings(broker_url="http://not-nats.example")
