#!/usr/bin/env bash
# make image: the product image from the repository's Dockerfile, built by Debian's docker.io in
# the project's own daemon (tools/image/dockerd.sh, started here and stopped again), on the base image tools/image/standin.sh provides. Docker's layer cache keeps
# an unchanged build to seconds; a change to the sources rebuilds from their COPY on.
# Prints the image reference last (make -s image | tail -n 1).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=$ROOT/.cache/docker
DOCKER=/usr/bin/docker
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/service/nodefence/__init__.py")
IMAGE=nodefence:$VERSION

mkdir -p "$CACHE"
# One user of the daemon at a time: a build, or a test session running the image.
exec 9>"$CACHE/lock"
flock 9
# Whoever holds the lock is the daemon's only user: started here, stopped on the way out.
trap '"$ROOT/tools/image/dockerd.sh" stop' EXIT
DOCKER_HOST=$("$ROOT/tools/image/dockerd.sh" start)
export DOCKER_HOST

"$ROOT/tools/image/standin.sh"
# The RUN steps fetch packages (pip, apt) on the host's network; the daemon has no bridge. The
# builder stage is tagged too, so that the untagged images left by an earlier build (of sources
# since changed) can be pruned without losing the layers this build's cache is made of.
"$DOCKER" build --network host --target builder --tag "$IMAGE-builder" "$ROOT" >&2
"$DOCKER" build --network host --tag "$IMAGE" "$ROOT" >&2
"$DOCKER" image prune --force >/dev/null
echo "$IMAGE"
