#!/usr/bin/env bash
# Builds the stand-in images that the compose test (tests/test_deploy_compose.py) runs on.
#
# No public container registry can be reached from the machines this project is tested on,
# but Debian's package archive can: each stand-in is Debian bookworm (debootstrap) with the
# Debian package of the program the real image ships. The compose file takes every image name
# from a variable (POSTGRES_IMAGE, PROMETHEUS_IMAGE, NATS_IMAGE, PYTHON_IMAGE), so the test
# points those at these images while users get the public ones.
#
#   tests/deploy/standins/build.sh          # builds what is missing or stale, prints the tags
#
# An image is rebuilt only when its inputs change (this folder and the CA bundle): the hash
# of the inputs is the image's label fmp.inputs, so a second run on the same machine costs
# a few `docker image inspect` calls.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${FMP_STANDIN_CACHE:-/var/cache/fmp-standins}"
mirror="${FMP_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ca_bundle="${FMP_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
prefix="fmp-standin"

current() {  # current TAG INPUTS: the image exists and was built from these inputs
  [ "$(docker image inspect -f '{{index .Config.Labels "fmp.inputs"}}' "$1" 2>/dev/null)" = "$2" ]
}
digest() { cat "$@" | sha256sum | cut -c1-16; }

base="$prefix/debian:bookworm"
# The base changes with the CA bundle and the debootstrap steps of this script.
inputs="$(sed -n '/^base=/,/^echo "\$base"/p' "$0" | digest - "$ca_bundle")"
if ! current "$base" "$inputs"; then
  echo "standins: debootstrap bookworm (minbase) into $cache/rootfs" >&2
  mkdir -p "$cache"
  rm -rf "$cache/rootfs"
  debootstrap --variant=minbase bookworm "$cache/rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 \
    || { tail -20 "$cache/debootstrap.log" >&2; exit 1; }
  # No daemon may start inside a build (postinst scripts of postgresql, prometheus, ...).
  printf '#!/bin/sh\nexit 101\n' >"$cache/rootfs/usr/sbin/policy-rc.d"
  chmod 755 "$cache/rootfs/usr/sbin/policy-rc.d"
  # The machine's CA bundle: apt and pip inside builds must trust what the host trusts.
  mkdir -p "$cache/rootfs/etc/ssl/certs"
  cp "$ca_bundle" "$cache/rootfs/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$cache/rootfs/var/cache/apt/archives/"*.deb "$cache/rootfs/var/lib/apt/lists/"*
  tar -C "$cache/rootfs" -c . | docker import \
    --change "LABEL fmp.inputs=$inputs" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
  rm -rf "$cache/rootfs"
fi
echo "$base"

build() {  # build NAME TAG: NAME.Dockerfile from the base, with the CA bundle in its context
  local tag="$prefix/$2" inputs
  # An image changes with its Dockerfile, the scripts beside it and the base.
  inputs="$(docker image inspect -f '{{.Id}}' "$base" | digest "$here/$1.Dockerfile" "$here"/*.sh "$ca_bundle" -)"
  if ! current "$tag" "$inputs"; then
    echo "standins: building $tag" >&2
    local context
    context="$(mktemp -d)"
    cp "$here/$1.Dockerfile" "$context/Dockerfile"
    cp "$here"/*.sh "$context/"
    cp "$ca_bundle" "$context/ca-certificates.crt"
    DOCKER_BUILDKIT=0 docker build --build-arg "BASE=$base" --label "fmp.inputs=$inputs" \
      -t "$tag" "$context" >"$cache/build-$1.log" 2>&1 || { tail -30 "$cache/build-$1.log" >&2; exit 1; }
    rm -rf "$context"
  fi
  echo "$tag"
}

build python python:3.11
build postgres postgres:15
build prometheus prometheus:2
build nats nats:2
