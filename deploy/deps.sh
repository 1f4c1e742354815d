#!/bin/sh
# deps.sh - installs what the build and the tests need, if any of it is
# missing.  Idempotent: when everything is installed it touches nothing and
# needs no network.
#
# usage: deps.sh [--command NAME]... [--npm DIR]... PACKAGE...
#   PACKAGE         a Debian package, installed unless dpkg says it is
#   --command NAME[=PACKAGE]
#                   the Debian package PACKAGE (default NAME), installed only
#                   when no program NAME is on $PATH or in /usr/sbin (npm:
#                   NodeSource's nodejs carries its own npm and conflicts with
#                   Debian's; dockerd: Docker's own docker-ce conflicts with
#                   docker.io)
#   --npm DIR       `npm ci` in DIR when DIR/node_modules is missing or
#                   older than DIR/package-lock.json
set -eu
commands=""
npm_dirs=""
while [ $# -gt 0 ]; do
    case "$1" in
        --command) commands="$commands ${2:?--command needs a name}"; shift 2 ;;
        --npm) npm_dirs="$npm_dirs ${2:?--npm needs a directory}"; shift 2 ;;
        *) break ;;
    esac
done
missing=""
for p in "$@"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$status" in
        "install ok installed") ;;
        *) missing="$missing $p" ;;
    esac
done
for c in $commands; do
    PATH="$PATH:/usr/sbin:/sbin" command -v "${c%%=*}" >/dev/null 2>&1 || missing="$missing ${c#*=}"
done
if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $missing
    # Debian's prometheus is here for promtool alone: its daemon, which the
    # package enables and starts under systemd, would take port 9090 (the
    # compose stack's Prometheus) and scrape for nothing.
    case " $missing " in
        *" prometheus "*)
            if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
                $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
            fi ;;
    esac
fi
# npm writes node_modules/.package-lock.json last; a lock file newer than it
# (a pulled change) means the installed tree is stale.
for d in $npm_dirs; do
    stamp="$d/node_modules/.package-lock.json"
    if [ ! -f "$stamp" ] || [ "$d/package-lock.json" -nt "$stamp" ]; then
        echo "deps: npm ci in $d"
        (cd "$d" && npm ci --no-audit --no-fund --loglevel=error)
    fi
done
