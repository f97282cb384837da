#!/usr/bin/env bash
# One GPU session for @metrale/layer-dsa: checks the build, runs the package's GPU tests (CUDA
# kernels vs their CPU twins, layer parity, conformance, golden fixtures) and the benchmark, and
# leaves at most 8 files in $OUT. Needs only node, nvcc and python3 on the PATH (nvcc only when a
# fatbin is missing or stale; python3 only with DSA_GEN_FIXTURES=1). About 2–3 minutes.
#
#   OUT=/path/to/out bash packages/layer-dsa/bench/dsa-gpu-check.sh
#
# Environment:
#   OUT                       where the files go (default: packages/layer-dsa/bench-results/gpu-check)
#   METRALE_DSA_FIXTURES_DIR  golden fixtures for test/gpu/fixtures.gpu.test.ts (default: the
#                             package's fixtures/); another agent's generator output goes here
#   DSA_GEN_FIXTURES=1        first run tools/fixtures/dsa.py into METRALE_DSA_FIXTURES_DIR
#                             (default /tmp/dsa-fixtures) and pack them into $OUT/dsa-fixtures.tgz
#
# Files: env.txt (GPU, driver, versions, build), gpu-tests.log, dsa-bench.log, dsa-bench.json,
# and with DSA_GEN_FIXTURES=1 also fixtures-gen.log and dsa-fixtures.tgz.
set -uo pipefail
pkg="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$pkg/../.." && pwd)"
OUT="${OUT:-$pkg/bench-results/gpu-check}"
mkdir -p "$OUT"
cd "$pkg"
vitest="$root/node_modules/vitest/vitest.mjs"

{
  echo "== $(date -u +%FT%TZ)  $(git -C "$root" rev-parse --short HEAD 2>/dev/null) (uncommitted changes: $(git -C "$root" status --porcelain 2>/dev/null | wc -l))"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1
  echo "node $(node --version); $(nvcc --version 2>/dev/null | tail -1)"
  # The package's JavaScript (dist/index.js) and fatbins (dist/kernels/*.fatbin): rebuilt only when missing or stale.
  if [ ! -f dist/index.js ]; then
    echo "dist/index.js missing: building with tsup"
    node "$root/node_modules/tsup/dist/cli-default.js" 2>&1 | tail -3
  fi
  node ../core/bin/metrale-build-kernels.mjs 2>&1 | tail -5
  ls -l dist/kernels/ 2>&1
  node -e "import('@metrale/cuda-backend').then(m => { const p = m.probe(); console.log('probe:', p.available, p.reason); })" 2>&1
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if [ "${DSA_GEN_FIXTURES:-0}" = "1" ]; then
  export METRALE_DSA_FIXTURES_DIR="${METRALE_DSA_FIXTURES_DIR:-/tmp/dsa-fixtures}"
  mkdir -p "$METRALE_DSA_FIXTURES_DIR"
  echo "== generating golden fixtures into $METRALE_DSA_FIXTURES_DIR"
  (cd "$root" && timeout 120 python3 tools/fixtures/dsa.py --out "$METRALE_DSA_FIXTURES_DIR") > "$OUT/fixtures-gen.log" 2>&1
  echo "fixture generator exit $?" >> "$OUT/fixtures-gen.log"
  tail -5 "$OUT/fixtures-gen.log"
  tar czf "$OUT/dsa-fixtures.tgz" -C "$METRALE_DSA_FIXTURES_DIR" . 2>/dev/null
fi

echo "== GPU tests (vitest.gpu.config.ts)"
timeout 150 node "$vitest" run --config vitest.gpu.config.ts > "$OUT/gpu-tests.log" 2>&1
echo "gpu tests exit $?" >> "$OUT/gpu-tests.log"
# The kernel table, failures, and the summary.
grep -E "^(case|mla_|index_|pool_|ring_|q_rope|topk|sparse_)|FAIL|AssertionError|Error:|Tests |Test Files|exit " "$OUT/gpu-tests.log" | grep -v "^\s*$" | tail -90

echo "== benchmark"
METRALE_BENCH_OUT="$OUT/dsa-bench.json" timeout 100 node bench/dsa.bench.mjs > "$OUT/dsa-bench.log" 2>&1
echo "bench exit $?" >> "$OUT/dsa-bench.log"
sed -n '/^Ceilings/,$p' "$OUT/dsa-bench.log"
grep -E "^!!" "$OUT/dsa-bench.log" | head -20
