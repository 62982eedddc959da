# The sluice proxy as a container image:
#   docker build -t sluice .
#   docker run --rm -p 5060:5060/udp -p 127.0.0.1:9090:9090 sluice          # the image's config
#   docker run --rm -p 5060:5060/udp -p 127.0.0.1:9090:9090 \
#       -v "$PWD/proxy.toml:/etc/sluice/proxy.toml:ro" sluice               # your own
# The image's config is examples/proxy.toml listening on 0.0.0.0 with the admin endpoint
# (/metrics, /status) on 0.0.0.0:9090. A config of your own must listen on 0.0.0.0 (or the
# container's address) too, or the published ports reach nothing.

# The toolchain CI tests with; Cargo.lock needs 1.88 or newer. The builder's Debian release
# must match the runtime's, whose glibc the binary links against.
ARG RUST_VERSION=1.95
FROM rust:${RUST_VERSION}-slim-bookworm AS builder
WORKDIR /src
COPY . .
# The caches keep the registry and the dependencies' builds across rebuilds of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release -p sluice-cli --locked \
    && install -D -m 0755 target/release/sluice /out/sluice
# Inside a container the proxy must listen on every interface to be reachable through the
# published ports. The check fails the build if the example's lines stop matching.
RUN sed -e 's/^listen = "[^"]*"/listen = "0.0.0.0:5060"/' \
        -e 's/^# admin = "[^"]*"/admin = "0.0.0.0:9090"/' \
        examples/proxy.toml > /out/proxy.toml \
    && /out/sluice proxy --config /out/proxy.toml --print-config > /out/effective.toml \
    && grep -qx 'listen = "0.0.0.0:5060"' /out/effective.toml \
    && grep -qx 'admin = "0.0.0.0:9090"' /out/effective.toml

FROM debian:bookworm-slim
# A fixed numeric id, so that orchestrators can check that the image does not run as root.
RUN groupadd --gid 10001 sluice \
    && useradd --uid 10001 --gid sluice --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin sluice
COPY --from=builder /out/sluice /usr/local/bin/sluice
COPY --from=builder /out/proxy.toml /etc/sluice/proxy.toml
USER 10001:10001
# SIP over UDP, and the admin HTTP endpoint.
EXPOSE 5060/udp 9090/tcp
# The proxy drains on SIGTERM: new INVITEs get 503 while running transactions finish for up
# to shutdown_grace_s (5 s in the image's config, within `docker stop`'s default 10 s).
STOPSIGNAL SIGTERM
# bash's /dev/tcp: the slim image has no HTTP client. Needs the admin endpoint on port 9090.
HEALTHCHECK --interval=30s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9090 && printf 'GET /status HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && read -r _ code _ <&3 && [ \"$code\" = 200 ]"]
ENTRYPOINT ["sluice"]
CMD ["proxy", "--config", "/etc/sluice/proxy.toml"]
