#!/usr/bin/env bash
# Starts a dockerd as root when none answers, and `scripts/dockerd-up.sh stop` stops the one this
# script started (never another). Its pid, log and exec root are in /tmp/supernode-dockerd.
# Checked here: Debian's dockerd 20.10 starts in this kind of sandbox with its defaults
# (overlay2, iptables, the docker0 bridge); if it does not, set SUPERNODE_DOCKERD_ARGS to the
# fallbacks it needs, e.g. "--storage-driver vfs --iptables=false --bridge=none".
# Exit 0 when a daemon answers; 1 with the daemon's last log lines when it cannot start.
set -euo pipefail
STATE=/tmp/supernode-dockerd
mkdir -p "$STATE"

if [[ "${1:-}" == stop ]]; then
  if [[ -s "$STATE/dockerd.pid" ]] && kill -0 "$(cat "$STATE/dockerd.pid")" 2>/dev/null; then
    pid="$(cat "$STATE/dockerd.pid")"
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    echo "dockerd-up: stopped the dockerd it started (pid $pid)" >&2
  fi
  rm -f "$STATE/dockerd.pid"
  exit 0
fi

if docker info >/dev/null 2>&1; then exit 0; fi
if [[ $(id -u) != 0 ]]; then echo "dockerd-up: no dockerd answers and this is not root" >&2; exit 1; fi
if ! command -v dockerd >/dev/null; then echo "dockerd-up: no dockerd (scripts/setup.sh installs docker.io)" >&2; exit 1; fi
# shellcheck disable=SC2086 # the fallbacks are words
setsid dockerd --exec-root "$STATE/exec" ${SUPERNODE_DOCKERD_ARGS:-} >"$STATE/dockerd.log" 2>&1 &
echo $! >"$STATE/dockerd.pid"
for _ in $(seq 1 150); do
  if docker info >/dev/null 2>&1; then echo "dockerd-up: started dockerd (pid $(cat "$STATE/dockerd.pid"))" >&2; exit 0; fi
  kill -0 "$(cat "$STATE/dockerd.pid")" 2>/dev/null || break
  sleep 0.2
done
echo "dockerd-up: dockerd did not start; its log ends:" >&2
tail -5 "$STATE/dockerd.log" >&2
exit 1
