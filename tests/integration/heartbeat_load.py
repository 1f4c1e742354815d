#!/usr/bin/env python3
"""heartbeat_load.py - many agents' control traffic against a live server,
and probes timed all the while (test_db_outage.sh, bench-faults' freeze).

Registers NODES nodes with the join token, then heartbeats each one every
second from a thread of its own (as an agent does: a 10 s client timeout,
then the next beat), while /healthz is asked every 100 ms and /metrics
every second on the clock, each probe on a thread of its own.  Runs SECONDS seconds and prints one JSON
object: per probe the count, p50, p99 and max seconds (a probe that got no
answer counts as its timeout), and for the heartbeats the answers by
status and the slowest answer in seconds.

usage: heartbeat_load.py URL JOIN_TOKEN_FILE NODES SECONDS [NAME_PREFIX]
(the nodes are named NAME_PREFIX0, NAME_PREFIX1, ...; default "load-")
"""
import http.client
import json
import sys
import threading
import time
import urllib.parse

HEARTBEAT_EVERY_S = 1.0
HEARTBEAT_TIMEOUT_S = 10.0   # the agent's own client timeout for a heartbeat
HEALTHZ_EVERY_S = 0.1
METRICS_EVERY_S = 1.0
PROBE_TIMEOUT_S = 30.0


def request(url, method, path, token=None, body=None, timeout=PROBE_TIMEOUT_S):
    """One request on a fresh connection: (status or None, seconds, body)."""
    u = urllib.parse.urlparse(url)
    headers = {"Connection": "close"}
    if token:
        headers["Authorization"] = "Bearer " + token
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    t0 = time.monotonic()
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        payload = r.read()
        c.close()
        return r.status, time.monotonic() - t0, payload
    except (OSError, http.client.HTTPException):
        return None, time.monotonic() - t0, b""


def quantiles(xs):
    if not xs:
        return {"count": 0}
    s = sorted(xs)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]
    return {"count": len(s), "p50_s": round(pick(0.50), 4), "p99_s": round(pick(0.99), 4),
            "max_s": round(s[-1], 4)}


def main():
    url, join_file, nodes, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    prefix = sys.argv[5] if len(sys.argv) > 5 else "load-"
    join = open(join_file).read().strip()
    tokens = []
    for i in range(nodes):
        status, _, body = request(url, "POST", "/v1/agent/register", join, {
            "name": "%s%d" % (prefix, i), "peer_address": "127.0.0.1:%d" % (20000 + i),
            "hardware": {"tflops": 1, "cpu_cores": 1}})
        if status != 201:
            print("heartbeat_load: register failed: %s %r" % (status, body[:200]), file=sys.stderr)
            sys.exit(1)
        tokens.append(json.loads(body)["token"])
    end = time.monotonic() + seconds
    lock = threading.Lock()
    beats = {}            # status (or "none") -> count
    slowest = [0.0]
    healthz, metrics = [], []

    def beat(token):
        while time.monotonic() < end:
            t0 = time.monotonic()
            status, took, _ = request(url, "POST", "/v1/agent/heartbeat", token, {"state": "idle"},
                                      HEARTBEAT_TIMEOUT_S)
            with lock:
                key = str(status) if status else "none"
                beats[key] = beats.get(key, 0) + 1
                slowest[0] = max(slowest[0], took)
            time.sleep(max(0.0, HEARTBEAT_EVERY_S - (time.monotonic() - t0)))

    def probe_once(path, out):
        status, took, _ = request(url, "GET", path)
        with lock:
            out.append(took if status == 200 else PROBE_TIMEOUT_S)

    def probe(path, every, out):
        """A probe every `every` s on the clock, each on its own thread, so
        that a slow answer does not thin out the samples after it."""
        started = []
        tick = time.monotonic()
        while tick < end:
            t = threading.Thread(target=probe_once, args=(path, out))
            t.start()
            started.append(t)
            tick += every
            time.sleep(max(0.0, tick - time.monotonic()))
        for t in started:
            t.join()

    threads = [threading.Thread(target=beat, args=(t,)) for t in tokens]
    threads.append(threading.Thread(target=probe, args=("/healthz", HEALTHZ_EVERY_S, healthz)))
    threads.append(threading.Thread(target=probe, args=("/metrics", METRICS_EVERY_S, metrics)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"nodes": nodes, "seconds": seconds, "healthz": quantiles(healthz),
                      "metrics": quantiles(metrics), "heartbeats": beats,
                      "heartbeat_max_s": round(slowest[0], 3)}, sort_keys=True))


if __name__ == "__main__":
    main()
