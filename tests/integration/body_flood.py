#!/usr/bin/env python3
"""body_flood.py - requests with a token the server does not know and a
large body that stalls short of its end, as a flood would (test_flood.sh).

Opens COUNT connections, each sending the head of POST PATH with
"Authorization: Bearer TOKEN" and a Content-Length of 1 MiB, then all but
the last 64 KiB of the body, and stops.  Prints "sent N" once every
connection has sent what it will, holds them until stdin closes, then
closes them.  A server that reads bodies before it checks tokens holds
about a mebibyte for each.

usage: body_flood.py HOST PORT COUNT PATH TOKEN
"""
import socket
import sys

BODY = 1 << 20          # bytes declared
SENT = BODY - (64 << 10)  # bytes sent before stalling


def main():
    host, port, count, path, token = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    head = ("POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % (path, token, BODY)).encode()
    chunk = b"x" * SENT
    conns = []
    for _ in range(count):
        s = socket.create_connection((host, port), timeout=10)
        s.sendall(head)
        try:
            s.sendall(chunk)
        except OSError:
            pass   # closed on us: it holds nothing for this one
        conns.append(s)
    print("sent %d" % len(conns), flush=True)
    sys.stdin.read()
    for s in conns:
        s.close()


if __name__ == "__main__":
    main()
