# Stand-in for nats:2.10-alpine: Debian's nats-server as the entry point (the compose file
# passes its flags) and wget for the compose health check.
ARG BASE
FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends nats-server wget \
 && rm -rf /var/lib/apt/lists/*
EXPOSE 4222 8222
ENTRYPOINT ["/usr/sbin/nats-server"]
