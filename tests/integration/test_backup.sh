#!/usr/bin/env bash
# test_backup.sh - deploy/README.md's backup and restore, run as written
# against a local server, PostgreSQL cluster and agents: `docker` is a shell
# function here that plays the compose stack (there is no Docker engine).
#
#   docker compose exec -T postgres CMD...      CMD on the live cluster (-h 127.0.0.1: its socket)
#   docker compose exec -T shoal-server CMD...  CMD with /var/lib/shoal read as the server's data dir
#   docker compose run --rm --no-deps -T --entrypoint E shoal-server ARGS...   likewise, E ARGS
#   docker compose down                          stop the agents and the server
#   docker volume rm shoal_pgdata shoal_server-data   a new cluster and data dir stand in for them
#   docker compose up -d postgres                start the new cluster with an empty database `shoal`
#   docker compose up -d                         start a server on it, then the agents again
#
# `exec` and `run` without -T are refused (their output goes to a file).
# A job trains with a checkpoint every 4 steps; the backup block runs, with
# a second job trained between its dump and its copy of the files; the
# restore block runs; then the restored server must list the first job's
# checkpoints as before, with every file present and its SHA-256 right,
# list nothing of the second job (its files are there, without rows), know
# the agents as the same nodes, sample the same text, and resume the first
# job from step 8 with the original run's losses.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agents.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)

PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ]; then
    fail "PostgreSQL server binaries (initdb, pg_ctl) found" "none under /usr/lib/postgresql; set PG_BIN"
    exit 1
fi

# ---- PostgreSQL clusters: $WORK/pg-NAME/{data,sock,log} ----------------------
as_pg() {  # the postmaster refuses root
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
pg_ctl_on() {  # pg_ctl_on NAME ARGS...
    as_pg "$PG_BIN/pg_ctl" -D "$WORK/pg-$1/data" -l "$WORK/pg-$1/log" -t 60 \
          -o "-k $WORK/pg-$1/sock -c listen_addresses='' -c fsync=off" "${@:2}"
}
# pg_new NAME: what the postgres image does on its first start: a cluster
# with the user shoal and an empty database shoal.
pg_new() {
    mkdir -p "$WORK/pg-$1/sock"
    [ "$(id -u)" = 0 ] && chown -R postgres "$WORK/pg-$1"
    as_pg "$PG_BIN/initdb" -D "$WORK/pg-$1/data" -U shoal --auth=trust -E UTF8 --no-locale \
        >"$WORK/pg-$1/initdb.log" 2>&1 || { fail "initdb $1" "$(tail -n 5 "$WORK/pg-$1/initdb.log")"; return 1; }
    pg_ctl_on "$1" -w start >/dev/null || { fail "postgres $1 starts" "$(tail -n 5 "$WORK/pg-$1/log")"; return 1; }
    psql -X -q "host=$WORK/pg-$1/sock user=shoal dbname=postgres" -c 'CREATE DATABASE shoal' >/dev/null
}
backup_cleanup() {
    stop_all_agents
    for c in live restored; do
        [ -f "$WORK/pg-$c/data/postmaster.pid" ] && pg_ctl_on "$c" -m immediate -w stop >/dev/null 2>&1
    done
    cleanup
}
trap backup_cleanup EXIT
trap 'exit 130' INT TERM

# ---- the stack -----------------------------------------------------------------
# The tokens of deploy/.env, the same for the server before and after.
openssl rand -hex 32 > "$WORK/admin.token"
openssl rand -hex 32 > "$WORK/join.token"
ADMIN=$(cat "$WORK/admin.token")
# stack_up NAME CLUSTER [PORT]: shoal-server on the cluster with data dir
# $WORK/NAME (SRV_DIR), the .env tokens, on PORT (default: a free one), and
# two agents that keep their identities under $WORK/agent-x0 and -x1.  An
# agent resumes its identity only from the server URL it registered with:
# compose's stays http://shoal-server:8080, so the server after a restore
# takes the port of the one before.
stack_up() {
    SRV=$1 SRV_DIR="$WORK/$1"
    mkdir -p "$SRV_DIR"
    cp "$WORK/admin.token" "$WORK/join.token" "$SRV_DIR/"
    start_server "$1" --database-url "host=$WORK/pg-$2/sock user=shoal dbname=shoal" ${3:+--port "$3"} || return 1
    S=$(eval echo "\$URL_$1")
    for n in x0 x1; do start_agent "$n" "$1"; done
}
stack_down() {
    stop_all_agents
    stop_server "$SRV"
}
PG=live
pg_new live || exit 1
stack_up a live || exit 1
CORPUS=/usr/share/common-licenses/GPL-3
[ -r "$CORPUS" ] || CORPUS="$TOP/README.md"

links_up() {
    [ "$(curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/links" |
         jq '[.latency_ms[][] | select(. != null)] | length')" = 2 ]
}
if wait_for 60 links_up; then ok "two agents register and measure their links"
else fail "two agents register and measure their links" "$(tail -n 5 "$WORK/agent-x0.log")"; exit 1; fi

# job NAME STEPS [EXTRA_JSON]: 2 stages, a checkpoint every 4 steps, f32
# stage links (a resumed run then has the same losses to the bit).
job() {
    printf '{"name":"%s","model":{"vocab_size":256,"context_length":32,"d_model":32,"heads":2,"layers":4},' "$1"
    printf '"parallelism":{"stages":2,"replicas":1,"micro_batches":2,"micro_batch_size":2,"schedule":"1f1b"},'
    printf '"training":{"steps":%d,"learning_rate":0.003,"warmup_steps":3,"weight_decay":0.1,"grad_clip":1.0,"seed":7},' "$2"
    printf '"data":{"path":"%s","format":"text"},"checkpoint_interval":4,"communication":{"stage_link":"f32"}%s}' \
        "$CORPUS" "${3-}"
}
listing() { curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$1/checkpoints"; }
# sample OUT JOB: greedy text from the job's newest checkpoint.
sample() {
    "$SHOAL_AGENT" sample --server "$S" --admin-token-file "$WORK/admin.token" --tmp-dir "$WORK" \
        --job "$2" --prompt "The " --tokens 24 --temperature 0 >"$1" 2>"$1.err"
}
# files_match JOB DIR: every file the job's listing names is under DIR
# (a data dir) with the SHA-256 listed; prints the mismatches.
files_match() {
    listing "$1" | jq -r --arg j "$1" '.checkpoints[] | .step as $s | .stages[] |
        "\(.sha256)  job\($j)/step\($s)/stage\(.stage)\(if .replica > 0 then "-replica\(.replica)" else "" end).bin"' \
        > "$WORK/sums"
    [ -s "$WORK/sums" ] || { echo "no checkpoints listed"; return; }
    (cd "$2/checkpoints" && sha256sum --quiet -c "$WORK/sums" 2>&1)
}

run_job "job A (12 steps, a checkpoint every 4)" "$(job original 12)" || exit 1
A=$J
check "job A's checkpoints 4, 8 and 12 are complete" "$(listing "$A" | jq -c '[.checkpoints[] | select(.complete) | .step]')" "[12,8,4]"
listing "$A" > "$WORK/listing.before"
job_losses "$S" "$ADMIN" "$A" | sort -k1,1 > "$WORK/a.losses"
sample "$WORK/sample.before" "$A"
check "sample writes text from job A's checkpoint" "$? $(head -c 4 "$WORK/sample.before")" "0 The "

# ---- the documents' blocks, with `docker` played by the local stack -----------
# block NAME: the commands of deploy/README.md's block <!-- example: NAME ... -->
# into $WORK/NAME.sh, one command a line.
block() {
    example_block "$TOP/deploy/README.md" "$1" | grep -v '^\s*\(#\|$\)' > "$WORK/$1.sh"
    [ -s "$WORK/$1.sh" ] || { fail "deploy/README.md has the $1 block"; return 1; }
}
# in_service SERVICE CMD...: CMD where the service would run it.
in_service() {
    local svc=$1 a; shift
    local args=()
    case $svc in
        postgres)
            for a in "$@"; do [ "$a" = 127.0.0.1 ] && a="$WORK/pg-$PG/sock"; args+=("$a"); done
            PGHOST="$WORK/pg-$PG/sock" "$PG_BIN/${args[0]}" "${args[@]:1}" ;;
        shoal-server)
            for a in "$@"; do [ "$a" = /var/lib/shoal ] && a=$SRV_DIR; args+=("$a"); done
            "${args[@]}" ;;
        *) echo "docker: no service $svc here" >&2; return 2 ;;
    esac
}
NEXT_SRV=a
docker() {
    local sub ep="" t=""
    if [ "${1:-}" = volume ] && [ "${2:-}" = rm ]; then
        shift 2
        for v in "$@"; do
            # Compose's name: <COMPOSE_PROJECT_NAME>_<volume of docker-compose.yml>
            if ! grep -q "^COMPOSE_PROJECT_NAME=${v%%_*}\$" "$TOP/deploy/.env.example" ||
               ! sed -n '/^volumes:/,$p' "$TOP/deploy/docker-compose.yml" | grep -q "^  ${v#*_}:"; then
                echo "docker volume rm: no volume $v in the stack" >&2; return 1
            fi
            case ${v#*_} in
                pgdata) PG=restored ;;   # created by `up -d postgres`
                server-data) NEXT_SRV=b; SRV_DIR="$WORK/b"; mkdir -p "$SRV_DIR" ;;
            esac
        done
        return 0
    fi
    [ "${1:-}" = compose ] || { echo "docker $*: not played here" >&2; return 2; }
    shift; sub=${1:-}; shift
    case $sub in
        exec)
            [ "${1:-}" = -T ] || { echo "docker compose exec without -T: a terminal would mangle the output" >&2; return 1; }
            shift; in_service "$@" ;;
        run)
            while [ $# -gt 0 ]; do
                case $1 in
                    --rm|--no-deps) shift ;;
                    -T) t=1; shift ;;
                    --entrypoint) ep=$2; shift 2 ;;
                    -*) echo "docker compose run $1: not played here" >&2; return 2 ;;
                    *) break ;;
                esac
            done
            [ -n "$t" ] || { echo "docker compose run without -T: a terminal would mangle the input" >&2; return 1; }
            local svc=$1; shift
            in_service "$svc" $ep "$@" ;;
        down) stack_down >&3 ;;
        up)
            [ "${1:-}" = -d ] || { echo "docker compose up without -d: not played here" >&2; return 2; }
            shift
            case "${1:-}" in
                postgres)
                    [ -d "$WORK/pg-$PG" ] || pg_new "$PG" >&3 ;;
                "")
                    [ -d "$WORK/pg-$PG" ] || pg_new "$PG" >&3
                    # shellcheck disable=SC2154  # URL_a: set by start_server
                    stack_up "$NEXT_SRV" "$PG" "${URL_a##*:}" >&3 ;;
                *) echo "docker compose up $1: not played here" >&2; return 2 ;;
            esac ;;
        *) echo "docker compose $sub: not played here" >&2; return 2 ;;
    esac
}
# run_block NAME [HOOK_REGEX HOOK]: runs the block's commands in
# $WORK/deploy (a checkout's deploy/), in this shell; after the first
# command that matches HOOK_REGEX, runs HOOK.
exec 3>&1
mkdir -p "$WORK/deploy"
run_block() {
    local line rc
    block "$1" || return 1
    cd "$WORK/deploy" || return 1
    while IFS= read -r line; do
        eval "$line" </dev/null 2>"$WORK/cmd.err"
        rc=$?
        if [ "$rc" -ne 0 ]; then
            fail "deploy/README.md's $1 block runs: $line" "status $rc: $(head -c 300 "$WORK/cmd.err")"
            cd "$WORK" || exit 1
            return 1
        fi
        if [ -n "${2:-}" ] && [[ $line =~ $2 ]]; then "$3"; set -- "$1"; fi
    done < "$WORK/$1.sh"
    ok "deploy/README.md's $1 block runs ($(wc -l < "$WORK/$1.sh") commands)"
    cd "$WORK" || exit 1
}

# A checkpoint written while the backup runs: job B trains and checkpoints
# between the block's two copies, the database's and the files'.
between() {
    run_job "job B (4 steps), trained between the dump and the copy" "$(job between 4)"
    B_JOB=$J
}
# An upload in progress (what ckpt_begin leaves until the body is complete).
head -c 100 /dev/urandom > "$SRV_DIR/checkpoints/job$A/.upload-Xy12Zq"
run_block backup 'pg_dump|tar ' between || exit 1
DUMP=$(ls "$WORK"/deploy/backup/shoal-*.dump 2>/dev/null | head -n 1)
ARCHIVE=${DUMP%.dump}-checkpoints.tar.gz
check "the backup is a dump and an archive of the checkpoint files" \
    "$([ -s "$DUMP" ] && tar -tzf "$ARCHIVE" | grep -c "^checkpoints/job$A/step12/stage[01].bin\$")" 2
check "the archive has job B's files, written after the dump" \
    "$(tar -tzf "$ARCHIVE" | grep -c "^checkpoints/job$B_JOB/step4/stage[01].bin\$")" 2
check "the upload in progress is not archived" "$(tar -tzf "$ARCHIVE" | grep -c '\.upload-')" 0

run_block restore || exit 1
check "the restore ran on a new cluster and data dir" "$PG $SRV" "restored b"

# ---- the restored state -------------------------------------------------------
check "job A's checkpoint listing is the one from before the backup" \
    "$(listing "$A" | jq -S -c .)" "$(jq -S -c . "$WORK/listing.before")"
check "every checkpoint file job A lists is there with its SHA-256" "$(files_match "$A" "$SRV_DIR")" ""
check "no checkpoint row of the restored database names a missing or different file" \
    "$(for j in $(curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs" | jq -r '.jobs[].id'); do
           listing "$j" | jq -e '.checkpoints | length > 0' >/dev/null && files_match "$j" "$SRV_DIR"; done)" ""
check "the restored database has job A alone" \
    "$(curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs" | jq -c '[.jobs[].id]')" "[$A]"
req GET "$S/v1/jobs/$B_JOB" "$ADMIN"
check "job B, created after the dump, is not in the restored database" "$STATUS" 404
check "its files came back with the copy, without rows" \
    "$(ls "$SRV_DIR/checkpoints/job$B_JOB/step4" 2>/dev/null | tr '\n' ' ')" "stage0.bin stage1.bin "

resumed() { [ "$(cat "$WORK/agent-x0.log" "$WORK/agent-x1.log" | grep -c 'resumed identity')" = 2 ]; }
wait_for 60 resumed
check "each agent registered once, and resumed its identity on the restored server" \
    "$(for a in x0 x1; do printf '%s/%s ' "$(grep -c 'registered node=' "$WORK/agent-$a.log")" \
           "$(grep -c 'resumed identity' "$WORK/agent-$a.log")"; done)" "1/1 1/1 "
check "the restored server knows the same two nodes, idle" \
    "$(curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/nodes" | jq -c '[.nodes[] | {name, state}] | sort_by(.name)')" \
    '[{"name":"x0","state":"idle"},{"name":"x1","state":"idle"}]'

sample "$WORK/sample.after" "$A"
check "sample writes the same text from the restored checkpoint" \
    "$? $(cmp -s "$WORK/sample.before" "$WORK/sample.after" && echo same)" "0 same"

run_job "job C, resumed from job A's restored checkpoint at step 8" \
    "$(job resumed 12 ",\"resume_from\":{\"job_id\":$A,\"step\":8}")"
C=$J
check "job C takes the id job B had (the restored sequence)" "$C" "$B_JOB"
job_losses "$S" "$ADMIN" "$C" | sort -k1,1 > "$WORK/c.losses"
check "job C trains steps 8 to 11" "$(awk '{print $1}' "$WORK/c.losses" | sort -n | tr '\n' ' ')" "8 9 10 11 "
same_losses "its losses are job A's" "$WORK/c.losses" "$WORK/a.losses" 1e-6
check "its checkpoints replaced job B's leftover files: the listing's SHA-256 match the files" \
    "$(files_match "$C" "$SRV_DIR")" ""
exit 0
