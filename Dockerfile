# syntax=docker/dockerfile:1
#
# ratebatch container images. Two runtime targets:
#
#   static (default, the last stage)
#       docker build -t ratebatch .
#     CGO_ENABLED=0 with the nonvml tag: a fully static binary on
#     distroless/static, running as the numeric non-root user 65532. NVML is
#     left out, so power.source=nvml fails at start with a clear message; the
#     triton energy source (Triton's nv_energy_consumption, read over HTTP)
#     works. This is the image docker-compose.yml and deploy/kubernetes use.
#
#   nvml
#       docker build --target nvml -t ratebatch:nvml .
#     cgo on, for power.source=nvml on a GPU host: go-nvml loads
#     libnvidia-ml.so.1 at run time, which the NVIDIA container toolkit mounts
#     into the container (docker run --gpus all, or a GPU pod). The binary
#     links glibc dynamically, so the runtime base (distroless/base-debian12,
#     glibc 2.36) must match the builder's Debian release (bookworm): change
#     both together.
#
# Build args: GO_IMAGE picks the builder. The context is the repository root;
# .dockerignore keeps it to the Go sources.
#
# The builder is pinned to the exact Go release of go.mod's toolchain line
# (not a floating golang:1.26), so an image is built with the Go whose
# standard library scripts/vulncheck.sh checked. Pin its digest too where a
# registry can be reached: docker buildx imagetools inspect
# golang:1.26.8-bookworm prints it; append it as golang:1.26.8-bookworm@sha256:...
# and bump tag, digest and toolchain line together.

ARG GO_IMAGE=golang:1.26.8-bookworm

# --- sources and modules, shared by both builds ------------------------------
FROM ${GO_IMAGE} AS source
WORKDIR /src
# Modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download -x
COPY . .

# --- static binary -------------------------------------------------------------
FROM source AS build-static
# -buildvcs=false: .git is not in the build context.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false -tags nonvml \
      -ldflags="-s -w" -o /out/ratebatch ./cmd/ratebatch

# --- cgo binary with NVML ------------------------------------------------------
FROM source AS build-nvml
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath -buildvcs=false \
      -ldflags="-s -w" -o /out/ratebatch ./cmd/ratebatch

# --- runtime: NVML (glibc, non-root) -------------------------------------------
FROM gcr.io/distroless/base-debian12:nonroot AS nvml
COPY --from=build-nvml /out/ratebatch /usr/local/bin/ratebatch
# 8000 and 8001: data ports (Triton's HTTP and gRPC APIs). The binary's own
# defaults are :9000, no gRPC door and 127.0.0.1:9002; the image takes
# Triton's ports and keeps the admin port (/metrics, /status, PUT /policy)
# on the container's loopback: reachable from outside only when a
# configuration says so, as docker-compose.yml's and deploy/kubernetes' do
# (admin_listen 0.0.0.0:9002, kept from clients by their port bindings and
# NetworkPolicy), or --admin-listen 0.0.0.0:9002 with the port published on
# the host's loopback (-p 127.0.0.1:9002:9002). The gRPC upstream defaults
# to the --upstream host's port 8001.
EXPOSE 8000 8001
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ratebatch"]
CMD ["serve", "--listen", ":8000", "--grpc-listen", ":8001", "--admin-listen", "127.0.0.1:9002"]

# --- runtime: static (default target, non-root) ----------------------------------
FROM gcr.io/distroless/static-debian12:nonroot AS static
COPY --from=build-static /out/ratebatch /usr/local/bin/ratebatch
EXPOSE 8000 8001
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ratebatch"]
CMD ["serve", "--listen", ":8000", "--grpc-listen", ":8001", "--admin-listen", "127.0.0.1:9002"]
