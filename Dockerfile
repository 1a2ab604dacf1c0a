# Multi-stage build of a static redlock-operator binary into a minimal non-root image.
FROM rust:1.95-bookworm AS build
RUN rustup target add x86_64-unknown-linux-musl && apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY tests ./tests
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin redlock-operator \
 && cp target/x86_64-unknown-linux-musl/release/redlock-operator /redlock-operator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /redlock-operator /redlock-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/redlock-operator"]
CMD ["run", "--log-format", "json"]
