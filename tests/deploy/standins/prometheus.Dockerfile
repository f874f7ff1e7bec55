# Stand-in for prom/prometheus: Debian's prometheus with the official image's defaults
# (config in /etc/prometheus/prometheus.yml, storage in /prometheus, user nobody) and wget
# for the compose health check.
ARG BASE
FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus wget \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /prometheus && chown nobody:nogroup /prometheus
USER nobody
VOLUME /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
