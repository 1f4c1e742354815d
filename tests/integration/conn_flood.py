#!/usr/bin/env python3
"""conn_flood.py - holds many idle TCP connections to a server, from chosen
loopback source addresses, as a flood would (test_flood.sh).

Opens COUNT connections from each SOURCE (one after another, each held
open without sending a byte), waits a second, and says per source how many
the server still holds and how many it closed at once (a refused
connection is closed on accept; one left in the listen queue would hang,
and counts as held).  Then it writes one JSON line, holds the rest until
HOLD seconds have passed or stdin closes, and closes them.

usage: conn_flood.py HOST PORT HOLD SOURCE:COUNT...
"""
import json
import select
import socket
import sys
import time


def main():
    host, port, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    start = time.monotonic()
    conns = {}
    for spec in sys.argv[4:]:
        source, count = spec.rsplit(":", 1)
        conns[source] = []
        for _ in range(int(count)):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((source, 0))
            s.settimeout(5)
            try:
                s.connect((host, port))
            except OSError:
                s.close()
                continue
            conns[source].append(s)
    time.sleep(1)
    report = {}
    for source, socks in conns.items():
        closed = 0
        for s in socks:
            s.setblocking(False)
            try:
                if s.recv(1, socket.MSG_PEEK) == b"":
                    closed += 1
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        report[source] = {"held": len(socks) - closed, "closed": closed}
    print(json.dumps(report, sort_keys=True), flush=True)
    left = hold - (time.monotonic() - start)
    if left > 0:
        select.select([sys.stdin], [], [], left)
    for socks in conns.values():
        for s in socks:
            s.close()


if __name__ == "__main__":
    main()
