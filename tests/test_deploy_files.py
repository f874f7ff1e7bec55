"""Static checks of the deployment files; tests/test_deploy_compose.py starts them for real.

They parse the YAML, check that the services, ports, volumes, health checks and
environment an operator relies on are there, that the image's command is a
console script of this package, and that every metric the Grafana dashboard
queries is one the service exports. Grafana has no Debian package, so no stand-in
image: the compose test starts everything but Grafana, and these checks are Grafana's.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from proxy.service.metrics import ServiceMetrics

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_compose_has_the_four_services_with_health_checks() -> None:
    services = _compose()["services"]
    default = {name for name, svc in services.items() if not svc.get("profiles")}
    assert default == {"db", "proxy", "prometheus", "grafana"}
    for name, svc in services.items():
        assert "healthcheck" in svc, f"{name} has no healthcheck"
        assert svc["healthcheck"]["test"], name


def test_proxy_waits_for_a_healthy_database_and_is_configured_by_environment() -> None:
    proxy = _compose()["services"]["proxy"]
    assert proxy["depends_on"]["db"]["condition"] == "service_healthy"
    env = proxy["environment"]
    assert env["PROXY_DATABASE_URL"].startswith("postgresql+asyncpg://")
    for name in ("PROXY_CHRONON_SECONDS", "PROXY_BUDGET", "PROXY_POLICY", "PROXY_ALLOW_PRIVATE_NETWORKS"):
        assert name in env
    assert "${PROXY_BIND:-127.0.0.1}:${API_PORT:-8000}:8000" in proxy["ports"]
    assert "/healthz" in " ".join(proxy["healthcheck"]["test"])


def test_named_volumes_are_declared_and_used() -> None:
    compose = _compose()
    declared = set(compose["volumes"])
    assert declared == {"pgdata", "promdata", "grafanadata", "natsdata"}
    used = set()
    for svc in compose["services"].values():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if not src.startswith("."):
                used.add(src)
    assert used == declared
    assert any(v.startswith("pgdata:") for v in compose["services"]["db"]["volumes"])


def test_mounted_config_files_exist() -> None:
    for svc in _compose()["services"].values():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("./"):
                assert (ROOT / src).exists(), src


def test_prometheus_scrapes_the_proxy_metrics_endpoint() -> None:
    prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text(encoding="utf-8"))
    jobs = {job["job_name"]: job for job in prom["scrape_configs"]}
    assert jobs["proxy"]["metrics_path"] == "/metrics"
    assert jobs["proxy"]["static_configs"][0]["targets"] == ["proxy:8000"]


def test_prometheus_sends_the_metrics_token_from_the_compose_secret() -> None:
    prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text(encoding="utf-8"))
    auth = {job["job_name"]: job for job in prom["scrape_configs"]}["proxy"]["authorization"]
    assert auth["type"] == "Bearer"
    compose = _compose()
    secret = Path(auth["credentials_file"])
    assert secret.parent == Path("/run/secrets")  # where compose mounts secrets
    assert secret.name in compose["services"]["prometheus"]["secrets"]
    # A file secret (docker-compose 1.29 knows no other kind), the same file for the proxy.
    assert compose["secrets"][secret.name] == {"file": "./secrets/metrics_token"}
    for name in ("proxy", "scheduler", "worker", "api"):
        service = compose["services"][name]
        assert secret.name in service["secrets"], name
        assert service["environment"]["PROXY_METRICS_TOKEN_FILE"] == str(secret), name
        assert "PROXY_METRICS_TOKEN" not in service["environment"], name
    # `make secrets` makes it, and git never sees it.
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^secrets/metrics_token:", makefile, re.M)
    assert "/secrets/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert "secrets" in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()


# --------------------------------------------------------------------------- safe defaults

_REQUIRED = re.compile(r"\$\{([A-Z0-9_]+):\?[^}]+\}")
_ANY_REF = re.compile(r"\$\{([A-Z0-9_]+)")


def test_published_ports_bind_to_localhost_by_default() -> None:
    published = [(name, port) for name, svc in _compose()["services"].items()
                 for port in svc.get("ports", [])]
    assert {name for name, _ in published} == {"proxy", "prometheus", "grafana", "api"}
    for name, port in published:
        assert isinstance(port, str), f"{name}: write ports as quoted strings"
        host = port.split(":", 1)[0] if port.startswith("127.") else port.split("}", 1)[0] + "}"
        assert host in ("127.0.0.1", "${PROXY_BIND:-127.0.0.1}"), f"{name} publishes {port}"


def _secret_like(key: str) -> bool:
    return any(word in key.upper() for word in ("PASSWORD", "TOKEN", "SECRET"))


def test_no_literal_password_in_compose_and_missing_ones_fail_loudly() -> None:
    services = _compose()["services"]
    secrets = []
    for name, svc in services.items():
        for key, value in svc.get("environment", {}).items():
            if _secret_like(key) and not key.endswith("_FILE"):  # a path, not a secret
                secrets.append(key)
                assert _REQUIRED.fullmatch(str(value)), f"{name}.{key} = {value!r}: use ${{VAR:?…}}"
    assert {"POSTGRES_PASSWORD", "GF_SECURITY_ADMIN_PASSWORD"} <= set(secrets)
    # The database URL's password is the same required variable, not a literal.
    url = services["proxy"]["environment"]["PROXY_DATABASE_URL"]
    credentials = url.split("://", 1)[1].split("@", 1)[0]
    user, password = credentials.split(":", 1)
    assert user == "proxy" and _REQUIRED.fullmatch(password), url
    text = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    assert "admin:admin" not in text and "proxy:proxy@" not in text


def _env_example() -> dict[str, str]:
    values = {}
    for line in (ROOT / ".env.example").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f".env.example: not KEY=value: {line!r}"
            values[key.strip()] = value.strip()
    return values


def test_env_example_lists_every_variable_compose_reads_with_placeholders_only() -> None:
    text = "\n".join(line for line in (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
                     .splitlines() if not line.lstrip().startswith("#"))
    example = _env_example()
    referenced = set(_ANY_REF.findall(text)) | {
        s["environment"] for s in _compose().get("secrets", {}).values() if "environment" in s}
    assert referenced, "compose reads no variable"
    assert referenced <= set(example), f"missing in .env.example: {sorted(referenced - set(example))}"
    for name in set(_REQUIRED.findall(text)):
        # Required ones ship empty, so a copied .env without them fails loudly, never with a
        # well-known default password.
        assert example[name] == "", f"{name} in .env.example should be empty"
    assert example["PROXY_BIND"] == "127.0.0.1"
    comments = (ROOT / ".env.example").read_text(encoding="utf-8")
    assert "cp .env.example .env" in comments and ".gitignore" in comments


def test_env_is_ignored_by_git_and_the_example_is_not() -> None:
    patterns = [line.strip() for line in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()]
    assert ".env" in patterns
    assert not any(p.startswith(".env") and p != ".env" for p in patterns)
    assert not any(p in ("*.example", ".env*", "*") for p in patterns)


def test_grafana_has_no_anonymous_access_and_its_password_comes_from_env() -> None:
    env = _compose()["services"]["grafana"]["environment"]
    assert str(env["GF_AUTH_ANONYMOUS_ENABLED"]).lower() == "false"
    assert str(env["GF_USERS_ALLOW_SIGN_UP"]).lower() == "false"
    assert env["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD:?")


def test_grafana_provisions_prometheus_and_the_dashboard() -> None:
    ds = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text(encoding="utf-8"))
    assert ds["datasources"][0]["url"] == "http://prometheus:9090"
    prov = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards/proxy.yml").read_text(encoding="utf-8"))
    assert prov["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def _worker_metric_names() -> set[str]:
    from proxy.cluster import WorkerMetrics

    return {sample.name for metric in WorkerMetrics().registry.collect()
            for sample in metric.samples}


def _dashboard_metric_names() -> set[str]:
    dash = json.loads((ROOT / "deploy/grafana/dashboards/proxy.json").read_text(encoding="utf-8"))
    names: set[str] = set()
    for panel in dash["panels"]:
        for target in panel.get("targets", []):  # a "row" panel only groups the ones below it
            names.update(re.findall(r"\bproxy_[a-z_]+\b", target["expr"]))
    return names


def test_every_dashboard_metric_is_exported_by_the_service() -> None:
    exported = ServiceMetrics().exported_names() | _worker_metric_names()
    queried = _dashboard_metric_names()
    assert queried, "the dashboard queries no proxy metric"
    assert queried <= exported, f"not exported: {sorted(queried - exported)}"


def test_dashboard_covers_what_operators_watch() -> None:
    queried = _dashboard_metric_names()
    for needed in ("proxy_completeness_ratio", "proxy_chronon_used_probes", "proxy_probes_total",
                   "proxy_probe_duration_seconds_bucket", "proxy_tick_jitter_seconds_bucket",
                   # issue 19: delivery outcomes, latency (resolution to 2xx), outbox backlog
                   "proxy_deliveries_total", "proxy_delivery_latency_seconds_bucket",
                   "proxy_outbox_backlog"):
        assert needed in queried


def test_image_command_is_a_console_script_of_this_package() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    cmd = re.search(r'^CMD \[(.*)\]$', dockerfile, re.M)
    assert cmd is not None
    program = json.loads(f"[{cmd.group(1)}]")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert program[0] in scripts
    assert program[1] == "serve"
    # Not `proxy`: Debian's base-passwd has that user and group (13), so groupadd failed.
    assert "USER fmp" in dockerfile and "--uid 10001" in dockerfile
    assert "groupadd --system proxy" not in dockerfile
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
    assert dockerfile.count("FROM ") >= 2, "multi-stage build expected"
    assert "COPY migrations" in dockerfile


# --------------------------------------------------------------------------- profile scale (issue 21)

def test_the_scale_profile_adds_the_broker_workers_api_replicas_and_a_standby() -> None:
    services = _compose()["services"]
    scale = {name for name, svc in services.items() if "scale" in svc.get("profiles", [])}
    assert scale == {"nats", "scheduler", "worker", "api"}
    assert "-js" in services["nats"]["command"]  # JetStream: jobs survive a broker restart
    assert any(v.startswith("natsdata:") for v in services["nats"]["volumes"])
    for name in ("scheduler", "worker", "api"):
        svc = services[name]
        command = svc["command"]
        assert command[:2] == ["proxy", "serve"] and command[command.index("--role") + 1] == name
        assert svc["depends_on"]["nats"]["condition"] == "service_healthy"
        assert svc["depends_on"]["db"]["condition"] == "service_healthy"
        # One environment for every role: same database, broker and metrics token.
        assert svc["environment"] == services["proxy"]["environment"]
    assert "ports" not in services["worker"]  # `--scale worker=4` must not fight over a port
    assert services["proxy"]["command"][-1] == "${PROXY_ROLE:-all}"


def test_every_role_is_a_valid_serve_role() -> None:
    from proxy.api.roles import ROLES

    services = _compose()["services"]
    for name in ("scheduler", "worker", "api"):
        command = services[name]["command"]
        assert command[command.index("--role") + 1] in ROLES
    assert _env_example()["PROXY_ROLE"] in ROLES


def test_prometheus_scrapes_every_scaled_process_with_the_token() -> None:
    prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text(encoding="utf-8"))
    jobs = {job["job_name"]: job for job in prom["scrape_configs"]}
    for role in ("scheduler", "worker", "api"):
        job = jobs[role]
        assert job["dns_sd_configs"] == [{"names": [role], "type": "A", "port": 8000}]
        assert job["authorization"]["credentials_file"] == "/run/secrets/metrics_token"
        assert job["metrics_path"] == "/metrics"


def test_dashboard_shows_per_role_health() -> None:
    dash = json.loads((ROOT / "deploy/grafana/dashboards/proxy.json").read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert "sum by (job) (up)" in exprs  # processes up, per role (the scrape jobs are roles)
    queried = _dashboard_metric_names()
    for needed in ("proxy_leader", "proxy_worker_jobs_total", "proxy_worker_jobs_redelivered_total",
                   "proxy_worker_broker_connected", "proxy_worker_consumer_repairs_total"):
        assert needed in queried


def test_every_image_comes_from_a_variable_whose_default_is_the_public_image() -> None:
    public = {"db": ("POSTGRES_IMAGE", "postgres:16-alpine"),
              "prometheus": ("PROMETHEUS_IMAGE", "prom/prometheus:v2.54.1"),
              "grafana": ("GRAFANA_IMAGE", "grafana/grafana:11.2.0"),
              "nats": ("NATS_IMAGE", "nats:2.10-alpine")}
    services = _compose()["services"]
    for name, (variable, image) in public.items():
        assert services[name]["image"] == f"${{{variable}:-{image}}}", name
    for name in ("proxy", "scheduler", "worker", "api"):
        assert services[name]["image"] == "${PROXY_IMAGE:-feed-monitoring-proxy:latest}", name
    assert services["proxy"]["build"]["args"]["PYTHON_IMAGE"] == "${PYTHON_IMAGE:-python:3.11-slim}"
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in dockerfile
    assert dockerfile.count("FROM ${PYTHON_IMAGE}") == 2
    # BuildKit's `# syntax=` line would fetch a frontend image from a registry first.
    assert "# syntax=" not in dockerfile
