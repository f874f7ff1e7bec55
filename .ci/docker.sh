#!/usr/bin/env bash
# Docker for the compose test (tests/test_deploy_compose.py, issue 42): Debian's docker.io
# (the engine), docker-compose 1.29 and debootstrap (the stand-in images) when missing,
# Compose v2 as a CLI plugin, and dockerd started when none answers. Idempotent: a second
# run on the same machine only checks. Prints what it did on stderr; exits non-zero when
# Docker cannot be had, which the test then reports (PROXY_REQUIRE_DOCKER=1).
set -euo pipefail

say() { echo "ci/docker: $*" >&2; }
apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1; }
}

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt_install "${missing[@]}"
fi

# Compose v2: bookworm ships only 1.29; Debian's next release packages v2 as a static CLI
# plugin. Fetched with apt from that release's archive (signatures checked by apt), only
# the plugin binary is kept; nothing of the machine's apt configuration changes.
plugin_dir=/usr/local/lib/docker/cli-plugins
if ! docker compose version >/dev/null 2>&1; then
  say "installing Compose v2 (Debian trixie's docker-compose) as a CLI plugin"
  work="$(mktemp -d)"
  mkdir -p "$work/lists/partial" "$work/archives/partial"
  echo "deb http://deb.debian.org/debian trixie main" >"$work/sources.list"
  opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=-
        -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives"
        -o Dir::State::Status=/dev/null -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -q >/dev/null
  (cd "$work" && apt-get "${opts[@]}" download docker-compose >/dev/null)
  dpkg-deb -x "$work"/docker-compose_*.deb "$work/x"
  mkdir -p "$plugin_dir"
  install -m 755 "$work/x/usr/libexec/docker/cli-plugins/docker-compose" "$plugin_dir/docker-compose"
  rm -rf "$work"
fi

if ! docker info >/dev/null 2>&1; then
  say "starting dockerd"
  mkdir -p /var/log
  nohup dockerd >/var/log/dockerd-ci.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { tail -20 /var/log/dockerd-ci.log >&2; exit 1; }
fi
say "$(docker version --format 'engine {{.Server.Version}}'), $(docker-compose version --short), compose v2 $(docker compose version --short)"
