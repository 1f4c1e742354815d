#!/usr/bin/env bash
# test_deploy.sh - deploy/ checked without a Docker engine: the compose file
# resolves (`docker compose config` / Debian's `docker-compose config`, else a
# YAML parse) with the documented .env and references only files that exist;
# the Dockerfiles build with the Makefile's own packages and targets and
# ship exactly the binaries make links, as a non-root user, with runtime
# packages that provide every library the binaries load; Prometheus scrapes
# the server's port and metrics path; the server keeps its data directory
# (the checkpoint files) on a named volume; Grafana mounts the provisioning
# and dashboards of deploy/grafana/ and reads Prometheus.  Then the real binaries run with the
# compose environment: the server takes the .env tokens and serves the
# scraped path, an agent registers with the compose join token, and both
# services' health-check commands pass while they run and fail when they
# do not.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agents.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
DEPLOY="$TOP/deploy"
BINDIR=$(dirname "$SHOAL_SERVER")

# Python 3 with PyYAML (Debian's docker-compose package depends on python3-yaml).
PY=""
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import yaml' 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
    fail "python3 with PyYAML is installed" "install python3-yaml (docker-compose depends on it)"
    exit 1
fi

# The .env an operator makes by following .env.example: copy, then a fresh
# random value for each secret.
rand_hex() {
    if command -v openssl >/dev/null 2>&1; then openssl rand -hex 32
    else od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; fi
}
ENVF="$WORK/env"
cp "$DEPLOY/.env.example" "$ENVF"
for v in SHOAL_ADMIN_TOKEN SHOAL_JOIN_TOKEN POSTGRES_PASSWORD GRAFANA_ADMIN_PASSWORD; do
    sed -i "s/^$v=.*/$v=$(rand_hex)/" "$ENVF"
done
envval() { sed -n "s/^$1=//p" "$ENVF" | tail -n 1; }

# ---- compose config -------------------------------------------------------
# Only the env file counts: run compose with a bare environment.
# DEPLOY_TEST_COMPOSE=none forces the YAML-parse fallback.
COMPOSE=""
if [ "${DEPLOY_TEST_COMPOSE:-}" = none ]; then
    :
elif command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1; then
    COMPOSE="docker compose"
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE="docker-compose"
fi
compose() {
    # shellcheck disable=SC2086
    env -i PATH="$PATH" HOME="$WORK" $COMPOSE --env-file "$1" -f "$DEPLOY/docker-compose.yml" \
        --project-directory "$DEPLOY" "${@:2}"
}
MODE=python
if [ -n "$COMPOSE" ]; then
    MODE=compose
    if compose "$DEPLOY/.env.example" config >"$WORK/unfilled.out" 2>&1; then
        fail "$COMPOSE config refuses .env.example while its secrets are empty" "it resolved"
    else
        check "$COMPOSE config refuses .env.example while its secrets are empty" \
            "$(grep -c 'SHOAL_ADMIN_TOKEN\|SHOAL_JOIN_TOKEN\|POSTGRES_PASSWORD\|GRAFANA_ADMIN_PASSWORD' "$WORK/unfilled.out" | awk '{print ($1 > 0)}')" 1
    fi
    if compose "$ENVF" config >"$WORK/compose.yml" 2>"$WORK/compose.err"; then
        ok "$COMPOSE config resolves deploy/docker-compose.yml with a filled-in .env.example"
    else
        fail "$COMPOSE config resolves deploy/docker-compose.yml with a filled-in .env.example" \
            "$(head -c 600 "$WORK/compose.err")"
    fi
    if compose "$ENVF" --profile gpu config --services >"$WORK/services" 2>>"$WORK/compose.err"; then
        check "the gpu profile adds agent-gpu" "$(grep -cx agent-gpu "$WORK/services")" 1
    else
        fail "the gpu profile adds agent-gpu" "$(head -c 600 "$WORK/compose.err")"
    fi
else
    echo "# no docker compose / docker-compose here: the compose file is checked by a YAML parse with the same interpolation"
fi

# ---- static checks (Python) -------------------------------------------------
cat > "$WORK/check.py" <<'PY'
import os, re, shlex, subprocess, sys
import yaml

mode, compose_out, env_file, top, server_bin, agent_bin, sched_bin, vars_out = sys.argv[1:9]
deploy = os.path.join(top, "deploy")
fails = 0

def ok(name):
    print("ok - " + name)

def fail(name, detail=""):
    global fails
    fails += 1
    print("not ok - " + name + (": " + detail if detail else ""))

def check(name, cond, detail=""):
    (ok if cond else fail)(name, *([] if cond else [detail]))

def read(path):
    with open(path) as f:
        return f.read()

def env_pairs(path):
    out = {}
    for line in read(path).splitlines():
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out

ENV = env_pairs(env_file)
raw_compose = read(os.path.join(deploy, "docker-compose.yml"))
VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")

def interpolate(s):
    """Compose's interpolation (what the python fallback needs): ${V},
    ${V:-d}, ${V-d}, ${V:?e}, ${V?e}; $$ stays as $$."""
    def one(m):
        name, op, arg = m.group(1), m.group(2), m.group(3)
        val = ENV.get(name)
        if op in (":-", "-"):
            return val if (val if op == ":-" else val is not None) else arg
        if op in (":?", "?"):
            if (op == ":?" and not val) or val is None:
                raise ValueError("%s: %s" % (name, arg))
        return val or ""
    parts = s.split("$$")
    return "$$".join(VAR_RE.sub(one, p) for p in parts)

def walk(x):
    if isinstance(x, dict):
        return {k: walk(v) for k, v in x.items()}
    if isinstance(x, list):
        return [walk(v) for v in x]
    if isinstance(x, str):
        return interpolate(x)
    return x

# --- the resolved compose model
C = None
if mode == "compose":
    try:
        C = yaml.safe_load(read(compose_out))
    except Exception as e:
        fail("compose config output is YAML", str(e))
else:
    try:
        C = walk(yaml.safe_load(raw_compose))
        ok("deploy/docker-compose.yml parses as YAML and interpolates with a filled-in .env.example")
    except Exception as e:
        fail("deploy/docker-compose.yml parses as YAML and interpolates with a filled-in .env.example", str(e))
    try:
        saved = dict(ENV)
        ENV.clear(); ENV.update(env_pairs(os.path.join(deploy, ".env.example")))
        walk(yaml.safe_load(raw_compose))
        fail("the compose file refuses .env.example while its secrets are empty", "it resolved")
    except ValueError:
        ok("the compose file refuses .env.example while its secrets are empty")
    finally:
        ENV.clear(); ENV.update(saved)
if not isinstance(C, dict) or not isinstance(C.get("services"), dict):
    fail("the compose model has services")
    sys.exit(1)
S = C["services"]

def env_of(svc):
    e = S[svc].get("environment") or {}
    if isinstance(e, list):
        e = dict(x.split("=", 1) if "=" in x else (x, "") for x in e)
    return {k: ("" if v is None else str(v)) for k, v in e.items()}

def hostpath(p):
    p = os.path.expanduser(p)
    return p if os.path.isabs(p) else os.path.normpath(os.path.join(deploy, p))

def dockerfile_of(svc):
    b = S[svc].get("build")
    if not b:
        return None
    if isinstance(b, str):
        b = {"context": b}
    ctx = hostpath(b.get("context", "."))
    return ctx, os.path.normpath(os.path.join(ctx, b.get("dockerfile", "Dockerfile")))

# --- services and what they reference
for want in ("postgres", "shoal-server", "prometheus", "grafana"):
    check("compose has the %s service" % want, want in S, "services: %s" % sorted(S))
agents = sorted(s for s in S if (dockerfile_of(s) or ("", ""))[1].endswith("deploy/Dockerfile.agent"))
gpu_agents = sorted(s for s in S if (dockerfile_of(s) or ("", ""))[1].endswith("deploy/Dockerfile.agent-cuda"))
check("compose runs two or more CPU agents from deploy/Dockerfile.agent", len(agents) >= 2, "agents: %s" % agents)
check("compose has a CUDA agent from deploy/Dockerfile.agent-cuda", len(gpu_agents) >= 1)
check("the server is built from deploy/Dockerfile.server",
      (dockerfile_of("shoal-server") or ("", ""))[1] == os.path.join(top, "deploy/Dockerfile.server"))

missing = []
for name, svc in S.items():
    d = dockerfile_of(name)
    if d:
        if not os.path.isdir(d[0]):
            missing.append("%s: build context %s" % (name, d[0]))
        if not os.path.isfile(d[1]):
            missing.append("%s: dockerfile %s" % (name, d[1]))
    for ef in (svc.get("env_file") or []):
        ef = ef if isinstance(ef, str) else ef.get("path", "")
        if not os.path.isfile(hostpath(ef)):
            missing.append("%s: env_file %s" % (name, ef))
    for v in svc.get("volumes") or []:
        src = v.get("source") if isinstance(v, dict) else v.split(":")[0]
        kind = v.get("type") if isinstance(v, dict) else ("bind" if re.match(r"^[./~]", src or "") else "volume")
        if kind == "bind":
            if not os.path.exists(hostpath(src)):
                missing.append("%s: bind mount %s" % (name, src))
        elif kind == "volume" and src and src not in (C.get("volumes") or {}):
            missing.append("%s: undeclared volume %s" % (name, src))
check("every build context, Dockerfile, env_file, mounted file and volume the compose file names exists",
      not missing, "; ".join(missing))

no_hc = [n for n, s in S.items()
         if not (s.get("healthcheck") or {}).get("test") or (s["healthcheck"].get("disable"))
         or s["healthcheck"]["test"] in (["NONE"], "NONE")]
check("every service has a health check", not no_hc, "without: %s" % no_hc)

def depends(svc, on):
    d = S[svc].get("depends_on") or {}
    return isinstance(d, dict) and (d.get(on) or {}).get("condition") == "service_healthy"
check("shoal-server depends on postgres being healthy", depends("shoal-server", "postgres"))
check("every agent depends on shoal-server being healthy",
      all(depends(a, "shoal-server") for a in agents + gpu_agents))

images = {n: S[n].get("image", "") for n in ("postgres", "prometheus")}
check("postgres and prometheus are the official images, pinned",
      re.match(r"^postgres:\d", images["postgres"]) and re.match(r"^prom/prometheus:v\d", images["prometheus"]),
      str(images))
check("the GPU agent reserves an NVIDIA GPU", all(
    any(dev.get("driver") == "nvidia" and "gpu" in (dev.get("capabilities") or [])
        for dev in (((S[g].get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or [])
    for g in gpu_agents) and gpu_agents)

# --- the server's environment
se = env_of("shoal-server")
pe = env_of("postgres")
port = se.get("SHOAL_PORT", "8080")
check("shoal-server listens on 0.0.0.0 in its container", se.get("SHOAL_LISTEN") == "0.0.0.0", se.get("SHOAL_LISTEN", "unset"))
published = []
for p in S["shoal-server"].get("ports") or []:
    published.append(str(p.get("target")) if isinstance(p, dict) else str(p).split(":")[-1].split("/")[0])
check("shoal-server publishes its SHOAL_PORT", port in published, "port %s, published %s" % (port, published))
m = re.match(r"^postgres(?:ql)?://([^:@/]+)(?::([^@]*))?@([^:/]+)(?::(\d+))?/([^?]+)", se.get("SHOAL_DATABASE_URL", ""))
check("SHOAL_DATABASE_URL names the postgres service, its user and database",
      m and m.group(3) == "postgres" and (m.group(4) or "5432") == "5432"
      and m.group(1) == pe.get("POSTGRES_USER") and m.group(5) == pe.get("POSTGRES_DB"),
      se.get("SHOAL_DATABASE_URL", "unset"))
check("shoal-server's database password is postgres's", (m and m.group(2) or se.get("PGPASSWORD")) == pe.get("POSTGRES_PASSWORD") != "")
check("the admin and join tokens come from .env and differ",
      se.get("SHOAL_ADMIN_TOKEN") == ENV.get("SHOAL_ADMIN_TOKEN") and se.get("SHOAL_JOIN_TOKEN") == ENV.get("SHOAL_JOIN_TOKEN")
      and se.get("SHOAL_ADMIN_TOKEN") != se.get("SHOAL_JOIN_TOKEN"))

# --- the agents' environment
adv, vols = {}, {}
for a in agents + gpu_agents:
    e = env_of(a)
    listen_port = e.get("SHOAL_PEER_LISTEN", "0.0.0.0:7070").rsplit(":", 1)[-1]
    names = {a, S[a].get("hostname", a)}
    adv[a] = e.get("SHOAL_PEER_ADVERTISE", "")
    ok_adv = any(adv[a] == "%s:%s" % (n, listen_port) for n in names)
    check("%s advertises its service name and peer port (%s)" % (a, adv[a]), ok_adv)
    check("%s dials shoal-server on SHOAL_PORT with the server's join token" % a,
          e.get("SHOAL_SERVER_URL") == "http://shoal-server:%s" % port and e.get("SHOAL_JOIN_TOKEN") == se.get("SHOAL_JOIN_TOKEN"))
    ddir = e.get("SHOAL_AGENT_DATA_DIR", "/var/lib/shoal-agent")
    mounted = [v for v in S[a].get("volumes") or []
               if (v.get("target") if isinstance(v, dict) else v.split(":")[1]) == ddir]
    src = [(v.get("source") if isinstance(v, dict) else v.split(":")[0]) for v in mounted]
    typ = [(v.get("type") if isinstance(v, dict) else "volume") for v in mounted]
    check("%s keeps its data dir %s on a named volume" % (a, ddir), len(src) == 1 and typ == ["volume"], str(mounted))
    vols[a] = src[0] if src else None
check("agents advertise distinct addresses", len(set(adv.values())) == len(adv), str(adv))
check("agents keep distinct data volumes", None not in vols.values() and len(set(vols.values())) == len(vols), str(vols))

# --- .env.example documents every variable
example = read(os.path.join(deploy, ".env.example")).splitlines()
documented = {}
for i, line in enumerate(example):
    mm = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=", line)
    if mm:
        j = i - 1
        while j >= 0 and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", example[j]):
            j -= 1
        documented[mm.group(1)] = j >= 0 and example[j].startswith("#")
code = "\n".join(l for l in raw_compose.splitlines() if not l.lstrip().startswith("#"))
used = {x[0] for x in VAR_RE.findall(code.replace("$$", ""))}
undoc = sorted(v for v in used if not documented.get(v))
check(".env.example documents every variable the compose file reads", not undoc and used, "undocumented: %s" % undoc)
stale = sorted(v for v in documented if v not in used and not v.startswith("COMPOSE_"))
check(".env.example has no variable the compose file does not read", not stale, "unused: %s" % stale)
secrets = [v for v in ("SHOAL_ADMIN_TOKEN", "SHOAL_JOIN_TOKEN", "POSTGRES_PASSWORD", "GRAFANA_ADMIN_PASSWORD")
           if env_pairs(os.path.join(deploy, ".env.example")).get(v, "x") != ""]
check(".env.example ships no secret values", not secrets, "filled: %s" % secrets)
check(".env.example says how to generate the secrets", "openssl rand -hex 32" in "\n".join(example))

# --- every SHOAL_* setting is an option of the binary that reads it
helps = {}
for b in (server_bin, agent_bin):
    try:
        helps[b] = subprocess.run([b, "--help"], capture_output=True, text=True, timeout=30).stdout
    except Exception as e:
        helps[b] = ""
def unknown(keys, b):
    return sorted(k for k in keys if k.startswith("SHOAL_") and "(%s)" % k not in helps[b])
bad = unknown(se, server_bin) + [a + ":" + k for a in agents + gpu_agents for k in unknown(env_of(a), agent_bin)]
check("every SHOAL_* variable in the compose file is an option of shoal-server / shoal-agent", not bad, str(bad))

# --- Prometheus
prom_mount = [v for v in S["prometheus"].get("volumes") or []
              if (v.get("target") if isinstance(v, dict) else v.split(":")[1]) == "/etc/prometheus/prometheus.yml"]
prom_src = hostpath(prom_mount[0].get("source") if prom_mount and isinstance(prom_mount[0], dict)
                    else (prom_mount[0].split(":")[0] if prom_mount else "missing"))
check("prometheus mounts deploy/prometheus.yml as its config", prom_src == os.path.join(deploy, "prometheus.yml"), prom_src)
P = yaml.safe_load(read(os.path.join(deploy, "prometheus.yml")))
jobs = [j for j in P.get("scrape_configs", []) if any(
    t.startswith("shoal-server:") for sc in j.get("static_configs", []) for t in sc.get("targets", []))]
targets = [t for j in jobs for sc in j.get("static_configs", []) for t in sc.get("targets", []) if t.startswith("shoal-server:")]
check("prometheus scrapes shoal-server on the SHOAL_PORT compose gives it (%s)" % port,
      targets and all(t == "shoal-server:" + port for t in targets), str(targets))
mpath = jobs[0].get("metrics_path", "/metrics") if jobs else ""
check("prometheus scrapes the path /metrics over http", mpath == "/metrics" and jobs[0].get("scheme", "http") == "http",
      mpath)

# --- volumes: what outlives a container (deploy/README.md, "What survives")
def mounts(svc):
    """(source, target, kind, read_only) of each of a service's volumes."""
    out = []
    for v in S.get(svc, {}).get("volumes") or []:
        if isinstance(v, dict):
            out.append((v.get("source"), v.get("target"), v.get("type"), bool(v.get("read_only"))))
            continue
        parts = v.split(":")
        src, tgt = parts[0], parts[1] if len(parts) > 1 else parts[0]
        out.append((src, tgt, "bind" if re.match(r"^[./~]", src) else "volume",
                    len(parts) > 2 and "ro" in parts[2].split(",")))
    return out

def under(path, d):
    return path == d or path.startswith(d.rstrip("/") + "/")

ddir = se.get("SHOAL_DATA_DIR", "/var/lib/shoal")
cdir = se.get("SHOAL_CHECKPOINT_DIR") or ddir.rstrip("/") + "/checkpoints"
named = [m for m in mounts("shoal-server") if m[2] == "volume" and not m[3]]
check("shoal-server keeps its checkpoint directory (%s) on a named, writable volume" % cdir,
      any(under(cdir, m[1]) for m in named), str(mounts("shoal-server")))
check("that volume is shoal-server's own data directory %s" % ddir, any(m[1] == ddir for m in named),
      str(mounts("shoal-server")))
check("no other service mounts the server's data volume",
      not [n for n in S if n != "shoal-server" for m in mounts(n) if m[2] == "volume" and m[0] in {x[0] for x in named}])

# --- Grafana: provisioned from deploy/grafana/, reading Prometheus
import glob as globmod_, json as json_
if "grafana" in S:
    gm = mounts("grafana")
    at = {m[1]: m for m in gm}
    for rel, tgt in (("grafana/provisioning", "/etc/grafana/provisioning"), ("grafana/dashboards", "/var/lib/grafana/dashboards")):
        m = at.get(tgt)
        check("grafana mounts deploy/%s at %s read-only" % (rel, tgt),
              m and m[2] == "bind" and hostpath(m[0]) == os.path.join(deploy, rel) and m[3], str(m))
    m = at.get("/var/lib/grafana")
    check("grafana keeps its own database (/var/lib/grafana) on a named volume", m and m[2] == "volume" and not m[3], str(m))
    check("grafana is the official OSS image, pinned to a release",
          re.match(r"^grafana/grafana(-oss)?:\d+\.\d+\.\d+$", S["grafana"].get("image", "")), S["grafana"].get("image"))
    ge = env_of("grafana")
    check("grafana's admin password comes from .env",
          ge.get("GF_SECURITY_ADMIN_PASSWORD") and ge.get("GF_SECURITY_ADMIN_PASSWORD") == ENV.get("GRAFANA_ADMIN_PASSWORD"))
    gports = [str(p.get("target")) if isinstance(p, dict) else str(p).split(":")[-1].split("/")[0]
              for p in S["grafana"].get("ports") or []]
    check("grafana publishes its port 3000", "3000" in gports, str(gports))

    def yaml_files(d):
        return sorted(globmod_.glob(os.path.join(deploy, "grafana/provisioning", d, "*.y*ml")))
    sources = []
    for f in yaml_files("datasources"):
        try:
            sources += (yaml.safe_load(read(f)) or {}).get("datasources") or []
        except Exception as e:
            fail("grafana datasource file %s parses" % os.path.relpath(f, top), str(e))
    prom = [d for d in sources if d.get("type") == "prometheus"]
    prom_ports = [str(p.get("target")) if isinstance(p, dict) else str(p).split(":")[-1].split("/")[0]
                  for p in S["prometheus"].get("ports") or []]
    check("grafana's provisioned Prometheus datasource is http://prometheus:%s, uid 'prometheus'" % (prom_ports or ["?"])[0],
          prom and all(d.get("url") == "http://prometheus:%s" % p for d in prom for p in prom_ports[:1])
          and any(d.get("uid") == "prometheus" for d in prom), str(prom))
    providers = []
    for f in yaml_files("dashboards"):
        try:
            providers += (yaml.safe_load(read(f)) or {}).get("providers") or []
        except Exception as e:
            fail("grafana dashboard provider file %s parses" % os.path.relpath(f, top), str(e))
    paths = [((p.get("options") or {}).get("path") or "") for p in providers]
    check("grafana's dashboard provider reads the mounted /var/lib/grafana/dashboards",
          paths and all(under(x, "/var/lib/grafana/dashboards") for x in paths), str(paths))
    home = ge.get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH", "")
    check("grafana's home dashboard %s is a file under deploy/grafana/dashboards" % home, not home or (
          under(home, "/var/lib/grafana/dashboards") and os.path.isfile(os.path.join(
              deploy, "grafana/dashboards", os.path.relpath(home, "/var/lib/grafana/dashboards")))))
    uids = {d.get("uid") for d in sources}
    def ds_refs(x):
        if isinstance(x, dict):
            d = x.get("datasource")
            if isinstance(d, dict) and isinstance(d.get("uid"), str):
                yield d["uid"]
            for v in x.values():
                yield from ds_refs(v)
        elif isinstance(x, list):
            for v in x:
                yield from ds_refs(v)
    refs, bad_json = set(), []
    for f in sorted(globmod_.glob(os.path.join(deploy, "grafana/dashboards", "*.json"))):
        try:
            refs |= set(ds_refs(json_.loads(read(f))))
        except ValueError as e:
            bad_json.append("%s: %s" % (os.path.basename(f), e))
    check("the dashboards in deploy/grafana/dashboards are JSON", not bad_json, "; ".join(bad_json))
    unknown_ds = sorted(u for u in refs if u not in uids and not u.startswith("$") and u not in ("grafana", "-- Grafana --"))
    check("every datasource uid the dashboards name is provisioned", not unknown_ds, "unknown: %s" % unknown_ds)

# --- Dockerfiles
def parse_dockerfile(path):
    ins, buf = [], ""
    for line in read(path).splitlines():
        s = line.strip()
        if s.startswith("#") or (not s and not buf):
            continue
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        ins.append(buf + s)
        buf = ""
    stages, glob = [], []
    for i in ins:
        kw, _, rest = i.partition(" ")
        kw = kw.upper()
        if kw == "FROM":
            p = rest.split()
            stages.append({"from": p[0], "name": p[2] if len(p) > 2 and p[1].upper() == "AS" else None, "ins": []})
        elif stages:
            stages[-1]["ins"].append((kw, rest.strip()))
        else:
            glob.append((kw, rest.strip()))
    return glob, stages

def arg_defaults(glob, stage):
    d = {}
    for kw, rest in glob + stage["ins"]:
        if kw == "ARG" and "=" in rest:
            k, v = rest.split("=", 1)
            d[k.strip()] = v.strip()
    return d

def words_after(cmd, word):
    """Shell words after `word` up to the next && ; |, without options."""
    w = shlex.split(cmd)
    if word not in w:
        return None
    out = []
    for x in w[w.index(word) + 1:]:
        if x in ("&&", ";", "||", "|"):
            break
        out.append(x)
    return out

mk = ["make", "-s", "--no-print-directory", "-C", top, "-f", "Makefile", "-f", os.path.join(os.path.dirname(vars_out), "print.mk")]
with open(os.path.join(os.path.dirname(vars_out), "print.mk"), "w") as f:
    f.write("print-%:\n\t@echo $($*)\n")
menv = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
def make_var(v):
    return subprocess.run(mk + ["print-" + v], capture_output=True, text=True, env=menv).stdout.split()
deb = make_var("DEB_PACKAGES")
want_build = sorted(p for p in deb if p in ("build-essential", "pkg-config") or (p.endswith("-dev") and p not in ("libcmocka-dev", "libclang-rt-dev")))
check("the Makefile's DEB_PACKAGES has the compiler and -dev packages", "build-essential" in want_build and len(want_build) > 3, str(deb))

def make_dry(args):
    r = subprocess.run(["make", "-n", "-B", "-C", top] + args, capture_output=True, text=True, env=menv)
    return r.returncode, r.stdout + r.stderr

runtime_pkgs, built = {}, {}
specs = [("Dockerfile.server", "0", server_bin), ("Dockerfile.agent", "0", agent_bin), ("Dockerfile.agent-cuda", "1", agent_bin)]
for df, cuda, binary in specs:
    path = os.path.join(deploy, df)
    glob, st = parse_dockerfile(path)
    check("%s is multi-stage" % df, len(st) >= 2, "%d stage(s)" % len(st))
    if len(st) < 2:
        continue
    final, builds = st[-1], st[:-1]
    names = {s["name"] for s in builds if s["name"]}
    check("%s: the runtime stage starts from a fresh base image" % df, final["from"] not in names, final["from"])
    users = [r for k, r in final["ins"] if k == "USER"]
    user = users[-1].split(":")[0] if users else "root"
    made = any(k == "RUN" and re.search(r"\b(useradd|adduser)\b.*\b%s\b" % re.escape(user), r) for k, r in final["ins"])
    check("%s: the runtime stage runs as a non-root user it creates (%s)" % (df, user),
          user not in ("root", "0") and (made or user.isdigit()))
    check("%s: the runtime stage has a HEALTHCHECK" % df, any(k == "HEALTHCHECK" for k, _ in final["ins"]))
    if df == "Dockerfile.server":
        # A new named volume takes the owner of the directory it is mounted
        # on: the server can write its checkpoints only if the image makes
        # its data directory the runtime user's.
        fenv = {}
        for k, r in final["ins"]:
            if k == "ENV":
                fenv.update(x.split("=", 1) for x in shlex.split(r) if "=" in x)
        dd = fenv.get("SHOAL_DATA_DIR", "")
        owns = re.compile(r"(install\s+-d\s+-o\s+%s\b|chown\s+(-\S+\s+)*%s[:\s]|--create-home)[^&;]*\s%s/?(\s|$)"
                          % (re.escape(user), re.escape(user), re.escape(dd)))
        check("%s: the image makes SHOAL_DATA_DIR (%s) the runtime user's, so a volume there is writable" % (df, dd),
              dd and any(k == "RUN" and owns.search(r) for k, r in final["ins"]))
    # build stage: the packages of `make deps`, through deploy/deps.sh
    b = builds[-1]
    runs = [r for k, r in b["ins"] if k == "RUN"]
    deps = [words_after(r, "deploy/deps.sh") for r in runs if "deploy/deps.sh" in r]
    got = sorted(x for x in (deps[0] if deps else []) if not x.startswith("-"))
    check("%s: the build stage installs the Makefile's build packages with deploy/deps.sh" % df,
          got == want_build, "got %s, want %s" % (got, want_build))
    # build stage: one make invocation; dry-run it against the Makefile
    makes = [words_after(r, "make") for r in runs if re.search(r"(^|&& )make\b", r)]
    if len(makes) != 1:
        fail("%s: the build stage runs make once" % df, "%d make commands" % len(makes))
        continue
    defaults = arg_defaults(glob, b)
    margs = []
    for a in makes[0]:
        if a.startswith("-j"):
            continue
        for k, v in sorted(defaults.items(), key=lambda kv: -len(kv[0])):
            a = a.replace("${%s}" % k, v).replace("$" + k, v)
        margs.append(a)
    targets = [a for a in margs if "=" not in a and not a.startswith("-")]
    mvars = dict(a.split("=", 1) for a in margs if "=" in a)
    check("%s: make builds with CUDA=%s" % (df, cuda), mvars.get("CUDA") == cuda, str(mvars))
    rc, out = make_dry(margs)
    linked = set(re.findall(r"\s-o (bin/shoal-[a-z]+)\s", out))
    check("%s: `make %s` is a build the Makefile knows and links %s" % (df, " ".join(margs), " ".join(targets)),
          rc == 0 and targets and set(targets) == linked, "rc %d, linked %s; %s" % (rc, sorted(linked), out[-400:]))
    if cuda == "1":
        check("%s: that build compiles for CUDA_ARCH %s and links cuBLAS and NCCL" % (df, defaults.get("CUDA_ARCH")),
              rc == 0 and "-arch=%s" % defaults.get("CUDA_ARCH") in out and "-lcublas" in out and "-lnccl" in out)
        check("%s: CUDA_ARCH is a build argument" % df, "CUDA_ARCH" in defaults)
    else:
        check("%s: that build leaves CUDA out" % df, rc == 0 and "nvcc" not in out)
    built[df] = set(targets)
    # runtime stage: copies exactly those binaries from the build stage, nothing else
    workdir = [r for k, r in b["ins"] if k == "WORKDIR"]
    wd = workdir[-1] if workdir else "/"
    copies = [r for k, r in final["ins"] if k in ("COPY", "ADD")]
    srcs, stray = set(), []
    for c in copies:
        w = shlex.split(c)
        opts = [x for x in w if x.startswith("--")]
        files = [x for x in w if not x.startswith("--")]
        if not any(o.startswith("--from=") and o.split("=", 1)[1] in names for o in opts):
            stray.append(c)
            continue
        srcs.update(os.path.relpath(s, wd) for s in files[:-1])
    check("%s: the runtime stage copies exactly the binaries make links, and nothing else" % df,
          not stray and srcs == set(targets), "copies %s, stray %s, built %s" % (sorted(srcs), stray, targets))
    apt = [words_after(r, "install") for k, r in final["ins"] if k == "RUN" and "apt-get" in r and " install " in r]
    runtime_pkgs[df] = sorted(x for x in (apt[0] if apt else []) if not x.startswith("-"))
    envs = []
    for k, r in final["ins"]:
        if k == "ENV":
            envs += [x.split("=", 1)[0] for x in shlex.split(r) if "=" in x]
    check("%s: every SHOAL_* ENV is an option of the binary" % df, not unknown(envs, binary), str(unknown(envs, binary)))

rc, out = make_dry(["CUDA=0", "all"])
all_bins = set(re.findall(r"\s-o (bin/shoal-[a-z]+)\s", out))
check("the server and agent images together ship every binary `make all` links",
      rc == 0 and all_bins and all_bins == built.get("Dockerfile.server", set()) | built.get("Dockerfile.agent", set()),
      "make all: %s; images: %s" % (sorted(all_bins), {k: sorted(v) for k, v in built.items()}))
check("the CUDA agent image installs the same runtime packages as the CPU agent image",
      runtime_pkgs.get("Dockerfile.agent") and runtime_pkgs.get("Dockerfile.agent") == runtime_pkgs.get("Dockerfile.agent-cuda"),
      str(runtime_pkgs))
check("the server image has curl for its health check",
      "curl" in runtime_pkgs.get("Dockerfile.server", []) and "curl " in str(S["shoal-server"]["healthcheck"]["test"]))

# --- .dockerignore keeps build outputs and secrets out of the context
try:
    ign = [l.strip().rstrip("/") for l in read(os.path.join(top, ".dockerignore")).splitlines() if l.strip() and not l.startswith("#")]
except OSError:
    ign = []
need = ["build", "bin", ".git", "deploy/.env", "shoal-data", "**/node_modules"]
check(".dockerignore leaves out build/, bin/, .git, deploy/.env, shoal-data, node_modules",
      all(n in ign for n in need), "missing: %s" % [n for n in need if n not in ign])

import fnmatch, glob as globmod
def ignored(rel):
    parts = rel.split("/")
    for pat in ign:
        if pat.startswith("!"):
            continue
        for i in range(1, len(parts) + 1):
            pre = "/".join(parts[:i])
            if fnmatch.fnmatch(pre, pat) or (pat.startswith("**/") and (
                    fnmatch.fnmatch(pre, pat[3:]) or fnmatch.fnmatch(parts[i - 1], pat[3:]))):
                return True
    return False
needed_src = ["Makefile", "deploy/deps.sh", "server/store/embed.sh"] + make_var("STATIC") + make_var("MIGRATIONS") + sorted(
    os.path.relpath(f, top) for d in ("common", "server", "agent", "kernels") for f in globmod.glob(os.path.join(top, d, "**", "*.[ch]*"), recursive=True))
lost = [f for f in needed_src if ignored(f)]
check(".dockerignore keeps every source, migration and static file the build needs", needed_src and not lost, "ignored: %s" % lost[:10])

# --- the binaries embed the migrations and the dashboard: the images need only them
try:
    blob = open(server_bin, "rb").read()
    static = make_var("STATIC") + make_var("MIGRATIONS")
    absent = [s for s in static if os.path.basename(s).encode() + b"\0" not in blob]
    check("shoal-server embeds every migration and static file the Makefile names", static and not absent, "absent: %s" % absent)
except OSError as e:
    fail("shoal-server embeds every migration and static file the Makefile names", str(e))

# --- runtime packages: they exist in Debian 12 and provide every library ldd resolves
def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout

OWNERS = {}
def owners(paths):
    """Debian package of each path (dpkg -S, once for all of them); a path
    may be recorded under /lib or /usr/lib, or behind a symlink
    (update-alternatives)."""
    cands = {}
    for p in paths:
        c = {p, os.path.realpath(p)}
        for x in list(c):
            c.add(x[4:] if x.startswith("/usr/lib/") else "/usr" + x if x.startswith("/lib/") else x)
        cands[p] = c
    todo = sorted({c for p in paths if p not in OWNERS for c in cands[p]})
    found = {}
    if todo:
        out = subprocess.run(["dpkg", "-S"] + todo, capture_output=True, text=True).stdout
        for line in out.splitlines():
            pk, _, f = line.partition(": ")
            found[f.strip()] = pk.split(",")[0].split(":")[0].strip()
    for p in paths:
        if p not in OWNERS:
            OWNERS[p] = next((found[c] for c in sorted(cands[p]) if c in found), None)
    return [OWNERS[p] for p in paths]

def owner(path):
    return owners([path])[0]

def dynsyms(path, defined):
    out = subprocess.run(["nm", "-D", "--defined-only" if defined else "--undefined-only", path],
                         capture_output=True, text=True).stdout
    return {l.split()[-1].split("@")[0] for l in out.splitlines() if l.split()}

CLOSURES = {}
def closure(pkgs):
    key = tuple(sorted(pkgs))
    if key in CLOSURES:
        return CLOSURES[key]
    if not pkgs:
        return set()
    rc, out = sh(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                  "--no-breaks", "--no-replaces", "--no-enhances"] + list(pkgs))
    CLOSURES[key] = {l.strip().split(":")[0] for l in out.splitlines() if l and not l[0].isspace() and not l.startswith("<")}
    return CLOSURES[key]

have_dpkg = sh(["sh", "-c", "command -v dpkg && command -v apt-cache && command -v ldd && command -v readelf"])[0] == 0
debian12 = have_dpkg and 'VERSION_ID="12"' in read("/etc/os-release") if os.path.exists("/etc/os-release") else False
if not debian12:
    print("# skip: the runtime-library checks need Debian 12 with dpkg, apt-cache, ldd and readelf")
else:
    rc, out = sh(["dpkg-query", "-W", "-f", "${Package} ${Priority} ${Essential}\n"])
    required = [l.split()[0] for l in out.splitlines() if len(l.split()) == 3 and (l.split()[1] == "required" or l.split()[2] == "yes")]
    base = closure(required) | set(required)
    for df in ("Dockerfile.server", "Dockerfile.agent"):
        pk = runtime_pkgs.get(df, [])
        pol = sh(["apt-cache", "policy"] + pk)[1] if pk else ""
        cand = dict(re.findall(r"^(\S+?):(?:amd64:)?\n(?:.*\n)*?\s+Candidate: (\S+)", pol, re.M))
        missing = [p for p in pk if cand.get(p, "(none)") == "(none)"]
        check("%s: its runtime packages exist in Debian 12" % df, pk and not missing, "unknown: %s" % missing)
    sanitizer = re.compile(r"^lib(asan|ubsan|lsan|tsan)\.so")
    for binary, df in ((server_bin, "Dockerfile.server"), (sched_bin, "Dockerfile.server"), (agent_bin, "Dockerfile.agent")):
        name = "%s: the runtime packages provide every library %s loads" % (df, os.path.basename(binary))
        rc, dyn = sh(["readelf", "-d", binary])
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
        if any(n.startswith("libcudart") or n.startswith("libcublas") for n in needed):
            print("# skip: %s is built with CUDA; the CPU image builds CUDA=0" % binary)
            continue
        rc, lout = sh(["ldd", binary])
        where = dict(re.findall(r"^\s*(\S+) => (/\S+)", lout, re.M))
        listed = set(runtime_pkgs.get(df, []))
        allowed = listed | closure(listed) | base
        problems, used = [], []
        undefined = dynsyms(binary, False)
        for n in needed:
            if sanitizer.match(n):
                continue          # ASan/UBSan runtimes: only in SAN=1 builds, not in the image
            p = where.get(n)
            if not p:
                if not n.startswith("ld-linux"):
                    problems.append("%s unresolved" % n)
                continue
            # Debian's gcc links with --as-needed except under -fsanitize:
            # a library none of whose symbols the binary uses is not in
            # the release binary the image ships.
            if not (undefined & dynsyms(p, True)):
                print("# %s: %s is NEEDED but unused (a release link drops it)" % (os.path.basename(binary), n))
                continue
            used.append(n)
            pkg = owner(p)
            if pkg not in listed and pkg not in base:
                problems.append("%s (%s) is not from a listed package" % (n, pkg))
            rc, tout = sh(["ldd", p])
            deps = re.findall(r"^\s*(\S+) => (/\S+)", tout, re.M)
            for (tn, tp), tpkg in zip(deps, owners([tp for _, tp in deps])):
                if tpkg not in allowed:
                    problems.append("%s (needed by %s, from %s) is not installed by the listed packages" % (tn, n, tpkg))
        needed = used
        check(name, not problems and needed, "; ".join(sorted(set(problems))))

# --- values for the shell checks
def q(v):
    return shlex.quote(v)
def hc(svc):
    t = S[svc]["healthcheck"]["test"]
    t = t if isinstance(t, list) else ["CMD-SHELL", t]
    cmd = t[1] if t[0] == "CMD-SHELL" else " ".join(shlex.quote(x) for x in t[1:])
    return cmd.replace("$$", "$")
with open(vars_out, "w") as f:
    f.write("SERVER_HC=%s\nAGENT_HC=%s\nMETRICS_PATH=%s\n" % (q(hc("shoal-server")), q(hc(agents[0])) if agents else "''", q(mpath)))
    f.write("SERVER_ENV=(%s)\n" % " ".join(q("%s=%s" % kv) for kv in se.items()))
    f.write("AGENT_ENV=(%s)\n" % " ".join(q("%s=%s" % kv) for kv in (env_of(agents[0]).items() if agents else [])))
sys.exit(0)
PY

"$PY" -u "$WORK/check.py" "$MODE" "$WORK/compose.yml" "$ENVF" "$TOP" "$SHOAL_SERVER" "$SHOAL_AGENT" \
    "$BINDIR/shoal-sched" "$WORK/vars.sh" 2>"$WORK/check.err"
rc=$?
if [ "$rc" -ne 0 ] || [ ! -s "$WORK/vars.sh" ]; then
    fail "the static checks ran to the end" "status $rc: $(tail -c 800 "$WORK/check.err")"
    exit 1
fi
. "$WORK/vars.sh"

# Prometheus's own checker, where it is installed (Debian: package prometheus).
if command -v promtool >/dev/null 2>&1; then
    if out=$(promtool check config "$DEPLOY/prometheus.yml" 2>&1); then
        ok "promtool accepts deploy/prometheus.yml"
    else
        fail "promtool accepts deploy/prometheus.yml" "$out"
    fi
fi

# ---- the binaries with the compose environment ------------------------------
# shoal-server with compose's settings, except what points into the stack
# (database: the embedded one; port: a free one; data dir: here).
dir_env() { local kv; for kv in "$@"; do case "${kv%%=*}" in
    SHOAL_DATABASE_URL|PGPASSWORD|SHOAL_PORT|SHOAL_DATA_DIR|SHOAL_SERVER_URL|SHOAL_PEER_LISTEN|SHOAL_PEER_ADVERTISE|SHOAL_AGENT_DATA_DIR) ;;
    *) printf '%s\n' "$kv" ;; esac; done; }
mapfile -t SRV_KEEP < <(dir_env "${SERVER_ENV[@]}")
mapfile -t AG_KEEP < <(dir_env "${AGENT_ENV[@]}")
check "the compose server environment sets the tokens" \
    "$(printf '%s\n' "${SRV_KEEP[@]}" | grep -c '^SHOAL_\(ADMIN\|JOIN\)_TOKEN=.')" 2

for kv in "${SRV_KEEP[@]}"; do export "${kv?}"; done
start_server compose; rc=$?
for kv in "${SRV_KEEP[@]}"; do unset "${kv%%=*}"; done
if [ "$rc" -eq 0 ]; then
    ok "shoal-server starts with the compose environment and the .env tokens"
    # shellcheck disable=SC2154  # set by start_server
    SRV_PORT=${URL_compose##*:}
    ADMIN=$(envval SHOAL_ADMIN_TOKEN)
    req GET "$URL_compose/v1/nodes" "$ADMIN"
    expect "the .env admin token is the server's admin token" 200

    env -i PATH="$PATH" SHOAL_PORT="$SRV_PORT" sh -c "$SERVER_HC" 2>/dev/null
    check "the server's health check passes while it is ready" "$?" 0

    STATUS=$(curl -s -o "$WORK/metrics" -D "$WORK/mh" -w '%{http_code}' "$URL_compose$METRICS_PATH")
    check "the path prometheus scrapes answers 200" "$STATUS" 200
    check "in the Prometheus text format" "$(grep -ci '^content-type: text/plain; version=0.0.4' "$WORK/mh")" 1
    check "with shoal's metrics" "$(grep -c '^shoal_database_up 1' "$WORK/metrics")" 1

    # An agent with compose's agent settings (its join token among them),
    # on a free port here; the health check tracks it.
    APORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("0.0.0.0",0)); print(s.getsockname()[1])')
    AHOST=$(printf '%s\n' "${AGENT_ENV[@]}" | sed -n 's/^SHOAL_PEER_LISTEN=\(.*\):[0-9]*$/\1/p')
    AHOST=${AHOST:-0.0.0.0}
    ADIR="$WORK/agent-compose"
    mkdir -p "$ADIR"
    hc_agent() { env -i PATH="$PATH" SHOAL_PEER_LISTEN="$AHOST:$APORT" SHOAL_AGENT_DATA_DIR="$ADIR" sh -c "$AGENT_HC"; }
    hc_agent; rc=$?
    check "the agent's health check fails before the agent runs" "$([ "$rc" -ne 0 ] && echo failed)" failed
    (
        for kv in "${AG_KEEP[@]}"; do export "${kv?}"; done
        export SHOAL_SERVER_URL="$URL_compose" SHOAL_PEER_LISTEN="$AHOST:$APORT" \
               SHOAL_PEER_ADVERTISE="127.0.0.1:$APORT" SHOAL_AGENT_DATA_DIR="$ADIR" SHOAL_MEASURE_MS=50
        exec "$SHOAL_AGENT" >"$WORK/agent-compose.log" 2>&1
    ) &
    echo $! > "$WORK/agent-compose.pid"
    AGENTS="$AGENTS compose"
    if wait_for 60 test -s "$ADIR/node.json"; then
        ok "an agent registers with the compose join token"
        wait_for 10 hc_agent
        check "the agent's health check passes while it runs" "$?" 0
    else
        fail "an agent registers with the compose join token" "$(tail -n 5 "$WORK/agent-compose.log")"
    fi
    stop_agent compose
    check "the agent stops cleanly" "$AGENT_RC" 0
    hc_agent; rc=$?
    check "the agent's health check fails once the agent is gone" "$([ "$rc" -ne 0 ] && echo failed)" failed

    stop_server compose
    env -i PATH="$PATH" SHOAL_PORT="$SRV_PORT" sh -c "$SERVER_HC" 2>/dev/null; rc=$?
    check "the server's health check fails once the server is gone" "$([ "$rc" -ne 0 ] && echo failed)" failed
else
    fail "shoal-server starts with the compose environment and the .env tokens" "$(tail -n 5 "$WORK/compose.log" 2>/dev/null)"
fi
exit 0
