#!/usr/bin/env bash
# Install the real feed readers `proxy bench peers` runs (issue 47, item 6).
#
# Idempotent and quick when already done: each venv is checked by importing its package and
# skipped when it answers; each Debian package is installed only when its command is missing.
#   FMP_PEERS_DIR   cache folder of the venvs (default ~/.cache/fmp-peers)
#   FMP_PEERS_PYTHON  a Python >= 3.12 (default: the newest pyenv 3.12/3.13, else python3.12/3.13)
# Prints one line per peer: "ok NAME ..." or "fail NAME: why". Exit status 1 if any failed.
set -uo pipefail

DIR="${FMP_PEERS_DIR:-${HOME}/.cache/fmp-peers}"
READER_VERSION=3.27
CDIO_VERSION=0.60.10
mkdir -p "$DIR"
failed=0

find_python() {
  if [ -n "${FMP_PEERS_PYTHON:-}" ]; then echo "$FMP_PEERS_PYTHON"; return; fi
  local root="${PYENV_ROOT:-$HOME/.pyenv}" v
  for v in $(ls -1 "$root/versions" 2>/dev/null | grep -E '^3\.1[2-9]\.[0-9]+$' | sort -V -r); do
    if [ -x "$root/versions/$v/bin/python3" ]; then echo "$root/versions/$v/bin/python3"; return; fi
  done
  for v in python3.13 python3.12; do
    if command -v "$v" >/dev/null 2>&1; then command -v "$v"; return; fi
  done
}

# venv NAME CHECK PIP-ARGS...: a venv under $DIR/NAME whose python passes CHECK (a -c snippet).
venv() {
  local name="$1" check="$2"; shift 2
  local py="$DIR/$name/bin/python"
  if [ -x "$py" ] && "$py" -c "$check" >/dev/null 2>&1; then
    echo "ok $name (already installed in $DIR/$name)"; return 0
  fi
  local base; base="$(find_python)"
  if [ -z "$base" ]; then
    echo "fail $name: no Python >= 3.12 (pyenv install 3.12, or set FMP_PEERS_PYTHON)"; failed=1; return 1
  fi
  rm -rf "$DIR/$name"
  "$base" -m venv "$DIR/$name" \
    && "$py" -m pip install -q --disable-pip-version-check "$@" >"$DIR/$name.log" 2>&1 \
    && "$py" -c "$check" >/dev/null 2>&1 \
    || { echo "fail $name: pip install $* failed (log: $DIR/$name.log)"; failed=1; return 1; }
  echo "ok $name (installed in $DIR/$name with $base)"
}

venv reader "import reader, sys; assert reader.__version__ == '$READER_VERSION'" "reader==$READER_VERSION"
venv changedetection "import changedetectionio, sys; assert changedetectionio.__version__ == '$CDIO_VERSION'" \
  "changedetection.io==$CDIO_VERSION"

# Debian packages: newsboat 2.21, rss2email 3.13, faketime (reader's clock).
missing=()
for pair in newsboat:newsboat rss2email:r2e faketime:faketime; do
  pkg="${pair%%:*}" cmd="${pair##*:}"
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${missing[@]}" >"$DIR/apt.log" 2>&1 \
      || { apt-get update -q >>"$DIR/apt.log" 2>&1 \
           && apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$DIR/apt.log" 2>&1; }
  fi
fi
for pair in newsboat:newsboat rss2email:r2e faketime:faketime; do
  pkg="${pair%%:*}" cmd="${pair##*:}"
  if command -v "$cmd" >/dev/null 2>&1; then
    echo "ok $pkg ($(command -v "$cmd"))"
  else
    echo "fail $pkg: not installed (needs apt-get as root; log: $DIR/apt.log)"; failed=1
  fi
done
exit "$failed"
