"""The compose deployment, started for real: images built, containers up, a rule captured.

Issue 42: the deployment had only ever been checked statically, and it was broken for
every user. This test runs what the README's deployment section says, with Docker and the
compose generations that Debian ships (docker-compose 1.29) and Compose v2, on stand-in
images built from Debian's packages (``tests/deploy/standins/build.sh``): no public
registry can be reached here. The compose file takes every image name from a variable,
so the test changes nothing in it but those variables, the published ports (free ones)
and the chronon (short, so that rules fire in seconds).

What it checks, in order, on one compose project (docker-compose 1.29):

1. ``up -d --build db proxy prometheus farm``: the proxy becomes healthy and migrated;
2. ``exec proxy proxy users create``; feeds from the farm container; a rule over the API
   fires and its CEI is captured;
3. Prometheus's HTTP API shows ``proxy_build_info`` scraped with the token (``up`` is 1);
4. ``restart proxy`` while probing: ``proxy db check`` is clean, nothing acknowledged lost;
5. ``down`` then ``up``: profiles and CEIs kept by the volume;
6. ``stop proxy`` drains inside ``stop_grace_period`` and exits 0;
7. profile ``scale`` (NATS, two workers, a standby scheduler): ``docker kill`` the
   leader, the standby leads within 3 chronons and probes keep flowing through workers.

Then Compose v2 runs steps 1 to 3 on a project of its own. Both need Docker: without it
the tests are skipped, unless ``PROXY_REQUIRE_DOCKER=1`` (``.ci/run``), then they fail.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.ports import free_port
from tests.proc_support import poll_until

# Images are built from Debian's packages on a machine's first run: past the suite's 15 minutes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[1]
STANDINS = ROOT / "tests" / "deploy" / "standins" / "build.sh"
OVERRIDE = ROOT / "tests" / "deploy" / "compose.test.yml"
# What the image's build context and the compose file need; copied, so that the test's
# secrets/ and .env never touch the checkout.
PROJECT_FILES = ("docker-compose.yml", "Dockerfile", ".dockerignore", "pyproject.toml",
                 "README.md", "proxy", "migrations", "deploy")
CHRONON = 1.0          # seconds, steps 1 to 6
SCALE_CHRONON = 5.0    # seconds, step 7: the lease's TTL is two chronons, at least 10 s
GRACE = 40.0           # the proxy's stop_grace_period in docker-compose.yml


def _need_docker() -> None:
    problem = None
    for tool in ("docker", "docker-compose", "debootstrap"):
        if shutil.which(tool) is None:
            problem = f"{tool} is not installed"
    if problem is None:
        info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, text=True, timeout=60, check=False)
        if info.returncode != 0:
            problem = f"no Docker engine answers: {info.stderr.strip()[:200]}"
    if problem is None:
        return
    if os.environ.get("PROXY_REQUIRE_DOCKER") == "1":
        pytest.fail(f"{problem} (PROXY_REQUIRE_DOCKER=1)")
    pytest.skip(problem)


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    """The stand-in images' tags, built (or found current) once per run."""
    _need_docker()
    built = subprocess.run(["bash", str(STANDINS)], capture_output=True, text=True,
                           timeout=1200, check=False)
    assert built.returncode == 0, f"stand-in images failed to build:\n{built.stderr[-3000:]}"
    # Each run's proxy image is removed with its project; what its builds leave untagged
    # (the build stage) is the layer cache of the next run, kept for a day.
    subprocess.run(["docker", "image", "prune", "-f", "--filter", "until=24h"],
                   capture_output=True, check=False, timeout=300)
    tags = built.stdout.split()
    by_name = {tag.split("/", 1)[1].split(":", 1)[0]: tag for tag in tags}
    assert {"python", "postgres", "prometheus", "nats"} <= set(by_name), tags
    return by_name


class Compose:
    """One compose project in a folder of its own, driven through one compose generation."""

    def __init__(self, command: list[str], folder: Path, images: dict[str, str]) -> None:
        self.command = command
        self.folder = folder
        self.project = f"fmp{secrets.token_hex(4)}"
        self.api_port, self.prom_port, self.farm_port = free_port(), free_port(), free_port()
        self.env = {
            **{k: v for k, v in os.environ.items()
               if not k.startswith(("PROXY_", "COMPOSE_", "DOCKER_BUILDKIT"))},
            "COMPOSE_PROJECT_NAME": self.project,
            # The legacy builder: BuildKit's first step is to fetch its frontend image.
            "DOCKER_BUILDKIT": "0",
            "COMPOSE_DOCKER_CLI_BUILD": "0",
            "PYTHON_IMAGE": images["python"],
            "POSTGRES_IMAGE": images["postgres"],
            "PROMETHEUS_IMAGE": images["prometheus"],
            "NATS_IMAGE": images["nats"],
            "PROXY_IMAGE": f"fmp-ci/proxy:{self.project}",
            "API_PORT": str(self.api_port),
            "PROMETHEUS_PORT": str(self.prom_port),
            "FARM_PORT": str(self.farm_port),
            "PROXY_CHRONON_SECONDS": str(CHRONON),
            "PROXY_ALLOW_PRIVATE_NETWORKS": "true",  # the farm is a container on this network
        }
        for name in PROJECT_FILES:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, folder / name,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(source, folder / name)
        shutil.copy2(OVERRIDE, folder / "compose.test.yml")
        # The operator's steps, as the README gives them: .env from the example, then
        # `make secrets` (here its two lines, the Makefile's recipe).
        example = (ROOT / ".env.example").read_text(encoding="utf-8")
        self.postgres_password = secrets.token_hex(12)
        env_file = re.sub(r"(?m)^POSTGRES_PASSWORD=$", f"POSTGRES_PASSWORD={self.postgres_password}",
                          example)
        env_file = re.sub(r"(?m)^GRAFANA_ADMIN_PASSWORD=$",
                          f"GRAFANA_ADMIN_PASSWORD={secrets.token_hex(12)}", env_file)
        (folder / ".env").write_text(env_file, encoding="utf-8")
        (folder / "secrets").mkdir(mode=0o700)
        self.token = secrets.token_hex(24)
        token_file = folder / "secrets" / "metrics_token"
        token_file.write_text(self.token + "\n", encoding="utf-8")
        token_file.chmod(0o644)

    def run(self, *args: str, timeout: float = 300, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.command, "-f", "docker-compose.yml", "-f", "compose.test.yml", *args],
            cwd=self.folder, env={**self.env, **(env or {})}, capture_output=True, text=True,
            timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(self.command)} {' '.join(args)} exited {done.returncode}:\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        return done

    def container(self, service: str) -> str:
        ids = self.run("ps", "-q", service).stdout.split()
        assert len(ids) == 1, f"{service}: {len(ids)} containers"
        return ids[0]

    def health(self, service: str) -> str:
        out = subprocess.run(
            ["docker", "inspect", "-f", "{{if .State.Health}}{{.State.Health.Status}}{{end}}",
             self.container(service)], capture_output=True, text=True, check=True, timeout=60)
        return out.stdout.strip()

    def wait_healthy(self, *services: str, within: float = 180) -> None:
        for service in services:
            ok = poll_until(lambda s=service: self.health(s) == "healthy", within=within,
                            every=1.0)
            assert ok, f"{service} not healthy within {within:.0f} s:\n{self.logs(service)}"

    def logs(self, service: str = "") -> str:
        done = self.run("logs", "--no-color", "--tail", "80", *([service] if service else []),
                        check=False, timeout=60)
        return done.stdout[-6000:]

    def sql(self, query: str) -> str:
        return self.run("exec", "-T", "db", "psql", "-U", "proxy", "-d", "proxy", "-tAc",
                        query).stdout.strip()

    def exec_in(self, service: str, *command: str, check: bool = True,
                ) -> subprocess.CompletedProcess[str]:
        return self.run("exec", "-T", service, *command, check=check)

    def down(self) -> None:
        self.run("--profile", "scale", "down", "-v", "--remove-orphans", "-t", "5",
                 check=False, timeout=300)
        subprocess.run(["docker", "image", "rm", "-f", self.env["PROXY_IMAGE"]],
                       capture_output=True, check=False, timeout=120)


def _compose(command: list[str], tmp_path_factory: pytest.TempPathFactory,
             images: dict[str, str]) -> Iterator[Compose]:
    project = Compose(command, tmp_path_factory.mktemp("compose"), images)
    try:
        yield project
    finally:
        project.down()


def _http(method: str, url: str, *, key: str | None = None, body: Any = None,
          headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def _answers(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return _http("GET", url)[0] == 200
        except OSError:
            return False
    return check


class Deployment:
    """The API as a user sees it on the published port, and the farm's control API."""

    def __init__(self, compose: Compose) -> None:
        self.compose = compose
        self.api = f"http://127.0.0.1:{compose.api_port}"
        self.farm = f"http://127.0.0.1:{compose.farm_port}"
        self.key = ""

    def create_user(self, name: str) -> None:
        out = self.compose.exec_in("proxy", "proxy", "users", "create", name).stdout
        self.key = out.strip().splitlines()[-1]

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return _http(method, self.api + path, key=self.key, body=body)

    def add_feed(self, name: str) -> str:
        status, feed = self.call("POST", "/api/v1/feeds", {"url": f"http://farm:8080/feeds/{name}.xml"})
        assert status in (200, 201), feed
        return str(feed["id"])

    def add_profile(self) -> str:
        mish, cnn, money = (self.add_feed(name) for name in ("mish", "cnn", "money"))
        status, profile = self.call("POST", "/api/v1/profiles", {
            "name": "business analyst",
            "rules": [{"name": "oil news",
                       "trigger": {"feed": mish, "every": "3s", "slack": "3s",
                                   "when": {"contains": ["oil"]}},
                       "query": [{"feed": cnn, "within": "20s"},
                                 {"feed": money, "within": "20s"}]}]})
        assert status == 201, profile
        return str(profile["id"])

    def publish(self, feed: str, title: str) -> None:
        status, body = _http("POST", f"{self.farm}/_farm/feeds/{feed}/publish",
                             body={"title": title, "summary": f"{title}: crude oil"})
        assert status in (200, 201), body

    def captured(self, profile: str) -> list[dict[str, Any]]:
        status, page = self.call("GET", f"/api/v1/profiles/{profile}/ceis?state=captured&limit=500")
        assert status == 200, page
        return [cei for cei in page["items"] if cei.get("fired")]

    def fire_and_capture(self, profile: str, title: str, within: float = 90) -> list[dict[str, Any]]:
        before = {cei["id"] for cei in self.captured(profile)}
        self.publish("mish", title)
        ok = poll_until(lambda: {c["id"] for c in self.captured(profile)} - before != set(),
                        within=within, every=1.0)
        assert ok, f"no CEI captured within {within:.0f} s of '{title}':\n{self.compose.logs('proxy')}"
        return self.captured(profile)


def _start_and_capture(compose: Compose) -> tuple[Deployment, str]:
    """Steps 1 to 3: build and start, a user, a rule captured, Prometheus scraped."""
    compose.run("up", "-d", "--build", "db", "proxy", "prometheus", "farm", timeout=900)
    compose.wait_healthy("db", "proxy")
    deployment = Deployment(compose)
    assert poll_until(_answers(deployment.api + "/readyz"), within=60), compose.logs("proxy")
    assert poll_until(_answers(deployment.farm + "/_farm/health"), within=60), compose.logs("farm")
    # Migrated on start: the database is at this release's head.
    heads = [p.stem.split("_", 1)[0] for p in (ROOT / "migrations" / "versions").glob("0*.py")]
    current = compose.exec_in("proxy", "proxy", "db", "current").stdout.strip()
    assert current.startswith(max(heads)), current

    deployment.create_user("alice")
    profile = deployment.add_profile()
    # The rule's first probes set its baseline; a post about oil then fires it.
    assert poll_until(lambda: int(compose.sql("SELECT count(*) FROM probes") or 0) >= 3,
                      within=60), compose.logs("proxy")
    deployment.fire_and_capture(profile, "Oil prices jump")

    # Prometheus scrapes /metrics with the token from the same secret file.
    prometheus = f"http://127.0.0.1:{compose.prom_port}"

    def scraped() -> bool:
        try:
            status, body = _http("GET", prometheus + "/api/v1/query?query=proxy_build_info")
        except OSError:
            return False
        return status == 200 and any(r["metric"].get("job") == "proxy"
                                     for r in body["data"]["result"])
    assert poll_until(scraped, within=90, every=2.0), compose.logs("prometheus")
    status, up = _http("GET", prometheus + '/api/v1/query?query=up{job="proxy"}')
    assert status == 200 and up["data"]["result"][0]["value"][1] == "1", up
    # ... and the token is what lets it in.
    assert _http("GET", deployment.api + "/metrics")[0] == 401
    assert _http("GET", deployment.api + "/metrics",
                 headers={"Authorization": f"Bearer {compose.token}"})[0] == 200
    return deployment, profile


@pytest.fixture(scope="module")
def compose_v1(tmp_path_factory: pytest.TempPathFactory,
               images: dict[str, str]) -> Iterator[Compose]:
    yield from _compose(["docker-compose"], tmp_path_factory, images)


@pytest.fixture(scope="module")
def compose_v2(tmp_path_factory: pytest.TempPathFactory,
               images: dict[str, str]) -> Iterator[Compose]:
    version = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True,
                             check=False, timeout=60)
    if version.returncode != 0:
        problem = f"Compose v2 (`docker compose`) is missing: {version.stderr.strip()[:200]}"
        if os.environ.get("PROXY_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{problem} (PROXY_REQUIRE_DOCKER=1)")
        pytest.skip(problem)
    yield from _compose(["docker", "compose"], tmp_path_factory, images)


def test_both_compose_generations_accept_the_file(
    compose_v1: Compose, compose_v2: Compose
) -> None:
    for compose in (compose_v1, compose_v2):
        for profile in ([], ["--profile", "scale"]):
            compose.run(*profile, "config", "-q")
        # Every image is the variable's: nothing is pulled from a registry.
        config = compose.run("--profile", "scale", "config").stdout
        for name in ("POSTGRES_IMAGE", "PROMETHEUS_IMAGE", "NATS_IMAGE", "PROXY_IMAGE"):
            assert f"image: {compose.env[name]}" in config, name


def test_the_deployment_runs_restarts_keeps_its_data_and_fails_over(compose_v1: Compose) -> None:
    compose = compose_v1
    deployment, profile = _start_and_capture(compose)

    # 4. Restart while probing: the database stays consistent, nothing acknowledged is lost.
    acknowledged = {cei["id"] for cei in deployment.captured(profile)}
    probes_before = int(compose.sql("SELECT count(*) FROM probes"))
    compose.run("restart", "proxy", timeout=120)
    compose.wait_healthy("proxy")
    assert poll_until(_answers(deployment.api + "/readyz"), within=60), compose.logs("proxy")
    check = compose.exec_in("proxy", "proxy", "db", "check", check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "ok: all" in check.stdout
    assert acknowledged <= {cei["id"] for cei in deployment.captured(profile)}
    assert poll_until(lambda: int(compose.sql("SELECT count(*) FROM probes")) > probes_before + 3,
                      within=60), "no probes after the restart"
    deployment.fire_and_capture(profile, "Oil again after the restart")

    # 5. down, then up: the volume keeps profiles and CEIs.
    kept = {cei["id"] for cei in deployment.captured(profile)}
    compose.run("down", "-t", "45", timeout=300)
    compose.run("up", "-d", "db", "proxy", "prometheus", "farm", timeout=300)
    compose.wait_healthy("db", "proxy")
    assert poll_until(_answers(deployment.api + "/readyz"), within=60), compose.logs("proxy")
    status, body = deployment.call("GET", f"/api/v1/profiles/{profile}")
    assert status == 200 and body["name"] == "business analyst", body
    assert kept <= {cei["id"] for cei in deployment.captured(profile)}

    # 6. stop drains inside stop_grace_period and exits 0.
    container = compose.container("proxy")
    started = time.monotonic()
    compose.run("stop", "proxy", timeout=GRACE + 60)
    took = time.monotonic() - started
    state = json.loads(subprocess.run(["docker", "inspect", "-f", "{{json .State}}", container],
                                      capture_output=True, text=True, check=True).stdout)
    assert state["ExitCode"] == 0 and not state["OOMKilled"], state
    assert took < GRACE, f"stop took {took:.1f} s: the grace period ran out (SIGKILL)"

    # 7. Scaled out: the proxy service leads as a scheduler, a standby waits, two workers probe.
    scale = {"PROXY_ROLE": "scheduler", "PROXY_BROKER_URL": "nats://nats:4222",
             "PROXY_CHRONON_SECONDS": str(SCALE_CHRONON)}
    compose.run("--profile", "scale", "up", "-d", "--scale", "worker=2",
                "db", "nats", "proxy", "scheduler", "worker", env=scale, timeout=300)
    compose.wait_healthy("nats", "proxy", "scheduler")
    workers = compose.run("ps", "-q", "worker").stdout.split()
    assert len(workers) == 2, workers

    def role(service: str) -> str | None:
        done = compose.exec_in(service, "python", "-c", (
            "import json, urllib.request, urllib.error\n"
            "try:\n"
            "    r = urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=3)\n"
            "except urllib.error.HTTPError as e:\n"
            "    r = e\n"
            "print(json.loads(r.read())['role'])"), check=False)
        return done.stdout.strip() if done.returncode == 0 else None

    assert poll_until(lambda: {role("proxy"), role("scheduler")} == {"leader", "standby"},
                      within=60), compose.logs()
    leader, standby = ("proxy", "scheduler") if role("proxy") == "leader" else ("scheduler", "proxy")

    def worker_jobs() -> float:
        total = 0.0
        for container in workers:
            metrics = subprocess.run(
                ["docker", "exec", container, "python", "-c",
                 "import urllib.request; t = open('/run/secrets/metrics_token').read().strip();"
                 "r = urllib.request.Request('http://127.0.0.1:8000/metrics',"
                 " headers={'Authorization': 'Bearer ' + t});"
                 "print(urllib.request.urlopen(r, timeout=3).read().decode())"],
                capture_output=True, text=True, check=True, timeout=60).stdout
            total += sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                         if line.startswith("proxy_worker_jobs_total{"))
        return total

    assert poll_until(lambda: worker_jobs() > 0, within=60), compose.logs("worker")
    jobs_before_kill = worker_jobs()
    subprocess.run(["docker", "kill", compose.container(leader)], check=True,
                   capture_output=True, timeout=60)
    killed = time.monotonic()
    assert poll_until(lambda: role(standby) == "leader", within=10 * SCALE_CHRONON,
                      every=0.5), compose.logs(standby)
    took_over = time.monotonic() - killed
    assert took_over <= 3 * SCALE_CHRONON, (
        f"the standby led {took_over:.1f} s after the kill: more than 3 chronons")
    # Probes keep flowing, through the workers.
    probes = int(compose.sql("SELECT count(*) FROM probes"))
    assert poll_until(lambda: int(compose.sql("SELECT count(*) FROM probes")) > probes,
                      within=6 * SCALE_CHRONON), compose.logs(standby)
    assert poll_until(lambda: worker_jobs() > jobs_before_kill, within=6 * SCALE_CHRONON)


def test_compose_v2_starts_the_same_deployment(compose_v2: Compose) -> None:
    deployment, profile = _start_and_capture(compose_v2)
    assert deployment.captured(profile)
