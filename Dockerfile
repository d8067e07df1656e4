# syntax=docker/dockerfile:1
# The `gateway` and `valkyrie` binaries in a slim image that runs as a non-root user; the
# image of the Helm chart (helm/). Build: docker build -t dedup-gateway:0.1.0 .
#
# Build stage: the workspace's rust-version (Cargo.toml) and its lock file, release profile.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
# Cache mounts keep the registry and the build between image builds; the binaries are
# copied out of the cached target folder, which is not part of the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p gateway -p valkyrie \
 && install -D -m 0755 -t /out target/release/gateway target/release/valkyrie

# Runtime stage: the same Debian release as the build stage (glibc), no compiler.
FROM debian:bookworm-slim
# uid/gid 10001: the chart's gateway.podSecurityContext. Storage nodes run valkyrie as
# nginx's uid instead (the disk's owner), which the chart sets.
RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid gateway --home-dir /var/lib/gateway \
        --no-create-home --shell /usr/sbin/nologin gateway \
 && install -d -o gateway -g gateway -m 0750 /var/lib/gateway
COPY --from=build /out/gateway /out/valkyrie /usr/local/bin/
USER 10001:10001
WORKDIR /var/lib/gateway
EXPOSE 9000
# The embedded single node, reachable from outside the container; the chart passes its
# own command (config file, node id, peers).
CMD ["gateway", "serve", "--listen", "0.0.0.0:9000", "--data", "/var/lib/gateway"]
