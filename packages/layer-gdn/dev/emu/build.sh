#!/usr/bin/env bash
# Dev-only: builds the CPU thread emulator of the GDN kernels into dev/emu/build/ (g++ ≥ 11, C++20).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
mkdir -p build
g++ -std=c++20 -O1 -g -pthread -I. -I../../kernels -o build/gdn-chunk.emu gdn-chunk.cpp
g++ -std=c++20 -O1 -g -pthread -I. -I../../kernels -o build/gdn-rowwise.emu gdn-rowwise.cpp
g++ -std=c++20 -O1 -g -pthread -I. -I../../kernels -o build/gdn-recurrent.emu gdn-recurrent.cpp
g++ -std=c++20 -O1 -g -pthread -I. -I../../kernels -o build/gdn-decode.emu gdn-decode.cpp
g++ -std=c++20 -O1 -g -pthread -I. -I../../kernels -o build/gdn-verify.emu gdn-verify.cpp
echo "built dev/emu/build/gdn-chunk.emu, gdn-rowwise.emu, gdn-recurrent.emu, gdn-decode.emu, gdn-verify.emu"
