#!/usr/bin/env python3
"""layers.py - the source tree's rooms and the includes between them.

Prints "ok - ..." / "not ok - ..." lines (tests/run.sh counts them):
  - every folder of server/ and agent/ opens with a README.md;
  - no folder of server/, agent/, kernels/ or models/ holds more than
    MAX_UNITS source units (a .c with its .h is one);
  - every #include "..." between folders runs down the order below (a
    folder includes only from folders after it in its list: models/ from
    kernels/ and common/, kernels/ from common/ alone), so the folders form
    no circle;
  - no two units include each other's headers across .c files (a circle
    of files such as a.c -> b.h, b.c -> a.h), except where a room's own
    hub header gathers its parts (HUBS);
  - a header kept to one place (ONLY) is included from nowhere else in
    server/ and agent/: the cipher only where frames are sealed.
With --graph, prints the folder graph instead (one "a -> b c" line each).
"""
import os
import re
import sys

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
MAX_UNITS = 20
# Top first: a folder may include from any folder after it.
ORDER = {
    'server': ['server', 'server/api', 'server/jobs', 'server/http', 'server/sched', 'server/store',
               'server/base', 'models', 'kernels', 'common'],
    'agent': ['agent', 'agent/tools', 'agent/train', 'agent/net', 'agent/control', 'models', 'kernels', 'common'],
    'models': ['models', 'kernels', 'common'],
    'kernels': ['kernels', 'common'],
    'common': ['common'],
}
# A tasklet's header gathers the parts of a step (sync, train's env), whose
# .c files take the tasklet back: one room's hub, not a circle of rooms.
HUBS = {'agent/train/tasklet'}
ONLY = {'common/aead.h': {'agent/net/peer_seal.c'}}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE = re.compile(r'\.(c|h|cu|cuh)$')


def folder(path):
    parts = path.split('/')
    if parts[0] in ('server', 'agent') and len(parts) > 2:
        return '/'.join(parts[:2])
    return parts[0]


def unit(path):
    return re.sub(r'\.(c|h)$', '', path)


def sources():
    for top in ORDER:
        for d, dirs, files in os.walk(os.path.join(TOP, top)):
            dirs.sort()
            for f in sorted(files):
                if SOURCE.search(f):
                    yield os.path.relpath(os.path.join(d, f), TOP)


def main():
    results = []
    includes = {}
    for p in sources():
        text = open(os.path.join(TOP, p), encoding='utf-8').read()
        for m in INCLUDE.finditer(text):
            t = os.path.normpath(os.path.join(os.path.dirname(p), m.group(1)))
            if os.path.exists(os.path.join(TOP, t)):
                includes.setdefault(p, set()).add(t)
    graph = {}
    for p, ts in includes.items():
        for t in ts:
            if folder(p) != folder(t):
                graph.setdefault(folder(p), set()).add(t and folder(t))
    if '--graph' in sys.argv:
        for a in sorted(graph):
            print(a, '->', ' '.join(sorted(graph[a])))
        return 0

    folders = sorted({os.path.dirname(p) for p in sources() if p.split('/')[0] in ('server', 'agent')})
    missing = [f for f in folders if not os.path.exists(os.path.join(TOP, f, 'README.md'))]
    results.append((not missing, 'every folder of server/ and agent/ opens with a README.md', ' '.join(missing)))
    sized = folders + ['kernels', 'models']
    sizes = {f: len({unit(os.path.basename(p)) for p in sources() if os.path.dirname(p) == f}) for f in sized}
    big = [f'{f} ({n})' for f, n in sizes.items() if n > MAX_UNITS]
    results.append((not big, f'no folder of server/, agent/, kernels/ or models/ holds more than {MAX_UNITS} source units '
                    f'(largest: {max(sizes.values())})', ' '.join(big)))
    upward = []
    for p, ts in sorted(includes.items()):
        order = ORDER[p.split('/')[0]]
        a = folder(p)
        for t in sorted(ts):
            b = folder(t)
            if a != b and (b not in order or order.index(b) <= order.index(a)):
                upward.append(f'{p} -> {t}')
    results.append((not upward, 'every include between folders runs down the layers (no circle of folders)',
                    '; '.join(upward[:5])))
    pairs = []
    for p, ts in includes.items():
        for t in ts:
            if not p.endswith('.c') or unit(p) == unit(t):
                continue
            back = unit(t) + '.c'
            if unit(p) + '.h' in includes.get(back, ()) and not ({unit(p), unit(t)} & HUBS):
                pairs.append(f'{unit(p)} <-> {unit(t)}')
    pairs = sorted(set(pairs))
    results.append((not pairs, 'no two files include each other across their .c files', '; '.join(pairs[:5])))
    for header, allowed in ONLY.items():
        strays = sorted(p for p, ts in includes.items()
                        if header in ts and p.split('/')[0] in ('server', 'agent') and p not in allowed)
        results.append((not strays, f'{header} is included in server/ and agent/ only by {", ".join(sorted(allowed))}',
                        ' '.join(strays)))
    for ok, what, why in results:
        print(('ok - ' if ok else 'not ok - ') + what + ('' if ok else ': ' + why))
    return 0 if all(r[0] for r in results) else 1


if __name__ == '__main__':
    sys.exit(main())
