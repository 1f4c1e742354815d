#!/usr/bin/env bash
# test_bad_input.sh - hostile and broken HTTP input against a real server on
# a real embedded Postgres: malformed, oversized, truncated and deeply
# nested bodies, huge numbers, NaN, bad UTF-8, NUL bytes, wrong content
# types, path traversal, header floods, ambiguous framing, slow clients,
# too many connections from one address and failed-token floods.
#
# Every answer must be a clean 4xx JSON error, or (where libmicrohttpd
# answers by itself, or a limit cuts the client off) a 4xx or a closed
# connection; after every case the server still answers /healthz and has
# stored nothing.  The limits are set low (docs/operations.md, "Limits") so that each is
# reached in a second or two.  Other client addresses are 127.0.0.2 and
# 127.0.0.3 (all of 127/8 is loopback on Linux).
set -u
. "$(dirname "$0")/lib.sh"
trap '' PIPE   # a write to a socket the server closed fails instead of ending the suite

# ---- every limit is a documented setting
help=$("$SHOAL_SERVER" --help)
for var in SHOAL_MAX_CONNECTIONS SHOAL_MAX_CONNECTIONS_PER_ADDRESS SHOAL_IDLE_TIMEOUT SHOAL_REQUEST_TIMEOUT \
           SHOAL_CONNECTION_MEMORY SHOAL_AUTH_FAILURES SHOAL_AUTH_FAILURE_WINDOW SHOAL_MAX_LONG_POLLS SHOAL_MAX_BODY \
           SHOAL_MAX_REGISTRATIONS; do
    check "--help documents $var" "$(printf '%s' "$help" | grep -c "($var)")" 1
done
"$SHOAL_SERVER" --connection-memory 100 >/dev/null 2>"$WORK/err"; rc=$?
check "a limit out of range exits 2 and names it" "$rc $(grep -c -- '--connection-memory must be' "$WORK/err")" "2 1"

IDLE=3 REQ=2 PER_ADDR=8 FAILS_MAX=5 WINDOW=5
start_server_a --max-connections-per-address $PER_ADDR --idle-timeout $IDLE --request-timeout $REQ \
               --auth-failures $FAILS_MAX --auth-failure-window $WINDOW || exit 1
PORT=${S##*:}
LOG="$WORK/a.log"

# ---- what there is before the attack
req POST "$S/v1/agent/register" "$JOIN" '{"name":"n0","peer_address":"10.0.0.1:7000","hardware":{"tflops":1,"cpu_cores":8}}'
expect "register a node" 201
T1=$(printf '%s' "$BODY" | jq -r .token)
N1=$(printf '%s' "$BODY" | jq -r .node_id)
JOB='{"name":"bad-input","model":{"vocab_size":256,"context_length":64,"d_model":64,"heads":4,"layers":4},"parallelism":{"stages":1,"replicas":1,"micro_batches":2,"micro_batch_size":2},"training":{"steps":3,"learning_rate":0.001},"data":{"path":"/data/corpus.txt","format":"text"}}'
req POST "$S/v1/jobs" "$ADMIN" "$JOB"
expect "create a job" 201
J=$(printf '%s' "$BODY" | jq -r .id)

# stored: what no bad request may change.
stored() {
    sql a "SELECT (SELECT count(*) FROM nodes) || ' nodes ' || (SELECT count(*) FROM jobs) || ' jobs ' ||
                  (SELECT count(*) FROM link_samples) || ' links ' || (SELECT count(*) FROM plans) || ' plans ' ||
                  (SELECT string_agg(state, ',' ORDER BY id) FROM jobs)"
}
STORED=$(stored)

# alive: 0 if the server process runs and answers /healthz with 200.
alive() {
    kill -0 "$(cat "$WORK/a.pid")" 2>/dev/null &&
        [ "$(curl -s -o /dev/null -m 10 -w '%{http_code}' "$S/healthz")" = 200 ]
}

# A group of cases: `case_done` after each single case checks /healthz
# (cases_run does the same for batched ones); `group_end NAME` reports the
# group and checks that nothing was stored.
GROUP_N=0 GROUP_BAD=0
case_done() {  # NAME OK(0/1) DETAIL
    GROUP_N=$((GROUP_N + 1))
    if [ "$2" != 0 ]; then fail "$1" "$3"; GROUP_BAD=$((GROUP_BAD + 1)); fi
    if ! alive; then
        fail "server still answers after: $1" "$(tail -n 20 "$LOG")"
        exit 1
    fi
}
CASES_TOTAL=0
group_end() {
    local now
    now=$(stored)
    CASES_TOTAL=$((CASES_TOTAL + GROUP_N))
    if [ "$GROUP_BAD" = 0 ]; then ok "$1 ($GROUP_N cases, /healthz answered after each)"; fi
    check "$1: nothing stored" "$now" "$STORED"
    GROUP_N=0 GROUP_BAD=0
}

# ctype: the Content-Type of the last answer (curl -D "$WORK/headers").
ctype() {
    local line type=""
    while IFS= read -r line; do
        line=${line%$'\r'}
        [[ ${line,,} == content-type:* ]] && type=${line#*: }
    done < "$WORK/headers"
    printf '%s' "$type"
}

# json_error NAME STATUS [CODE]: the last answer (req) is STATUS with a
# JSON body {"error":{"code":CODE,...}}.
json_error() {
    local name=$1 want=$2 code=${3:-} got type
    got=$(jq -r '.error.code // empty' "$WORK/body" 2>/dev/null)
    type=$(ctype)
    if [ "$STATUS" != "$want" ]; then
        case_done "$name" 1 "status $STATUS, want $want; body: $(printf '%.200s' "$BODY")"
    elif [ "$type" != application/json ] || [ -z "$got" ]; then
        case_done "$name" 1 "not a JSON error (Content-Type '$type'): $(printf '%.200s' "$BODY")"
    elif [ -n "$code" ] && [ "$got" != "$code" ]; then
        case_done "$name" 1 "error code $got, want $code; body: $(printf '%.200s' "$BODY")"
    else
        case_done "$name" 0
    fi
}

# Batched cases, so that a group costs one curl and one jq however many
# cases it holds: case_add queues a request and a GET /healthz right after
# it; cases_run sends them all (one connection, kept alive where the server
# allows) and checks each answer is WANT (a status, or 4xx) with a
# single-line JSON body {"error":{"code":CODE}} and Content-Type
# application/json, and that /healthz answered 200 after it.
# CASE_REQ keeps each case's method and URL for the response log (resp_log).
CASE_ARGS=() CASE_WANT=() CASE_REQ=()
case_add() {  # NAME WANT CODE CURL_ARGS... (method, headers, body, URL last)
    local name=$1 want=$2 code=$3 method=GET a prev=""
    shift 3
    for a in "$@"; do [ "$prev" = -X ] && method=$a; prev=$a; done
    [ ${#CASE_ARGS[@]} -gt 0 ] && CASE_ARGS+=(--next)
    CASE_ARGS+=(-s -m 20 -w '\n%{http_code} %{content_type}\n' "$@"
                --next -s -m 10 -o /dev/null -w 'H%{http_code}\n' "$S/healthz")
    CASE_WANT+=("$want|$code|$name")
    CASE_REQ+=("$method ${!#}")
}
json_add() {  # NAME WANT CODE METHOD PATH TOKEN FILE [CONTENT_TYPE [curl args...]]
    local name=$1 want=$2 code=$3 method=$4 path=$5 token=$6 file=$7 type=${8:-application/json}
    shift 7; [ $# -gt 0 ] && shift
    case_add "$name" "$want" "$code" -X "$method" ${token:+-H "Authorization: Bearer $token"} \
             -H "Content-Type: $type" --data-binary "@$file" "$@" "$S$path"
}
cases_run() {
    local i n=${#CASE_WANT[@]} want code name answer status type health lines codes
    curl "${CASE_ARGS[@]}" > "$WORK/cases.out"
    mapfile -t lines < "$WORK/cases.out"
    for ((i = 0; i < n; i++)); do printf '%s\n' "${lines[3 * i]-}"; done > "$WORK/cases.bodies"
    mapfile -t codes < <(jq -R -r 'try (fromjson | .error.code // "(none)") catch "(not JSON)"' "$WORK/cases.bodies")
    for ((i = 0; i < n; i++)); do
        IFS='|' read -r want code name <<<"${CASE_WANT[i]}"
        answer=${lines[3 * i]-} status=${lines[3 * i + 1]%% *} type=${lines[3 * i + 1]#* } health=${lines[3 * i + 2]-}
        [ "${#lines[@]}" = $((3 * n)) ] && resp_log "${CASE_REQ[i]%% *}" "${CASE_REQ[i]#* }" "$status" "$type" "$answer"
        GROUP_N=$((GROUP_N + 1))
        if [ "${#lines[@]}" != $((3 * n)) ]; then
            fail "$name" "answers are not one line each: $(head -c 300 "$WORK/cases.out")"
            GROUP_BAD=$((GROUP_BAD + 1)); break
        elif [ "$health" != H200 ]; then
            fail "server still answers after: $name" "$health; $(tail -n 20 "$LOG")"
            exit 1
        elif { [ "$want" = 4xx ] && [ "${status:0:1}" != 4 ]; } || { [ "$want" != 4xx ] && [ "$status" != "$want" ]; }; then
            fail "$name" "status $status, want $want; body: $(printf '%.200s' "$answer")"
        elif [ "$type" != application/json ] || [ "${codes[i]}" = "(none)" ] || [ "${codes[i]}" = "(not JSON)" ]; then
            fail "$name" "not a JSON error (Content-Type '$type'): $(printf '%.200s' "$answer")"
        elif [ -n "$code" ] && [ "${codes[i]}" != "$code" ]; then
            fail "$name" "error code ${codes[i]}, want $code; body: $(printf '%.200s' "$answer")"
        else
            continue
        fi
        GROUP_BAD=$((GROUP_BAD + 1))
    done
    CASE_ARGS=() CASE_WANT=() CASE_REQ=()
}

# raw FILE: sends FILE's bytes on a new connection and reads until the
# server closes it (10 s at most).  Sets RAW (the answer, CRs dropped) and
# RAW_STATUS: its status code, or "closed" if none came.
raw() {
    local fd
    exec {fd}<>"/dev/tcp/127.0.0.1/$PORT"
    cat "$1" >&"$fd" 2>/dev/null
    RAW=$(timeout 10 cat <&"$fd" 2>/dev/null | tr -d '\r')
    exec {fd}>&-
    RAW_STATUS=$(printf '%s\n' "$RAW" | head -n 1 | awk '/^HTTP\/1\.[01] [0-9][0-9][0-9]/ { print $2 }')
    [ -n "$RAW_STATUS" ] || RAW_STATUS=closed
}

# raw_expect NAME ALLOWED...: RAW_STATUS is one of ALLOWED (codes, "closed").
raw_expect() {
    local name=$1 a
    shift
    for a in "$@"; do
        if [ "$RAW_STATUS" = "$a" ]; then case_done "$name" 0; return; fi
    done
    case_done "$name" 1 "got '$RAW_STATUS', want one of: $*; answer: $(printf '%.200s' "$RAW")"
}

# raw_json NAME STATUS CODE: RAW is STATUS with a JSON error CODE.
raw_json() {
    local body method target type
    body=$(printf '%s' "$RAW" | sed '1,/^$/d')
    # To the response log, as the request line of $WORK/raw asked.
    read -r method target _ < "$WORK/raw"
    type=$(printf '%s' "$RAW" | sed -n '1,/^$/s/^[Cc]ontent-[Tt]ype: *//p')
    [[ $target == /* ]] && target="http://127.0.0.1:$PORT$target"
    [[ $RAW_STATUS == [0-9]* ]] && resp_log "$method" "$target" "$RAW_STATUS" "$type" "$body"
    if [ "$RAW_STATUS" = "$2" ] && [ "$(printf '%s' "$body" | jq -r .error.code 2>/dev/null)" = "$3" ]; then
        case_done "$1" 0
    else
        case_done "$1" 1 "got $RAW_STATUS: $(printf '%.300s' "$RAW")"
    fi
}

# ---- bodies that are not JSON objects, on every route that parses one
B="$WORK/bodies"
mkdir -p "$B"
head -c 100000 /dev/zero | tr '\0' '[' > "$B/deep-array"
yes '{"a":' 2>/dev/null | head -n 100000 | tr -d '\n' > "$B/deep-object"
printf '{"name":"\xff\xfe"}' > "$B/utf8-invalid-value"
printf '{"\xc3\x28":1}' > "$B/utf8-invalid-key"
printf '{"name":"\xc0\xaf"}' > "$B/utf8-overlong"
printf '{"name":"\xed\xa0\x80"}' > "$B/utf8-surrogate"
printf '{"name":"\\ud800"}' > "$B/escaped-lone-surrogate"
printf '{"name":"a\0b"}' > "$B/raw-nul"
printf '{"name":"a\\u0000b"}' > "$B/escaped-nul"
printf '{"a\\u0000b":1}' > "$B/escaped-nul-key"
printf '{"a":1,"a":2}' > "$B/duplicate-keys"
: > "$B/empty"
printf '   \n' > "$B/whitespace"
printf '[1,2]' > "$B/array"
printf '42' > "$B/scalar"
printf '{"a":' > "$B/truncated"
printf '{} x' > "$B/trailing-garbage"
printf '\xef\xbb\xbf{}' > "$B/byte-order-mark"
printf '{"a":NaN}' > "$B/nan"
printf '{"a":Infinity}' > "$B/infinity"
printf '{"a":1e400}' > "$B/1e400"
printf '{"a":99999999999999999999999}' > "$B/big-integer"

# route: METHOD PATH TOKEN TEMPLATE INT_PATH FLOAT_PATH (jq paths; - for none)
NCCL_ID=$(printf '%0256d' 0)
ROUTES=(
    "POST|/v1/jobs|$ADMIN|$JOB|.training.steps|.training.learning_rate"
    "POST|/v1/agent/register|$JOIN|{\"name\":\"x\",\"peer_address\":\"h:1\",\"hardware\":{\"tflops\":1,\"cpu_cores\":8}}|.hardware.cpu_cores|.hardware.tflops"
    "POST|/v1/agent/heartbeat|$T1|{\"state\":\"busy\",\"job_id\":$J,\"step\":1}|.step|-"
    "PUT|/v1/links|$T1|{\"samples\":[{\"to\":$N1,\"latency_ms\":1,\"bandwidth_gbps\":10}]}|.samples[0].to|.samples[0].bandwidth_gbps"
    "POST|/v1/agent/progress|$T1|{\"job_id\":$J,\"epoch\":1,\"step\":0,\"stage\":0,\"replica\":0,\"iteration_s\":1,\"compute_s\":1,\"send_s\":0,\"recv_wait_s\":0,\"allreduce_s\":0,\"bubble_s\":0,\"tokens\":1}|.tokens|.iteration_s"
    "POST|/v1/agent/failure|$T1|{\"job_id\":$J,\"epoch\":1,\"stage\":0,\"replica\":0,\"reason\":\"x\"}|.epoch|-"
    "PUT|/v1/agent/nccl|$T1|{\"job_id\":$J,\"epoch\":1,\"stage\":0,\"unique_id\":\"$NCCL_ID\"}|.stage|-"
    "POST|/v1/agent/dataset|$T1|{\"job_id\":$J,\"epoch\":1,\"source\":\"data\",\"sha256\":null}|.epoch|-"
    "POST|/v1/jobs/$J/schedule|$ADMIN|{\"budget_ms\":100}|.budget_ms|-"
    "POST|/v1/jobs/$J/plan|$ADMIN|{\"seed\":1,\"stages\":[]}|.seed|-"
)

# Every route that parses a JSON body gets every malformed body, and
# numbers no field can hold where it expects an integer and a float.
for r in "${ROUTES[@]}"; do
    IFS='|' read -r method path token template int_path float_path <<<"$r"
    for f in "$B"/*; do
        name=$(basename "$f")
        # An empty body asks /schedule for its defaults: not bad input.
        [ "$name" = empty ] && [ "${path##*/}" = schedule ] && continue
        json_add "$method $path: $name is 400 invalid_json" 400 invalid_json "$method" "$path" "$token" "$f"
    done
    numbers=("$int_path|99999999999999999999999|400" "$int_path|-99999999999999999999999|400"
             "$int_path|1e400|400" "$int_path|9223372036854775807|4xx" "$int_path|-9223372036854775808|4xx"
             "$int_path|1e308|4xx")
    [ "$float_path" != - ] && numbers+=("$float_path|1e400|400" "$float_path|-1e400|400" "$float_path|NaN|400"
                                        "$float_path|Infinity|400" "$float_path|-Infinity|400" "$float_path|1e308|4xx")
    i=0
    for n in "${numbers[@]}"; do
        IFS='|' read -r at literal want <<<"$n"
        i=$((i + 1))
        printf '%s' "$template" | jq -c "$at = \"@@N@@\"" | sed "s/\"@@N@@\"/$literal/" > "$WORK/number-$i"
        if [ "$want" = 400 ]; then
            json_add "$method $path: $at = $literal is 400 invalid_json" 400 invalid_json "$method" "$path" "$token" "$WORK/number-$i"
        else
            json_add "$method $path: $at = $literal is a 4xx" 4xx "" "$method" "$path" "$token" "$WORK/number-$i"
        fi
    done
    cases_run
    group_end "$method $path: malformed bodies, huge numbers, NaN and Infinity are refused"
done

# ---- addresses a node may not name and policies it may not claim: every
# spelling of the metadata service, the unspecified address and multicast
# is resolved and refused (common/hostport.h), in a registration and a
# heartbeat; a policy is checked field by field; a node outside a job may
# not claim its dataset
REG='{"name":"x","peer_address":"10.0.0.2:7000","hardware":{"tflops":1,"cpu_cores":8}}'
i=0
for a in 0:7000 0x0:7000 00:7000 2852039166:7000 0251.0376.0251.0376:7000 0xa9.0xfe.0xa9.0xfe:7000 \
         169.254.169.254:80 '[::ffff:169.254.169.254]:7000' '[::ffff:a9fe:a9fe]:7000' '[::ffff:0.0.0.0]:7000' \
         '[64:ff9b::a9fe:a9fe]:7000' '[2002:a9fe:a9fe::1]:7000' '[fe80::1%lo]:7000' '[::]:7000' \
         3758096385:7000 224.0.0.1:7000 '[ff02::1]:7000' 255.255.255.255:7000 240.1.2.3:7000 localhost:0; do
    i=$((i + 1))
    printf '%s' "$REG" | jq -c --arg a "$a" '.peer_address = $a' > "$WORK/addr-$i"
    json_add "register: peer_address $a is 422" 422 invalid_field POST /v1/agent/register "$JOIN" "$WORK/addr-$i"
    jq -n -c --arg a "$a" '{state: "idle", peer_address: $a}' > "$WORK/hb-$i"
    json_add "heartbeat: peer_address $a is 422" 422 invalid_field POST /v1/agent/heartbeat "$T1" "$WORK/hb-$i"
done
i=0
for p in '{"data_roots":["relative"]}' '{"data_roots":[]}' '{"data_roots":"/srv"}' '{"data_roots":[1]}' \
         '{"threads":0}' '{"threads":4097}' '{"max_memory_bytes":0}' '{"gpus":2}' '[]' '"/srv"'; do
    i=$((i + 1))
    printf '%s' "$REG" | jq -c --argjson p "$p" '.policy = $p' > "$WORK/policy-$i"
    json_add "register: policy $p is a 4xx" 4xx "" POST /v1/agent/register "$JOIN" "$WORK/policy-$i"
done
printf '{"job_id":%s,"epoch":1,"source":"data","sha256":"%064d"}' "$J" 0 > "$WORK/claim"
json_add "dataset: a node outside the job may not claim its dataset (404)" 404 not_found POST /v1/agent/dataset "$T1" "$WORK/claim"
printf '{"job_id":%s,"epoch":1,"source":"data","sha256":"xyz"}' "$J" > "$WORK/claim-bad"
json_add "dataset: a digest that is not 64 hex digits is 422" 422 invalid_field POST /v1/agent/dataset "$T1" "$WORK/claim-bad"
cases_run
group_end "addresses that resolve to refused ones, bad policies and strangers' dataset claims are refused"
check "the node's peer address is as it registered" "$(sql a "SELECT peer_address, policy IS NULL FROM nodes WHERE id = $N1")" \
    "10.0.0.1:7000|t"

# ---- content types
printf '{"x":1}' > "$WORK/unknown-field"
for ct in text/plain application/x-www-form-urlencoded application/jsonx 'multipart/form-data; boundary=x' text/json; do
    json_add "Content-Type $ct is 415" 415 unsupported_media_type POST /v1/jobs "$ADMIN" "$WORK/unknown-field" "$ct"
    json_add "heartbeat with Content-Type $ct is 415" 415 unsupported_media_type POST /v1/agent/heartbeat "$T1" "$WORK/unknown-field" "$ct"
done
json_add "Content-Type Application/JSON with a charset is JSON (400, not 415)" 400 "" \
         POST /v1/jobs "$ADMIN" "$WORK/unknown-field" 'Application/JSON; charset=utf-8'
cases_run
group_end "wrong content types"

# ---- oversized bodies (--max-body 1 MiB)
head -c 2000000 /dev/zero | tr '\0' ' ' > "$WORK/big"
json_add "a 2 MB body is 413" 413 body_too_large POST /v1/jobs "$ADMIN" "$WORK/big"
json_add "a 2 MB chunked body is 413" 413 body_too_large POST /v1/jobs "$ADMIN" "$WORK/big" "" -H 'Transfer-Encoding: chunked'
json_add "a 2 MB body sent without waiting for 100-continue is 413" 413 body_too_large \
         POST /v1/jobs "$ADMIN" "$WORK/big" "" -H 'Expect:'
json_add "a 2 MB chunked heartbeat sent at once is 413" 413 body_too_large \
         POST /v1/agent/heartbeat "$T1" "$WORK/big" "" -H 'Transfer-Encoding: chunked' -H 'Expect:'
json_add "an upload without a token is refused before its body (401)" 401 unauthorized \
         PUT "/v1/jobs/$J/checkpoints/0/stages/0" "" "$WORK/big" application/octet-stream
cases_run
printf 'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 99999999999999999999999\r\nConnection: close\r\n\r\n{}' > "$WORK/raw"
raw "$WORK/raw"; raw_expect "a Content-Length too large to represent is 413 or closed" 413 closed
printf 'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 12abc\r\nConnection: close\r\n\r\n{}' > "$WORK/raw"
raw "$WORK/raw"; raw_expect "an unparsable Content-Length is 400 or closed" 400 closed
# Those two are answered by libmicrohttpd itself, and 0.9.75 writes that
# answer's header block twice (docs/operations.md, "Limits"; fixed in
# libmicrohttpd 1.0.0, which this checks answers once).
MHD_VERSION=$(pkg-config --modversion libmicrohttpd 2>/dev/null || echo 0)
for cl in 12abc 99999999999999999999999; do
    printf 'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %s\r\nConnection: close\r\n\r\n{}' "$cl" > "$WORK/raw"
    raw "$WORK/raw"
    answers=$(printf '%s\n' "$RAW" | grep -c '^HTTP/1\.[01] [0-9][0-9][0-9] ')
    if [ "$(printf '%s\n1.0.0\n' "$MHD_VERSION" | sort -V | head -n 1)" = 1.0.0 ]; then
        case_done "Content-Length: $cl is answered once" "$([ "$answers" -le 1 ] && echo 0 || echo 1)" \
                  "$answers status lines: $(printf '%.300s' "$RAW")"
    else
        ok "Content-Length: $cl is answered once # SKIP libmicrohttpd $MHD_VERSION answers it itself, its header block $answers times"
    fi
done
group_end "oversized bodies"

# ---- ambiguous framing (request smuggling through a proxy in front)
printf 'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 7\r\nConnection: close\r\n\r\n{}' "$ADMIN" > "$WORK/raw"
raw "$WORK/raw"; raw_json "two Content-Length headers are 400 ambiguous_length" 400 ambiguous_length
printf 'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n' "$ADMIN" > "$WORK/raw"
raw "$WORK/raw"; raw_json "Content-Length with Transfer-Encoding is 400 ambiguous_length" 400 ambiguous_length
printf 'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n{}\r\n0\r\n\r\n' "$ADMIN" > "$WORK/raw"
raw "$WORK/raw"; raw_expect "a malformed chunk size is 400 or closed" 400 closed
printf 'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nFFFFFFFFFFFFFFFFFFFF\r\n{}\r\n0\r\n\r\n' "$ADMIN" > "$WORK/raw"
raw "$WORK/raw"; raw_expect "a chunk size over 64 bits is 4xx or closed" 400 413 closed
# A transfer coding other than chunked frames no body this server can read:
# 501 at once (it used to hang to the idle timeout, or close unanswered).
for te in identity 'gzip, chunked' gzip 'chunked, chunked'; do
    printf 'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nTransfer-Encoding: %s\r\n\r\n{}' "$ADMIN" "$te" > "$WORK/raw"
    raw "$WORK/raw"; raw_json "Transfer-Encoding: $te (no Content-Length) is 501 not_implemented" 501 not_implemented
done
group_end "ambiguous and broken framing"

# ---- truncated bodies: the client sends less than it said, then leaves
head_for() {  # METHOD PATH TOKEN LENGTH: a request head announcing a LENGTH-byte JSON body
    printf '%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %s\r\n\r\n' \
           "$1" "$2" "$3" "$4"
}
truncated() {  # NAME METHOD PATH TOKEN LENGTH BODY_PART: sends the head and part of the body, then leaves
    local fd
    { head_for "$2" "$3" "$4" "$5"; printf '%s' "$6"; } > "$WORK/raw"
    exec {fd}<>"/dev/tcp/127.0.0.1/$PORT"
    cat "$WORK/raw" >&"$fd" 2>/dev/null
    exec {fd}>&-
    sleep 0.1
    case_done "$1" 0
}
truncated "a job body cut off after 20 of 1000 bytes" POST /v1/jobs "$ADMIN" 1000 '{"name":"cut","model'
truncated "a registration cut off" POST /v1/agent/register "$JOIN" 500 '{"name":"cut",'
truncated "a heartbeat cut off" POST /v1/agent/heartbeat "$T1" 100 '{"state":'
truncated "a links body cut off" PUT /v1/links "$T1" 100 '{"samples":[{"to":'
truncated "a checkpoint upload cut off" PUT "/v1/jobs/$J/checkpoints/0/stages/0" "$T1" 1000000 'abcdefgh'
printf 'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n{"na' "$ADMIN" > "$WORK/raw"
exec {fd}<>"/dev/tcp/127.0.0.1/$PORT"; cat "$WORK/raw" >&"$fd"; exec {fd}>&-
case_done "a chunked body cut off inside a chunk" 0
group_end "truncated bodies"

# ---- path traversal and odd paths against the static files at /
# (they are compiled into the binary: nothing may come from disk, and a
# decoded NUL must not cut a path short)
for p in '/../../etc/passwd' '/%2e%2e/%2e%2e/etc/passwd' '/%2E%2E/%2E%2E/etc/passwd' '/..%2f..%2fetc%2fpasswd' \
         '/..%5c..%5cetc%5cpasswd' '/web/../server/main.c' '/web/app.js' '/server/main.c' '//etc/passwd' \
         '/./app.js' '/app.js/..' '/%00' '/app.js%00.txt' '/index.html%00' '/%c0%ae%c0%ae/etc/passwd' \
         '/%ff%fe' '/..;/etc/passwd' '/v1/../../etc/passwd' '/v1/%2e%2e/%2e%2e/etc/passwd'; do
    case_add "GET $p is 404 JSON" 404 not_found --path-as-is "$S$p"
done
cases_run
for p in '/app.js/' '/app.js?../../etc/passwd=1'; do
    # The router drops one trailing slash, and a query is not a path: the real file.
    STATUS=$(curl -s --path-as-is -m 10 -o "$WORK/body" -w '%{http_code}' "$S$p")
    check "GET $p is app.js itself" "$STATUS $(head -c 10 "$WORK/body")" "200 // app.js "
done
req GET "$S/v1/jobs/%00" "$ADMIN"; CTYPE=$(ctype)
json_error "an encoded NUL in an id is 400 invalid_id" 400 invalid_id
for n in 2147483648 9223372036854775807; do   # a step or a stage is an int: larger is a bad id, not a 500
    req GET "$S/v1/jobs/$J/checkpoints/1/stages/$n" "$ADMIN"; CTYPE=$(ctype)
    json_error "a stage of $n in the checkpoint routes is 400 invalid_id" 400 invalid_id
    req GET "$S/v1/jobs/$J/checkpoints/$n/stages/0" "$ADMIN"; CTYPE=$(ctype)
    json_error "a step of $n is 400 invalid_id" 400 invalid_id
done
req GET "$S/v1/jobs?state=%00" "$ADMIN"; CTYPE=$(ctype)
json_error "an encoded NUL in a query value is 400" 400
printf 'GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' > "$WORK/raw"
raw "$WORK/raw"; raw_json "a raw request line with .. is 404 JSON" 404 not_found
printf 'GET http://x/../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' > "$WORK/raw"
raw "$WORK/raw"; raw_expect "an absolute-form URL with .. is a 4xx or closed" 400 404 closed
printf 'BREW /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' > "$WORK/raw"
raw "$WORK/raw"; raw_json "an unknown method is 405 JSON" 405 method_not_allowed
group_end "path traversal"

# ---- header floods (--connection-memory 32 KiB): libmicrohttpd answers these itself
{ printf 'GET /healthz HTTP/1.1\r\nHost: x\r\n'; for i in $(seq 1 5000); do printf 'X-Flood-%d: v\r\n' "$i"; done; printf 'Connection: close\r\n\r\n'; } > "$WORK/raw"
raw "$WORK/raw"; raw_expect "5000 headers are 431 or closed" 431 closed
{ printf 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: '; head -c 1048576 /dev/zero | tr '\0' 'a'; printf '\r\nConnection: close\r\n\r\n'; } > "$WORK/raw"
raw "$WORK/raw"; raw_expect "one 1 MiB header is 431 or closed" 431 closed
{ printf 'GET /'; head -c 100000 /dev/zero | tr '\0' 'a'; printf ' HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'; } > "$WORK/raw"
raw "$WORK/raw"; raw_expect "a 100 kB URL is 414 or closed" 414 closed
{ printf 'GET /v1/nodes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer '; head -c 20000 /dev/zero | tr '\0' 'a'; printf '\r\nConnection: close\r\n\r\n'; } > "$WORK/raw"
raw "$WORK/raw"; raw_expect "a 20 kB token is 401, or 431 when it does not fit" 401 431
{ printf 'GET /healthz HTTP/1.1\r\nHost: x\r\n'; for i in $(seq 1 200); do printf 'X-Many: %d\r\n' "$i"; done; printf 'Connection: close\r\n\r\n'; } > "$WORK/raw"
raw "$WORK/raw"; raw_expect "200 small headers are served" 200
printf 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Nul: a\0b\r\nConnection: close\r\n\r\n' > "$WORK/raw"
raw "$WORK/raw"; raw_expect "a NUL in a header value is served or refused, never a 5xx" 200 400 closed
printf 'GARBAGE\r\n\r\n' > "$WORK/raw"
raw "$WORK/raw"; raw_expect "a request line that is not HTTP is 400 or closed" 400 closed
printf 'GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n' > "$WORK/raw"
raw "$WORK/raw"; raw_expect "an unknown HTTP version is 505 or closed" 505 closed
group_end "header floods and broken heads"

# ---- too many connections from one address (--max-connections-per-address 8)
held=()
for _ in $(seq 1 $PER_ADDR); do
    exec {fd}<>"/dev/tcp/127.0.0.1/$PORT"
    held+=("$fd")
done
sleep 0.3
st=$(curl -s -o /dev/null -m 5 -w '%{http_code}' "$S/healthz")
check "connection $((PER_ADDR + 1)) from one address is closed on accept" "$st" 000
st=$(curl -s -o /dev/null -m 5 --interface 127.0.0.2 -w '%{http_code}' "$S/healthz")
check "meanwhile another address is served" "$st" 200
printf 'GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n' "$ADMIN" >&"${held[0]}"
st=$(timeout 5 cat <&"${held[0]}" | tr -d '\r' | head -n 1)
check "and a connection within the limit is served" "$st" "HTTP/1.1 200 OK"
for fd in "${held[@]}"; do exec {fd}>&-; done
sleep 0.3
req GET "$S/healthz"; expect "once they close, the address is served again" 200

# ---- slow clients (--idle-timeout 3, --request-timeout 2)
# A long-poll waits longer than either: suspended, it must not be cut.
curl -s -m 20 -o "$WORK/longpoll" -w '%{http_code}' -H "Authorization: Bearer $T1" \
     "$S/v1/agent/assignment?wait=$((IDLE + REQ + 1))" > "$WORK/longpoll.status" &
longpoll_pid=$!

# slow NAME AT_ONCE DRIBBLED: on one connection sends file AT_ONCE (may be
# empty), then file DRIBBLED a byte every 0.2 s, and waits for the server to
# close it before the last byte; meanwhile another client is served.
slow() {
    local name=$1 dribbled=$3 fd size dribbler rc st
    size=$(stat -c %s "$dribbled")
    rm -f "$WORK/dribbled-all"
    exec {fd}<>"/dev/tcp/127.0.0.1/$PORT"
    cat "$2" >&"$fd"
    ( for i in $(seq 0 $((size - 1))); do
          dd if="$dribbled" bs=1 skip="$i" count=1 status=none >&"$fd" 2>/dev/null || exit 0
          sleep 0.2
      done
      touch "$WORK/dribbled-all" ) &
    dribbler=$!
    sleep 0.5
    st=$(curl -s -o /dev/null -m 10 -w '%{http_code}' -H "Authorization: Bearer $ADMIN" "$S/v1/jobs")
    check "$name: other clients are served meanwhile" "$st" 200
    read -r -t 60 -u "$fd" _; rc=$?
    if [ "$rc" = 1 ] && [ ! -e "$WORK/dribbled-all" ]; then
        ok "$name: the server closes it before it is done"
    else
        fail "$name: the server closes it before it is done" \
             "read status $rc (1: closed, >128: timed out); all sent: $([ -e "$WORK/dribbled-all" ] && echo yes || echo no)"
    fi
    kill "$dribbler" 2>/dev/null; wait "$dribbler" 2>/dev/null
    exec {fd}>&-
    if alive; then ok "$name: the server still answers"; else fail "$name: the server still answers"; fi
}
head_for POST /v1/jobs "$ADMIN" 200 > "$WORK/slow-head-part"
printf '%*s' 200 '' > "$WORK/slow-body-part"
slow "a body dribbled a byte at a time" "$WORK/slow-head-part" "$WORK/slow-body-part"
check "the log says why the body was dropped" "$(grep -c 'body is still arriving' "$LOG")" 1
: > "$WORK/nothing"
{ printf 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: '; printf '%*s' 200 '' | tr ' ' 'a'; printf '\r\n\r\n'; } > "$WORK/slow-head"
slow "headers dribbled a byte at a time" "$WORK/nothing" "$WORK/slow-head"
check "the log says why the head was cut" "$(grep -c 'request head was still arriving' "$LOG")" 1
exec {fd}<>"/dev/tcp/127.0.0.1/$PORT"
read -r -t 30 -u "$fd" _; rc=$?
check "a connection that sends nothing is closed (idle timeout)" "$rc" 1
exec {fd}>&-
wait "$longpoll_pid"
check "a long-poll waiting longer than both timeouts is answered, not cut" \
      "$(cat "$WORK/longpoll.status") $(jq -c .assignment "$WORK/longpoll")" "200 null"

# ---- failed-token rate limiting (--auth-failures 5 per --auth-failure-window 5 s), from 127.0.0.3
X=(--interface 127.0.0.3)
for i in $(seq 1 $FAILS_MAX); do
    if [ $((i % 2)) = 0 ]; then req GET "$S/v1/nodes" "" "" "${X[@]}"; else req GET "$S/v1/nodes" "wrong-$i" "" "${X[@]}"; fi
    CTYPE=$(ctype)
    json_error "bad token $i of $FAILS_MAX is 401" 401 unauthorized
done
req GET "$S/v1/nodes" "$ADMIN" "" "${X[@]}"; CTYPE=$(ctype)
json_error "then even the admin token from that address is 429" 429 too_many_failures
RETRY=$(grep -i '^Retry-After:' "$WORK/headers" | tr -d '\r' | awk '{ print $2 }')
check "with Retry-After in whole seconds up to the window" "$(case "$RETRY" in [1-9]) [ "$RETRY" -le $WINDOW ] && echo ok;; esac)" ok
req POST "$S/v1/agent/register" "$JOIN" '{"name":"blocked","peer_address":"h:1","hardware":{"tflops":1,"cpu_cores":8}}' "${X[@]}"
CTYPE=$(ctype)
json_error "every route needing a token is 429 for it" 429 too_many_failures
req GET "$S/healthz" "" "" "${X[@]}"; expect "open routes still answer it" 200
req GET "$S/v1/nodes" "$ADMIN"; expect "another address is not blocked" 200
group_end "failed-token flood"
scrape
check "blocked answers are counted in /metrics" \
      "$(value 'shoal_http_requests_total{route="/v1/nodes",method="GET",status="429"}')" 1
check "the block is logged" "$(grep -c 'failed token attempts within' "$LOG")" 1
sleep "$RETRY.2"
req GET "$S/v1/nodes" "$ADMIN" "" "${X[@]}"; expect "after Retry-After the address is served again" 200

check "nothing was stored by any of it" "$(stored)" "$STORED"

# ---- an agent behind a blocked address waits the block out instead of
# giving up (its control client retries a 429 after Retry-After)
. "$(dirname "$0")/agents.sh"
for i in $(seq 1 $FAILS_MAX); do req GET "$S/v1/nodes" "wrong-$i"; done
req GET "$S/v1/nodes" "$ADMIN"; expect "127.0.0.1 is blocked now" 429 .error.code too_many_failures
start_agent patient a
registered() { [ "$(sql a "SELECT count(*) FROM nodes WHERE name = 'patient'")" = 1 ]; }
if wait_for 30 registered; then ok "an agent refused with 429 registers once the block lifts"
else fail "an agent refused with 429 registers once the block lifts" "$(tail -n 3 "$WORK/agent-patient.log")"; fi
check "and logged the refusal" "$(grep -c 'HTTP 429' "$WORK/agent-patient.log" | awk '{ print ($1 > 0) }')" 1
stop_agent patient
check "the agent exits cleanly" "$AGENT_RC" 0
check "no sanitizer report in the log" "$(grep -c -e 'runtime error' -e 'AddressSanitizer' "$LOG")" 0
stop_server a
[ "$FAILS" = 0 ] && echo "# all bad-input checks passed ($CASES_TOTAL grouped cases)" || echo "# $FAILS failed"
exit $((FAILS > 0))
