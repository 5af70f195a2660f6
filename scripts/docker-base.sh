#!/usr/bin/env bash
# Makes the Debian 12 base image docker/Dockerfile builds FROM, offline: no image registry is
# reachable here, so the root file system comes from debootstrap (minbase) out of the Debian
# mirror apt already uses, and `docker import` turns it into an image. Idempotent: an image of
# that name already in the local engine is used as it is.
#   scripts/docker-base.sh [IMAGE]     (default supernode-base:bookworm)
set -euo pipefail
IMAGE="${1:-supernode-base:bookworm}"
SUITE=bookworm

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "docker-base: $IMAGE is there" >&2
  exit 0
fi
# A Debian image the engine already holds will do as well.
for candidate in debian:bookworm-slim debian:bookworm debian:12; do
  if docker image inspect "$candidate" >/dev/null 2>&1; then
    docker tag "$candidate" "$IMAGE"
    echo "docker-base: tagged $candidate as $IMAGE" >&2
    exit 0
  fi
done

# The mirror of the main archive, from the one-line or deb822 sources apt reads.
mirror="$(grep -hsE '^(deb |URIs:)' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
            /etc/apt/sources.list.d/*.sources |
          grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -1 | tr -d ' ' || true)"
mirror="${mirror:-http://deb.debian.org/debian}"
rootfs="$(mktemp -d /tmp/supernode-base.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
echo "docker-base: debootstrap --variant=minbase $SUITE from $mirror" >&2
debootstrap --variant=minbase "$SUITE" "$rootfs" "$mirror" >&2
# Trim what an image never uses: apt lists and caches, docs, man pages.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/doc/* \
  "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
tar -C "$rootfs" -c . | docker import --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
echo "docker-base: made $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)" >&2
