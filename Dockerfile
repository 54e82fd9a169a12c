# Smolder container image: builds `smolder` and `smolder-admin` from this
# source tree on Debian 12 and ships them on debian:12-slim with only the
# shared libraries they load.  Used by deploy/docker-compose and
# deploy/kubernetes (see deploy/README.md).
#
#   docker build -t smolder:0.1.0 .
#   docker run --rm -p 4040:4040 -v smolder-data:/data smolder:0.1.0
#
# The default command is the single binary (-target=all) on :4040 with its
# data in /data; a cluster passes its own flags (-target=ingester, ...).
# The build stage installs the Makefile's DEBIAN_PACKAGES minus golang-go,
# python3, python3-yaml, curl, chromium, nodejs, clang, libclang-rt-14-dev,
# llvm, OpenStack Swift, etcd and Prometheus (tests only) and configures exactly as `make build` does;
# tests/integration/test_deploy.py checks both stay in step.

FROM debian:12 AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      build-essential cmake pkg-config \
      protobuf-c-compiler libprotobuf-c-dev libnng-dev librocksdb-dev \
      libzstd-dev libmicrohttpd-dev liburcu-dev libdeflate-dev libpcre2-dev \
      libxxhash-dev libjansson-dev libyaml-dev zlib1g-dev \
      libcurl4-openssl-dev libxml2-dev libnghttp2-dev libgnutls28-dev \
      libsnappy-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The Makefile's `build` target, limited to the two shipped binaries (the
# unit tests and benchmarks are not needed in the image).
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
 && cmake --build build -j"$(nproc)" --target smolder smolder-admin

FROM debian:12-slim
# The runtime halves of the -dev packages above.  smolder does not load
# libyaml today (--as-needed drops it), but CMake links it for the planned
# YAML config and overrides files, so the image carries it.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libnng1 librocksdb7.8 libzstd1 libmicrohttpd12 liburcu8 libdeflate0 \
      libpcre2-8-0 libxxhash0 libjansson4 libprotobuf-c1 libyaml-0-2 zlib1g \
      libcurl4 libxml2 libnghttp2-14 libgnutls30 libsnappy1v5 \
      ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 smolder \
 && useradd --system --uid 10001 --gid smolder --home-dir /data \
      --no-create-home --shell /usr/sbin/nologin smolder \
 && mkdir -p /data && chown smolder:smolder /data
COPY --from=build /src/build/smolder /src/build/smolder-admin /usr/local/bin/
# Fail the build, not the first start, when a shared library is missing.
RUN ! ldd /usr/local/bin/smolder /usr/local/bin/smolder-admin | grep 'not found' \
 && /usr/local/bin/smolder -help >/dev/null
USER 10001:10001
WORKDIR /data
# 4040: HTTP (ingest, queries, /ready, /metrics); 9095: ingester RPC (nng).
EXPOSE 4040 9095
ENTRYPOINT ["/usr/local/bin/smolder"]
CMD ["-target=all", "-http.listen-address=:4040", "-data.dir=/data"]
