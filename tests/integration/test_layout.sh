#!/usr/bin/env bash
# test_layout.sh - the source tree's rooms (issue 36): every folder of
# server/ and agent/ has its README, none holds more than about 20 source
# units, and the includes between folders run down the layers, so no
# circle (tests/layout/layers.py; --graph draws the folder graph).
set -u
python3 "$(dirname "$0")/../layout/layers.py"
