# syntax=docker/dockerfile:1.7
#
# One image, one binary: `toolgate controller`, `toolgate webhook` and
# `toolgate sidecar` are subcommands of /usr/local/bin/toolgate.
#
#   docker build -t ghcr.io/toolgate/toolgate:0.1.0 .
#
# The chart (charts/toolgate) runs this image for the controller Deployment
# and injects it as the sidecar unless `sidecar.image` says otherwise.

ARG RUST_IMAGE=rust:1-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS build
WORKDIR /src
# Everything the `toolgate` package needs to compile: the workspace manifest
# and lock file, every member crate (cargo reads all of their manifests and
# declared bench targets), the SQL migrations embedded by `sqlx::migrate!`
# and the example profiles embedded by `toolgate demo`.
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY migrations ./migrations
COPY examples ./examples
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p toolgate \
 && install -D -m 0755 target/release/toolgate /out/toolgate \
 && /out/toolgate --version

FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="toolgate" \
      org.opencontainers.image.description="Policy gate for AI agent tool calls: controller, admission webhooks and sidecar" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/toolgate /usr/local/bin/toolgate
# distroless :nonroot is uid/gid 65532; the chart and the injected sidecar
# run with readOnlyRootFilesystem and write only to mounted volumes.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/toolgate"]
CMD ["--help"]
