# Multi-stage build: wheels are built in a full image, the runtime is slim and runs as non-root.
#
# PYTHON_IMAGE is the base of both stages: the public python:3.11-slim by default; the
# compose test builds on a stand-in made from Debian's packages (tests/deploy/standins).
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
RUN pip install --no-cache-dir --upgrade pip wheel
COPY pyproject.toml README.md ./
COPY proxy ./proxy
# The service only: no `sim` extra (scipy, matplotlib, tqdm serve the simulator and reports).
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PROXY_HOST=0.0.0.0 \
    PROXY_PORT=8000 \
    PROXY_MIGRATIONS_DIR=/app/migrations \
    PROXY_MIGRATE_ON_START=true
# A user of its own, fmp (uid and gid 10001): Debian's base-passwd already has a user and a
# group named `proxy` (13), and a fixed uid lets an operator chown a bind-mounted folder.
RUN groupadd --system --gid 10001 fmp \
 && useradd --system --uid 10001 --gid fmp --home-dir /app --shell /usr/sbin/nologin fmp
WORKDIR /app
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY migrations ./migrations
RUN mkdir -p /app/data && chown -R fmp:fmp /app
USER fmp
EXPOSE 8000
# /healthz (liveness) answers 200 while the process is alive and its chronon loop ticks (503 when the
# loop is stuck); python is used because curl is not in slim images.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status == 200 else 1)"]
# `proxy serve` upgrades the database on start (PROXY_MIGRATE_ON_START).
CMD ["proxy", "serve", "--host", "0.0.0.0", "--port", "8000"]
