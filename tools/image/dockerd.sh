#!/usr/bin/env bash
# A Docker daemon of the project's own, for building and testing the product image: Debian's
# docker.io dockerd, its data, state, socket and log under .cache/docker (ignored), started by hand
# (no systemd) and stopped by its PID. It makes no bridge and no iptables rules on the machine:
# builds and containers use the host's network (docker build/run --network host) or none.
#
#   tools/image/dockerd.sh start   start it unless it runs; print its DOCKER_HOST
#   tools/image/dockerd.sh stop    stop it (SIGTERM, then SIGKILL after 30 s) if it runs
#
# It is one daemon per checkout: who starts it stops it, under the lock .cache/docker/lock
# (tools/image/build.sh and the image's tests hold it while they use the daemon).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=$ROOT/.cache/docker
PIDFILE=$CACHE/dockerd.pid
export DOCKER_HOST=unix://$CACHE/docker.sock
# Debian's CLI, which matches its daemon (another docker on PATH may be newer than the daemon).
DOCKER=/usr/bin/docker

running() {
    [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

start() {
    if ! running; then
        command -v dockerd >/dev/null || { echo "dockerd: install Debian's docker.io" >&2; exit 1; }
        mkdir -p "$CACHE/data" "$CACHE/exec"
        # setsid: the daemon outlives this script and is not in the caller's process group.
        setsid dockerd --host "$DOCKER_HOST" --data-root "$CACHE/data" --exec-root "$CACHE/exec" \
            --pidfile "$PIDFILE" --bridge=none --iptables=false --ip-masq=false --ip6tables=false \
            </dev/null >>"$CACHE/dockerd.log" 2>&1 &
        # Until it answers, for at most 60 s.
        for _ in $(seq 120); do
            if "$DOCKER" version >/dev/null 2>&1; then break; fi
            sleep 0.5
        done
        "$DOCKER" version >/dev/null || { tail -n 20 "$CACHE/dockerd.log" >&2; exit 1; }
    fi
    echo "$DOCKER_HOST"
}

stop() {
    if running; then
        local pid
        pid=$(cat "$PIDFILE")
        kill -TERM "$pid"
        for _ in $(seq 60); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    # What the daemon leaves mounted once stopped (its network namespace, the layers of a
    # container it was killed beside), so that nothing of it stays on the machine.
    awk -v c="$(readlink -f "$CACHE")/" 'index($2, c) == 1 {print $2}' /proc/mounts | sort -r | xargs -r umount -l
}

case "${1:-}" in
start) start ;;
stop) stop ;;
*) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
