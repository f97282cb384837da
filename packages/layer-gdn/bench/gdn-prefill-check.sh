#!/usr/bin/env bash
# One GPU call for the chunked prefill (kernels/gdn-chunk.cu): builds, tests, times; < 3 minutes on
# an H200. Run from anywhere: bash packages/layer-gdn/bench/gdn-prefill-check.sh
# Needs node, nvcc, nvidia-smi on the PATH and the workspace's node_modules (built @metrale/core,
# cpu-backend, cuda-backend). Writes at most 8 files under $OUT (default /tmp/gdn-prefill-out):
#   summary.txt     the lines that matter (test tallies, the error table's worst rows, the bench table)
#   build.log       nvcc -Xptxas -v (registers, spills, shared memory) of every kernel, tsup
#   test-prefill.log  test/gpu/gdn-prefill.test.ts: chunked prefill vs CPU reference and CUDA oracle
#   test-fixtures.log test/gpu/fixtures.gpu.test.ts: the golden fixtures through the layer
#   test-kernels.log  test/gpu/gdn-kernels.test.ts: the other kernels (and the row-by-row chunk)
#   bench.log, gdn-bench.json  bench/gdn.bench.mjs, prefill sections (8192 × 1, 4 × 2048)
#   nvidia-smi.txt
set -u -o pipefail
OUT="${OUT:-/tmp/gdn-prefill-out}"
mkdir -p "$OUT"
: > "$OUT/summary.txt"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PKG="$(cd "$HERE/.." && pwd)"
ROOT="$(cd "$PKG/../.." && pwd)"
VITEST="$ROOT/node_modules/vitest/vitest.mjs"
T0=$(date +%s)
stamp() { echo "[$(($(date +%s) - T0)) s] $*" | tee -a "$OUT/summary.txt"; }

nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv > "$OUT/nvidia-smi.txt" 2>&1
CC="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')"
case "$CC" in
  90) ARCH=90a ;;
  "") ARCH=90a ;;
  *) ARCH="$CC" ;;
esac
stamp "device: $(head -2 "$OUT/nvidia-smi.txt" | tail -1) -> sm_$ARCH"

# 1. The package's JavaScript (dist/index.js, fresh), then every kernels/*.cu for this device only,
#    in parallel, into dist/kernels (tsup cleans dist first), and the GPU lane's own kernels
#    (test/gpu/kernels/*.cu: the row-by-row oracle) into test/gpu/dist/kernels.
cd "$PKG"
{ echo "== tsup"; "$ROOT/node_modules/.bin/tsup" --silent 2>&1; echo "tsup exit $?"; } > "$OUT/build.log"
mkdir -p dist/kernels test/gpu/dist/kernels
pids=()
for cu in kernels/*.cu test/gpu/kernels/*.cu; do
  name="$(basename "$cu" .cu)"
  ( nvcc -fatbin -O3 -std=c++17 --expt-relaxed-constexpr "-gencode=arch=compute_$ARCH,code=sm_$ARCH" -Xptxas -v -I"$ROOT/packages/core/include" \
      -o "$(dirname "$cu")/../dist/kernels/$name.fatbin" "$cu" > "/tmp/gdn-build-$name.log" 2>&1; echo "exit $?" >> "/tmp/gdn-build-$name.log" ) &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for cu in kernels/*.cu test/gpu/kernels/*.cu; do name="$(basename "$cu" .cu)"; echo "== $name"; cat "/tmp/gdn-build-$name.log"; done >> "$OUT/build.log"
awk '/Compiling entry function .gdn_(prefill|chunk_rowwise)/ {name=$7} /spill stores/ && name {sp=$0} /Used [0-9]+ registers/ && name {print name, $5, "registers,", sp; name=""}' "$OUT/build.log" \
  | sed -E 's/ +/ /g' >> "$OUT/summary.txt"
grep -E "error|exit [1-9]" "$OUT/build.log" | head -5 | tee -a "$OUT/summary.txt"
stamp "built"
export METRALE_GDN_FATBIN_DIR="$PKG/dist/kernels"

# 2. GPU tests: the chunked prefill, the golden fixtures through the layer, the other kernels.
timeout 120 node "$VITEST" run --config vitest.gpu.config.ts test/gpu/gdn-prefill.test.ts > "$OUT/test-prefill.log" 2>&1
stamp "prefill tests: exit $? — $(grep -aE 'Tests ' "$OUT/test-prefill.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g')"
# The worst relative errors of each build (rel L2 column) and any failure line.
grep -aE '\| (exact|fast)' "$OUT/test-prefill.log" | sed 's/\x1b\[[0-9;]*m//g' | awk '{print $(NF-2), $0}' | sort -g | tail -4 | cut -d' ' -f2- >> "$OUT/summary.txt"
grep -aE '\| exact' "$OUT/test-prefill.log" | sed 's/\x1b\[[0-9;]*m//g' | awk '{print $(NF-2), $0}' | sort -g | tail -2 | cut -d' ' -f2- >> "$OUT/summary.txt"
grep -aE 'FAIL|AssertionError|Error:' "$OUT/test-prefill.log" | sed 's/\x1b\[[0-9;]*m//g' | head -8 >> "$OUT/summary.txt"
timeout 45 node "$VITEST" run --config vitest.gpu.config.ts test/gpu/fixtures.gpu.test.ts > "$OUT/test-fixtures.log" 2>&1
stamp "fixture tests: exit $? — $(grep -aE 'Tests ' "$OUT/test-fixtures.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g')"
grep -aE 'worst|FAIL' "$OUT/test-fixtures.log" | sed 's/\x1b\[[0-9;]*m//g' | head -8 >> "$OUT/summary.txt"
timeout 45 node "$VITEST" run --config vitest.gpu.config.ts test/gpu/gdn-kernels.test.ts > "$OUT/test-kernels.log" 2>&1
stamp "kernel tests: exit $? — $(grep -aE 'Tests ' "$OUT/test-kernels.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g')"

# 3. The prefill bench (ceilings first).
METRALE_GDN_BENCH_ONLY=prefill METRALE_BENCH_OUT="$OUT/gdn-bench.json" timeout 100 node bench/gdn.bench.mjs > "$OUT/bench.log" 2>&1
stamp "bench: exit $?"
sed -n '/^Ceilings/,$p' "$OUT/bench.log" >> "$OUT/summary.txt"
grep -aE '^!!|failed' "$OUT/bench.log" | head -5 >> "$OUT/summary.txt"
stamp "done"
cat "$OUT/summary.txt"
