#!/usr/bin/env bash
# test_examples.sh - the example commands of README.md, docs/*.md and deploy/README.md
# run as written against a live server, and what they print compared with
# the answers the documents show.
#
# The convention (docs/api.md, "Examples"): a fenced sh block preceded by
# `<!-- example: NAME ... -->` is run, every block of a file in order and
# in one shell, so a variable one block sets is there for the next.  A line
# `# -> ANSWER` after a command (or at the end of its last line) is what
# that command prints: JSON is compared value by value, with the same keys
# at every level, where "..." stands for any value and "abc..." for a
# string that starts with abc; anything else is compared as a line of text.
# Several `# -> ` lines are successive JSON values or lines.  A command
# with no answer shown must still succeed, write nothing to stderr, and
# print no JSON with an "error" member.
#
# What the test changes, and says so: a command that sets the address
# variable S is not run (S is the live server's URL; the documents name
# the port they are served on); a command that needs a Docker engine
# (`docker ...`) is not run.  Tokens come from where the documents say
# (shoal-data/admin.token, deploy/.env).  Blocks without a marker are
# listed with the reason they are not run; every block that calls the API
# with curl must have one.
set -u
. "$(dirname "$0")/lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)

if ! command -v python3 >/dev/null 2>&1; then
    fail "python3 is installed" "the examples are extracted and compared with python3"
    exit 1
fi

# ---- the extractor: blocks -> units (one complete shell command each) ------
cat > "$WORK/examples.py" <<'PY'
import json, os, re, subprocess, sys

ANSWER = re.compile(r"^\s*# -> (.*)$")
TRAILING = re.compile(r"\s# -> (.*)$")
MARKER = re.compile(r"^<!-- example: ([A-Za-z0-9_-]+)(.*)-->\s*$")

def complete(text):
    """True when `text` is one or more whole shell commands (bash -n)."""
    if text.rstrip().endswith("\\"):
        return False
    return subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True).returncode == 0

def parse_answer(first, more):
    """An answer from the text after '# -> ' and the comment lines after it:
    ("json", value) or ("text", line).  JSON may go on over the following
    comment lines; text after a complete JSON value is commentary."""
    t = first.strip()
    if t[:1] in '{["' or re.match(r"^(-?\d|true\b|false\b|null\b)", t):
        dec = json.JSONDecoder()
        used = 0
        while True:
            try:
                val, _ = dec.raw_decode(t)
                return ("json", val), used
            except ValueError as e:
                if used >= len(more):
                    raise ValueError("the answer is not JSON (%s): %s" % (e, t[:200]))
                t += " " + more[used]
                used += 1
    return ("text", first.rstrip()), 0

def extract(path, label):
    lines = open(path).read().split("\n")
    blocks, i, marker = [], 0, None
    while i < len(lines):
        m = MARKER.match(lines[i])
        if m:
            r = re.search(r"run by (\S+?)\)?\s*$", m.group(2).strip())
            marker = (m.group(1), r.group(1) if r else None)
        if lines[i].startswith("```"):
            lang = lines[i][3:].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            blocks.append({"file": label, "line": i + 1, "lang": lang, "name": marker,
                           "body": lines[i + 1:j], "first": i + 2})
            i, marker = j + 1, None
            continue
        if lines[i].strip() and not m:
            marker = None
        i += 1
    return blocks

def units(block):
    out, cur, start = [], [], None
    body, k = block["body"], 0
    while k < len(body):
        line = body[k]
        a = ANSWER.match(line)
        if a and not cur:
            # only the comment lines right after it can continue it
            run = []
            for x in body[k + 1:]:
                if x.lstrip().startswith("#") and not ANSWER.match(x):
                    run.append(re.sub(r"^\s*#", "", x))
                else:
                    break
            try:
                ans, used = parse_answer(a.group(1), run)
            except ValueError as e:
                raise ValueError("%s:%d: %s" % (block["file"], block["first"] + k, e))
            if not out:
                raise ValueError("%s:%d: an answer before any command" % (block["file"], block["first"] + k))
            out[-1]["answers"].append(ans)
            k += 1 + used
            continue
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            k += 1
            continue
        if not cur:
            start = block["first"] + k
        cur.append(line)
        text = "\n".join(cur) + "\n"
        if complete(text):
            answers = []
            t = TRAILING.search(cur[-1])
            if t:
                try:
                    answers.append(parse_answer(t.group(1), [])[0])
                except ValueError as e:
                    raise ValueError("%s:%d: %s" % (block["file"], start, e))
            first = cur[0].split()[0] if cur[0].split() else ""
            kind = "run"
            if first in ("docker", "docker-compose"):
                kind = "docker"
            elif re.match(r"^S=\S+\s*(#.*)?$", cur[0]) and len(cur) == 1:
                kind = "address"
            out.append({"line": start, "text": text, "answers": answers, "kind": kind})
            cur = []
        k += 1
    if cur:
        raise ValueError("%s:%d: an incomplete command at the end of the block" % (block["file"], start))
    return out

def main():
    top, outdir, me = sys.argv[1], sys.argv[2], sys.argv[3]
    n = 0
    index = []
    docs = sorted("docs/" + f for f in os.listdir(os.path.join(top, "docs")) if f.endswith(".md"))
    for label in ["README.md"] + docs + ["deploy/README.md"]:
        for b in extract(os.path.join(top, label), label):
            if b["lang"] not in ("sh", "bash", "shell"):
                continue
            text = "\n".join(b["body"])
            if b["name"] and b["name"][1] and not b["name"][1].endswith("/" + me):
                index.append("skip\t%s:%d\trun by %s\t0" % (label, b["line"], b["name"][1]))
                continue
            if not b["name"]:
                why = ("needs a Docker engine" if re.search(r"^\s*docker\b", text, re.M) else
                       "needs agents or files of another machine" if "bin/shoal-" in text else "not marked")
                index.append("skip\t%s:%d\t%s\t%d" % (label, b["line"], why, bool(re.search(r"\bcurl\b", text))))
                continue
            for u in units(b):
                n += 1
                base = os.path.join(outdir, "%03d" % n)
                with open(base + ".sh", "w") as f:
                    f.write(u["text"])
                with open(base + ".answers", "w") as f:
                    json.dump(u["answers"], f)
                index.append("%s\t%s:%d\t%s\t%03d" % (u["kind"], label, u["line"], b["name"][0], n))
    with open(os.path.join(outdir, "index"), "w") as f:
        f.write("\n".join(index) + "\n")

try:
    main()
except ValueError as e:
    sys.exit(str(e))
PY

# ---- the comparison: one unit's output against its answers -----------------
cat > "$WORK/compare.py" <<'PY'
import json, sys

def decode_all(text):
    dec, vals, i = json.JSONDecoder(), [], 0
    text = text.strip()
    while i < len(text):
        v, i = dec.raw_decode(text, i)
        vals.append(v)
        while i < len(text) and text[i].isspace():
            i += 1
    return vals

def same(doc, got, path="$"):
    """'' when got matches doc, else where it does not."""
    if doc == "...":
        return ""
    if isinstance(doc, str) and doc.endswith("...") and len(doc) > 3:
        return "" if isinstance(got, str) and got.startswith(doc[:-3]) else "%s: %r does not start with %r" % (path, got, doc[:-3])
    if isinstance(doc, dict):
        if not isinstance(got, dict):
            return "%s: %s, not an object" % (path, type(got).__name__)
        if set(doc) != set(got):
            return "%s: keys %s, the document shows %s" % (path, sorted(got), sorted(doc))
        for k in doc:
            r = same(doc[k], got[k], "%s.%s" % (path, k))
            if r:
                return r
        return ""
    if isinstance(doc, list):
        if not isinstance(got, list) or len(got) != len(doc):
            return "%s: %s, the document shows %d element(s)" % (path, json.dumps(got)[:120], len(doc))
        for i, (d, g) in enumerate(zip(doc, got)):
            r = same(d, g, "%s[%d]" % (path, i))
            if r:
                return r
        return ""
    if isinstance(doc, bool) or isinstance(got, bool) or doc is None or got is None:
        return "" if doc is got else "%s: %s, the document shows %s" % (path, json.dumps(got), json.dumps(doc))
    if isinstance(doc, (int, float)) and isinstance(got, (int, float)):
        return "" if float(doc) == float(got) else "%s: %s, the document shows %s" % (path, got, doc)
    return "" if doc == got else "%s: %s, the document shows %s" % (path, json.dumps(got), json.dumps(doc))

answers = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
problems = []
if any(kind == "json" for kind, _ in answers) or out.lstrip()[:1] in ("{", "["):
    try:
        vals = decode_all(out)
    except ValueError:
        vals = None
else:
    vals = None
if answers:
    if answers[0][0] == "json":
        if vals is None:
            problems.append("prints no JSON: %r" % out[:200])
        elif len(vals) != len(answers):
            problems.append("prints %d JSON value(s), the document shows %d" % (len(vals), len(answers)))
        else:
            for (kind, doc), got in zip(answers, vals):
                r = same(doc, got)
                if r:
                    problems.append(r)
    else:
        got = out.rstrip("\n").split("\n")
        want = [a for _, a in answers]
        if got != want:
            problems.append("prints %r, the document shows %r" % (got[:5], want))
elif vals:
    errs = [v for v in vals if isinstance(v, dict) and "error" in v]
    if errs:
        problems.append("answers an error: %s" % json.dumps(errs[0])[:300])
print("; ".join(problems))
PY

mkdir -p "$WORK/units"
if ! python3 "$WORK/examples.py" "$TOP" "$WORK/units" "$(basename "$0")" 2>"$WORK/extract.err"; then
    fail "the examples of README.md, docs/ and deploy/README.md parse" "$(tail -n 3 "$WORK/extract.err")"
    exit 1
fi

# ---- the places the documents run in -----------------------------------------
# README.md and docs/: a directory with the server's data directory as ./shoal-data.
start_server ex || exit 1
mkdir -p "$WORK/readme"
ln -s "$WORK/ex" "$WORK/readme/shoal-data"
# deploy/README.md: a checkout's deploy/ (only .env.example is needed); the
# server of its examples starts once its .env exists (see before_block).
mkdir -p "$WORK/checkout/deploy"
cp "$TOP/deploy/.env.example" "$WORK/checkout/deploy/"

# before_block FILE NAME: what the stack would have done by then.
before_block() {
    case "$1:$2" in
        deploy/README.md:compose-query)
            # `docker compose up` with the .env just made: a server with its
            # tokens and the two compose agents registered, their links measured.
            local envf="$WORK/checkout/deploy/.env" join i
            local -a tok id
            if [ ! -s "$envf" ]; then fail "deploy/README.md's first block made deploy/.env"; return 1; fi
            join=$(sed -n 's/^SHOAL_JOIN_TOKEN=//p' "$envf")
            SHOAL_ADMIN_TOKEN=$(sed -n 's/^SHOAL_ADMIN_TOKEN=//p' "$envf") SHOAL_JOIN_TOKEN=$join \
                start_server compose || return 1
            # shellcheck disable=SC2154  # URL_compose: set by start_server
            for i in 1 2; do
                req POST "$URL_compose/v1/agent/register" "$join" \
                    "{\"name\":\"agent-$i\",\"peer_address\":\"agent-$i:7070\",\"region\":\"compose\",\"hardware\":{\"tflops\":0.05,\"cpu_cores\":1}}"
                tok[i]=$(printf '%s' "$BODY" | jq -r .token)
                id[i]=$(printf '%s' "$BODY" | jq -r .node_id)
            done
            req PUT "$URL_compose/v1/links" "${tok[1]}" "{\"samples\":[{\"to\":${id[2]},\"latency_ms\":0.08,\"bandwidth_gbps\":9.6}]}"
            req PUT "$URL_compose/v1/links" "${tok[2]}" "{\"samples\":[{\"to\":${id[1]},\"latency_ms\":0.07,\"bandwidth_gbps\":9.1}]}"
            S=$URL_compose
            ;;
    esac
    return 0
}

# ---- run them -----------------------------------------------------------------
# shellcheck disable=SC2154  # set by start_server
S=$URL_ex
CUR_FILE=""
SKIPPED_DOCKER=""
while IFS=$'\t' read -r kind where name id; do
    file=${where%%:*}
    if [ "$kind" = skip ]; then
        echo "# not run: $where ($name)"
        [ "$id" = 1 ] && fail "every block that calls the API with curl is run" "$where has no <!-- example: --> marker"
        continue
    fi
    if [ "$file" != "$CUR_FILE" ]; then
        CUR_FILE=$file
        LAST_BLOCK=""
        case $file in
            README.md|docs/*.md) cd "$WORK/readme" || exit 1 ;;
            deploy/README.md) cd "$WORK/checkout" || exit 1 ;;
        esac
    fi
    if [ "$name" != "$LAST_BLOCK" ]; then
        LAST_BLOCK=$name
        before_block "$file" "$name" || break
    fi
    unit=$(cat "$WORK/units/$id.sh")
    short=$(printf '%s' "$unit" | head -n 1 | cut -c 1-90)
    case $kind in
        address) echo "# not run: $where: $short (S is the live server's URL, $S)"; continue ;;
        docker) echo "# not run: $where: $short (needs a Docker engine)"; SKIPPED_DOCKER=1; continue ;;
    esac
    # In this shell, as a reader's shell would: what a command sets stays.
    eval "$unit" >"$WORK/unit.out" 2>"$WORK/unit.err" </dev/null
    rc=$?
    if [ "$rc" -ne 0 ] || [ -s "$WORK/unit.err" ]; then
        fail "$where runs as written: $short" "status $rc: $(head -c 300 "$WORK/unit.err")"
        continue
    fi
    problem=$(python3 "$WORK/compare.py" "$WORK/units/$id.answers" "$WORK/unit.out" 2>&1)
    if [ -n "$problem" ]; then
        fail "$where prints what the document shows: $short" "$problem"
    elif [ "$(cat "$WORK/units/$id.answers")" != "[]" ]; then
        ok "$where prints what the document shows: $short"
    else
        ok "$where runs as written: $short"
    fi
done < "$WORK/units/index"
cd "$WORK" || exit 1

check "docs/api.md has examples to run" "$(grep -c $'^run\tdocs/api.md:' "$WORK/units/index" | awk '{print ($1 > 10)}')" 1
check "deploy/README.md has examples to run" "$(grep -c $'^run\tdeploy/README.md:' "$WORK/units/index" | awk '{print ($1 > 2)}')" 1
check "some examples compare an answer" "$(grep -c '"json"' "$WORK"/units/*.answers | awk -F: '{n += $2} END {print (n > 5)}')" 1
[ -n "$SKIPPED_DOCKER" ] && echo "# the docker commands are checked by test_deploy.sh (compose config) without an engine"
exit 0
