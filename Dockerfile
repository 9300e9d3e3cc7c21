# syntax=docker/dockerfile:1
#
# backstream as a small static image: a CGO_ENABLED=0 build on the Go image,
# copied onto distroless/static (CA certificates, tzdata, no shell) running as
# the image's non-root user (uid 65532). Data lives on /data: mount a volume
# there. `docker run IMAGE` runs `backstream serve`; any other subcommand is
# `docker run IMAGE status --json` / `docker run IMAGE devnet ...`.
#
# The Go version follows go.mod's `go` directive (deploy/compose_test.go
# checks it).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/backstream ./cmd/backstream \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/backstream /usr/local/bin/backstream
# An empty /data owned by the runtime user: a fresh named volume mounted there
# takes this ownership, so the non-root process can write to it.
COPY --from=build --chown=65532:65532 /out/data /data
ENV BACKSTREAM_DATA_DIR=/data
USER 65532:65532
WORKDIR /data
# The public listener. The admin listener (/metrics, /debug/pprof/, the
# checkpoint endpoint) binds 127.0.0.1:6009 by default; set
# BACKSTREAM_ADMIN_LISTEN=:6009 for a scraper on the container network (as
# docker-compose.yml does) and never publish it.
EXPOSE 6008
VOLUME ["/data"]
ENTRYPOINT ["backstream"]
CMD ["serve"]
