# Multi-stage build of a static (musl) redlock-operator binary into a minimal non-root image:
# the final stage has no shell, no package manager and no libc, only the binary on top of
# distroless/static (CA certificates, /etc/passwd with the nonroot user, tzdata).
FROM rust:1.95-bookworm AS build
RUN rustup target add x86_64-unknown-linux-musl \
 && apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The workspace manifest names tests/testenv and the benches: cargo needs them present to
# load it, even though only the operator binary is built.
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY tests ./tests
COPY benches ./benches
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin redlock-operator \
 && cp target/x86_64-unknown-linux-musl/release/redlock-operator /redlock-operator

# distroless/static: no shell; :nonroot's user is 65532, repeated numerically below so that
# `runAsNonRoot` can verify it without a passwd lookup.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /redlock-operator /redlock-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/redlock-operator"]
CMD ["run", "--log-format", "json"]
