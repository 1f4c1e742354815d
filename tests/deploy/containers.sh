#!/usr/bin/env bash
# containers.sh - `make test-deploy`: deploy/ built and run for real.  The
# server and agent images are built from the repository's Dockerfiles, a
# PostgreSQL image from Debian's package (Dockerfile.postgres, beside this
# file), and deploy/docker-compose.yml brings the stack up with this
# directory's compose.test.yml over it; two agent containers train a job,
# `docker-compose down` and `up` keep the job, its checkpoints and the
# nodes; the images' sizes are printed.  The engine parses the CUDA agent's
# Dockerfile (its base image cannot be pulled here; test_deploy.sh checks its
# build stage's commands against the Makefile).
#
# The engine: the one `docker info` reaches, else (as root, with Debian's
# docker.io) a private dockerd of its own, on vfs storage, without iptables
# or the default bridge, whose images stay in $SHOAL_DEPLOY_CACHE
# (/var/cache/shoal-deploy) between runs.  The base image debian:bookworm
# comes from debootstrap and Debian's archive when the engine lacks it: no
# registry is pulled from.  Where no engine can run, it says why and skips.
#
# Prints "ok - ..." / "not ok - ..." lines; exits 1 when any check failed.
set -u
TOP=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$TOP/tests/deploy"
CACHE=${SHOAL_DEPLOY_CACHE:-/var/cache/shoal-deploy}
MIRROR=${SHOAL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
WORK=$(mktemp -d /tmp/shoal-deploy.XXXXXX)
PROJECT=shoaltest$$          # never the operator's own stack (COMPOSE_PROJECT_NAME=shoal)
FAILS=0
DOCKERD_PID=""
STACK_UP=0

ok()   { echo "ok - $1"; }
fail() { echo "not ok - $1${2:+: $2}"; FAILS=$((FAILS + 1)); }
check() { if eval "$2"; then ok "$1"; else fail "$1" "${3:-}"; fi; }
say()  { echo "# $*"; }
skip() { echo "skip - make test-deploy: $*"; exit 0; }
now()  { date +%s; }

cleanup() {
    if [ "$STACK_UP" = 1 ]; then
        [ "$FAILS" -gt 0 ] && compose logs --no-color --tail 40 >&2 2>/dev/null
        compose down -v --remove-orphans >/dev/null 2>&1
    fi
    # What this run's builds left behind: untagged images (the last run's
    # stages) and build cache beyond a few GiB (the packages' layers stay).
    if [ -n "$DOCKERD_PID" ]; then
        docker image prune -f >/dev/null 2>&1
        docker builder prune -f --keep-storage 4gb >/dev/null 2>&1
    fi
    if [ -n "$DOCKERD_PID" ]; then
        kill -TERM "$DOCKERD_PID" 2>/dev/null
        for _ in $(seq 1 300); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.1; done
        # dockerd leaves its network namespace mounted beneath its exec root.
        awk -v p="$WORK/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r | xargs -r umount -l
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the engine -------------------------------------------------------------
command -v docker >/dev/null 2>&1 || skip "no docker client (Debian's docker.io: make deps as root)"
COMPOSE=""
if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"
elif command -v docker-compose >/dev/null 2>&1; then COMPOSE="docker-compose"
else skip "no docker compose and no docker-compose (Debian's docker-compose: make deps)"; fi

# start_dockerd: a private engine on $CACHE; sets DOCKER_HOST and DOCKERD_PID.
start_dockerd() {
    local run="$WORK/engine" why
    mkdir -p "$CACHE/docker" "$run"
    export DOCKER_HOST="unix://$run/docker.sock"
    dockerd --data-root "$CACHE/docker" --exec-root "$run/exec" --pidfile "$run/dockerd.pid" \
        -H "$DOCKER_HOST" --storage-driver vfs --iptables=false --bridge=none \
        >"$WORK/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    for _ in $(seq 1 300); do
        docker info >/dev/null 2>&1 && return 0
        kill -0 "$DOCKERD_PID" 2>/dev/null || break
        sleep 0.2
    done
    why=$(grep -iE 'level=(error|fatal)|failed' "$WORK/dockerd.log" | tail -n 1)
    DOCKERD_PID=""
    skip "dockerd did not start here (${why:-no error logged}); a machine that runs containers is needed"
}
if docker info >/dev/null 2>&1; then
    say "engine: the one docker reaches ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
elif [ "$(id -u)" -ne 0 ]; then
    skip "no container engine answers and only root may start one (sudo make test-deploy)"
elif ! command -v dockerd >/dev/null 2>&1; then
    skip "no container engine answers and dockerd is not installed (Debian's docker.io: make deps)"
else
    free_kb=$(df -Pk "$(dirname "$CACHE")" | awk 'NR == 2 { print $4 }')
    [ "${free_kb:-0}" -ge $((12 * 1024 * 1024)) ] ||
        skip "$(dirname "$CACHE") has $((free_kb / 1024)) MiB free; vfs storage needs about 12 GiB"
    start_dockerd
    say "engine: a private dockerd $(docker version -f '{{.Server.Version}}') on vfs, images kept in $CACHE/docker"
fi

# ---- the base image ---------------------------------------------------------
# debian:bookworm from Debian's archive, tagged also as the -slim the runtime
# stages start from (minbase is as small as slim).
base_image() {
    local root="$CACHE/rootfs-bookworm" began
    docker image inspect debian:bookworm >/dev/null 2>&1 &&
        docker image inspect debian:bookworm-slim >/dev/null 2>&1 && return 0
    command -v debootstrap >/dev/null 2>&1 ||
        skip "debian:bookworm is not in the engine and debootstrap is missing (make deps)"
    began=$(now)
    if [ ! -f "$root.done" ]; then
        rm -rf "$root"
        debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || {
            fail "debootstrap makes a bookworm base from $MIRROR" "$(tail -n 3 "$WORK/debootstrap.log")"
            exit 1
        }
        rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
        touch "$root.done"
    fi
    tar -C "$root" -c . | docker import --change 'CMD ["bash"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        - debian:bookworm >/dev/null &&
        docker tag debian:bookworm debian:bookworm-slim
    check "the base image debian:bookworm made with debootstrap from Debian's archive ($(($(now) - began)) s)" \
        'docker image inspect debian:bookworm-slim >/dev/null 2>&1'
}
base_image

# ---- the images -------------------------------------------------------------
# BuildKit where the client has it (as buildx, or built in as Debian's
# docker.io has): the classic builder makes a container for every line of a
# Dockerfile, and on vfs storage each is a copy of the whole image.
DOCKER_BUILD="docker build"
if docker buildx version >/dev/null 2>&1; then
    DOCKER_BUILD="docker buildx build --load"
else
    for c in docker /usr/bin/docker; do
        if DOCKER_BUILDKIT=1 "$c" build --help >/dev/null 2>&1; then DOCKER_BUILD="env DOCKER_BUILDKIT=1 $c build"; break; fi
    done
fi
say "builder: $DOCKER_BUILD"
# build NAME DOCKERFILE: builds NAME:latest, and its build stage as
# NAME-build:latest when it has one (so the next run's untagged leftovers
# can be pruned while its package layer stays cached).
build() {
    local name=$1 file=$2 began rc
    began=$(now)
    if grep -q '^FROM .* AS build' "$TOP/$file"; then
        $DOCKER_BUILD --network host -q -f "$TOP/$file" --target build -t "$name-build:latest" "$TOP" \
            >"$WORK/build-$name.log" 2>&1
    fi
    $DOCKER_BUILD --network host -f "$TOP/$file" -t "$name:latest" "$TOP" >>"$WORK/build-$name.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        ok "$file builds ($(($(now) - began)) s)"
    else
        fail "$file builds" "$(tail -n 15 "$WORK/build-$name.log")"
    fi
    return $rc
}
size_mb() { docker image inspect -f '{{.Size}}' "$1" 2>/dev/null | awk '{ printf "%.0f", $1 / 1048576 }'; }

# The Postgres image (mostly apt's downloads) beside the two that compile.
build shoal-test-postgres tests/deploy/Dockerfile.postgres >"$WORK/postgres.out" 2>&1 &
postgres_build=$!
build shoal-server deploy/Dockerfile.server || exit 1
build shoal-agent deploy/Dockerfile.agent || exit 1
wait "$postgres_build"
postgres_rc=$?
cat "$WORK/postgres.out"
[ "$postgres_rc" -eq 0 ] || { FAILS=$((FAILS + 1)); exit 1; }
say "image sizes: shoal-server $(size_mb shoal-server:latest) MB, shoal-agent $(size_mb shoal-agent:latest) MB," \
    "shoal-test-postgres $(size_mb shoal-test-postgres:latest) MB"

# Every binary an image ships starts (a runtime library missing from the
# image stops it before main).
for spec in "shoal-server:shoal-server shoal-sched shoal-relay" "shoal-agent:shoal-agent"; do
    image=${spec%%:*} bins=${spec#*:}
    out=$(docker run --rm --network none --entrypoint sh "$image:latest" -c \
        "for b in $bins; do \$b --help >/dev/null || { echo \"\$b --help: exit \$?\"; exit 1; }; done" 2>&1)
    rc=$?
    check "$bins start in the $image image" '[ $rc -eq 0 ]' "$out"
done

# The CUDA agent's Dockerfile: the engine parses every stage (an unknown
# target is refused only after the parse, before any base image is pulled).
out=$(DOCKER_BUILDKIT=0 docker build -f "$TOP/deploy/Dockerfile.agent-cuda" --target shoal-parse-only "$TOP" 2>&1)
check "the engine parses deploy/Dockerfile.agent-cuda" 'echo "$out" | grep -q "failed to reach build target shoal-parse-only"' \
    "$(echo "$out" | tail -n 3)"

# ---- the stack ----------------------------------------------------------------
rand_hex() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ENVF="$WORK/env"
mkdir -p "$WORK/data"
chmod 755 "$WORK" "$WORK/data"
cp "$TOP/deploy/.env.example" "$ENVF"
for v in SHOAL_ADMIN_TOKEN SHOAL_JOIN_TOKEN POSTGRES_PASSWORD GRAFANA_ADMIN_PASSWORD; do
    sed -i "s/^$v=.*/$v=$(rand_hex)/" "$ENVF"
done
PORT=$(free_port)
sed -i -e "s/^COMPOSE_PROJECT_NAME=.*/COMPOSE_PROJECT_NAME=$PROJECT/" \
    -e "s/^SHOAL_HTTP_BIND=.*/SHOAL_HTTP_BIND=127.0.0.1/" -e "s/^SHOAL_HTTP_PORT=.*/SHOAL_HTTP_PORT=$PORT/" \
    -e "s|^SHOAL_TRAIN_DATA=.*|SHOAL_TRAIN_DATA=$WORK/data|" \
    -e "s/^POSTGRES_IMAGE=.*/POSTGRES_IMAGE=shoal-test-postgres:latest/" "$ENVF"
ADMIN=$(sed -n 's/^SHOAL_ADMIN_TOKEN=//p' "$ENVF")
S="http://127.0.0.1:$PORT"
compose() {
    # shellcheck disable=SC2086
    env -i PATH="$PATH" HOME="$WORK" DOCKER_HOST="${DOCKER_HOST:-}" $COMPOSE --env-file "$ENVF" \
        -p "$PROJECT" --project-directory "$TOP/deploy" \
        -f "$TOP/deploy/docker-compose.yml" -f "$HERE/compose.test.yml" "$@"
}
api() { curl -s --max-time 10 -X "$1" -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
             ${3:+-d "$3"} "$S$2"; }
# wait_for SECONDS COMMAND...: until COMMAND succeeds; 1 when time ran out.
wait_for() {
    local end=$(($(now) + $1)); shift
    until "$@"; do [ "$(now)" -lt "$end" ] || return 1; sleep 1; done
}
SERVICES="postgres shoal-server agent-1 agent-2"
healthy() {
    local s id
    for s in $SERVICES; do
        id=$(compose ps -q "$s" 2>/dev/null)
        [ -n "$id" ] && [ "$(docker inspect -f '{{.State.Health.Status}}' "$id" 2>/dev/null)" = healthy ] || return 1
    done
}
up() {
    local began=$(now)
    compose up -d --no-build $SERVICES >"$WORK/up.log" 2>&1 || { fail "$1" "$(tail -n 5 "$WORK/up.log")"; return 1; }
    STACK_UP=1
    if wait_for 240 healthy; then ok "$1 ($(($(now) - began)) s to healthy)"
    else fail "$1" "not all of $SERVICES turned healthy: $(compose ps 2>&1 | tail -n 5)"; return 1; fi
}

# Training data, mounted read-only at /data in the agents (SHOAL_TRAIN_DATA).
cat /usr/share/common-licenses/* > "$WORK/data/licenses.txt"
chmod 644 "$WORK/data/licenses.txt"
up "docker-compose up brings postgres, the server and two agents to healthy" || exit 1

nodes_json() { api GET /v1/nodes; }
nodes_ready() { [ "$(nodes_json | jq '[.nodes[] | select(.hardware.tflops > 0)] | length')" = 2 ]; }
links_ready() { [ "$(api GET /v1/links | jq '[.bandwidth_gbps[][] | select(. != null)] | length')" = 2 ]; }
wait_for 120 nodes_ready
check "both agent containers registered" nodes_ready "$(nodes_json)"
wait_for 120 links_ready
check "the agents measured the link between their containers" links_ready "$(api GET /v1/links)"
NODES_BEFORE=$(nodes_json | jq -c '[.nodes[] | {id, name}] | sort_by(.id)')

JOB=$(api POST /v1/jobs '{"name":"containers",
  "model":{"vocab_size":256,"context_length":32,"d_model":64,"heads":2,"layers":2},
  "parallelism":{"stages":2,"replicas":1,"micro_batches":2,"micro_batch_size":4},
  "training":{"steps":30,"learning_rate":0.003,"seed":7},
  "data":{"path":"/data/licenses.txt","format":"text"},"checkpoint_interval":10}')
J=$(echo "$JOB" | jq -r '.id // empty')
check "the server takes a two-stage job" '[ -n "$J" ]' "$JOB"
[ -n "$J" ] || exit 1
plan=$(api POST "/v1/jobs/$J/schedule" '{"budget_ms":300}')
check "the job is scheduled on the two agent containers" \
    '[ "$(api GET /v1/jobs/$J | jq "[.plan.assignments[].node_id] | unique | length")" = 2 ]' "$plan"
began=$(now)
job_state() { api GET "/v1/jobs/$J" | jq -r .state; }
done_training() { case $(job_state) in succeeded|failed|cancelled) return 0;; esac; return 1; }
wait_for 600 done_training
JOB_AFTER=$(api GET "/v1/jobs/$J")
check "two agent containers train the job to success ($(($(now) - began)) s)" \
    '[ "$(echo "$JOB_AFTER" | jq -r .state)" = succeeded ]' "$(echo "$JOB_AFTER" | jq -c "{state, failure_reason, latest_step}")"
CKPT_BEFORE=$(api GET "/v1/jobs/$J/checkpoints" | jq -c '[.checkpoints[] | {step, stages: [.stages[] | {stage, sha256}]}]')
check "the job's checkpoints are listed" '[ "$(echo "$CKPT_BEFORE" | jq length)" -ge 1 ]' "$CKPT_BEFORE"
STEP=$(echo "$CKPT_BEFORE" | jq -r 'map(.step) | max')

# ---- down and up again ----------------------------------------------------------
compose down >"$WORK/down.log" 2>&1
check "docker-compose down stops the stack" '[ -z "$(compose ps -q 2>/dev/null)" ]' "$(tail -n 5 "$WORK/down.log")"
up "docker-compose up brings the same stack back" || exit 1
check "the job outlives down and up" '[ "$(job_state)" = succeeded ]' "$(api GET "/v1/jobs/$J")"
check "its checkpoints outlive down and up" \
    '[ "$(api GET "/v1/jobs/$J/checkpoints" | jq -c "[.checkpoints[] | {step, stages: [.stages[] | {stage, sha256}]}]")" = "$CKPT_BEFORE" ]'
code=$(curl -s -o "$WORK/stage0.ckpt" -w '%{http_code}' -H "Authorization: Bearer $ADMIN" \
    "$S/v1/jobs/$J/checkpoints/$STEP/stages/0")
check "a checkpoint's file outlives down and up (step $STEP, stage 0: $(stat -c %s "$WORK/stage0.ckpt" 2>/dev/null) bytes)" \
    '[ "$code" = 200 ] && [ -s "$WORK/stage0.ckpt" ]' "HTTP $code"
alive() { [ "$(nodes_json | jq -c '[.nodes[] | {id, name}] | sort_by(.id)')" = "$NODES_BEFORE" ] &&
          [ "$(nodes_json | jq '[.nodes[] | select(.state == "idle")] | length')" = 2 ]; }
wait_for 60 alive
check "the agents come back as the same two nodes" alive "$(nodes_json | jq -c '[.nodes[] | {id, name, state}]')"

echo "# $FAILS checks failed"
[ "$FAILS" -eq 0 ]
