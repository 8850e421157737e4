# Relay's own image: `relay start` in the foreground, built from this
# repository on Debian 12.
#
#   docker build -t relay:latest .
#   docker build -t relay:latest --build-arg RELAY_SOURCE=<repository URL> \
#       --build-arg RELAY_REVISION="$(git rev-parse HEAD)" .
#
# The build stage compiles with the same Debian packages as a host build
# (scripts/install-deps build); the final stage holds only the shared
# libraries the binary links (scripts/install-deps runtime), tzdata and the
# CA bundle: no compiler, no Docker CLI. Relay reaches the Docker daemon
# through DOCKER_HOST (a socket proxy, see compose.dev.yaml), never through
# a CLI.

FROM debian:bookworm AS build
COPY scripts/install-deps /src/scripts/install-deps
RUN /src/scripts/install-deps build && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY Makefile /src/
COPY src /src/src
RUN make -C /src -j"$(nproc)" all && \
    install -D -s -m 0755 /src/build/relay /out/usr/local/bin/relay && \
    /out/usr/local/bin/relay --version

FROM debian:bookworm-slim
COPY scripts/install-deps /usr/local/lib/relay/install-deps
RUN /usr/local/lib/relay/install-deps runtime && \
    apt-get clean && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log /usr/local/lib/relay && \
    groupadd --system --gid 10000 relay && \
    useradd --system --uid 10000 --gid relay --home-dir /var/lib/relay --no-create-home \
        --shell /usr/sbin/nologin relay && \
    install -d -o relay -g relay -m 0700 /var/lib/relay && \
    install -d -m 0755 /functions
COPY --from=build /out/usr/local/bin/relay /usr/local/bin/relay

# Keep RELAY_VERSION equal to `relay --version` (tests/it/compose.sh checks).
ARG RELAY_VERSION=0.1.0
ARG RELAY_SOURCE=unknown
ARG RELAY_REVISION=unknown
LABEL org.opencontainers.image.title="relay" \
      org.opencontainers.image.description="Event-driven function runner: Redis Stream events to handlers in hardened Docker containers" \
      org.opencontainers.image.version="$RELAY_VERSION" \
      org.opencontainers.image.source="$RELAY_SOURCE" \
      org.opencontainers.image.revision="$RELAY_REVISION" \
      org.opencontainers.image.base.name="debian:bookworm-slim"

# The conventional paths (both have a variable: RELAY_FUNCTIONS_DIR and
# RELAY_DATA_DIR): mount the functions read-only at /functions and a volume
# at /var/lib/relay for the state database, secrets, SSH key and checkout.
VOLUME /var/lib/relay
WORKDIR /var/lib/relay
USER relay

# `relay health` checks what `relay start` needs, with the same environment:
# Redis answers PING and the Docker daemon answers /_ping.
HEALTHCHECK --interval=10s --timeout=10s --start-period=30s --retries=3 \
    CMD ["relay", "health"]

# SIGTERM drains in-flight invocations; give `docker stop -t` enough time
# for the longest handler timeout.
STOPSIGNAL SIGTERM
CMD ["relay", "start"]
