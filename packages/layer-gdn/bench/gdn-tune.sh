#!/usr/bin/env bash
# One GPU call that checks and times every variant of gdn.recurrent / gdn.fold (KERNELS.md,
# "Kernels") and builds with other -D knobs. Needs node, nvcc (PATH or /usr/local/cuda/bin) and python3; the workspace
# built (@metrale/core, @metrale/cuda-backend) with its node_modules. Run from anywhere:
#   OUT=/some/dir bash packages/layer-gdn/bench/gdn-tune.sh
# Writes at most 8 files under $OUT: build.log (ptxas -v of every build), tests.log (the GPU suite
# once per variant and build), tests-default.log (the full default run), ab.log + ab.json (the A/B
# table), ncu.csv (a few counters of the smem and pipe variants), summary.txt. About 3 minutes.
set -u -o pipefail
PKG="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT="$(cd "$PKG/../.." && pwd)"
OUT="${OUT:-$PKG/bench-results/tune}"
mkdir -p "$OUT"
WORK="$(mktemp -d /tmp/gdn-tune.XXXXXX)"
NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
export PATH="$PATH:/usr/local/cuda/bin"
VITEST="$ROOT/node_modules/vitest/vitest.mjs"
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader >> "$SUMMARY" 2>&1

# ---- builds (sm_90a only: this is an H200; the package's build adds sm_80 and compute_90) ----
# tag | extra nvcc flags | files
# (pipe builds keep the smem entry points: a pipe row runs them for its verify launches)
BUILDS=(
  "base||gdn-recurrent gdn-fold gdn-decode gdn-verify"
  "nb3|-DGDN_PIPE_NB=3|gdn-recurrent"
  "r96|-DGDN_PIPE_MAXNREG=96|gdn-recurrent"
)
stamp "building with $NVCC" | tee -a "$SUMMARY"
for b in "${BUILDS[@]}"; do
  IFS='|' read -r tag flags files <<< "$b"
  mkdir -p "$WORK/$tag"
  for f in $files; do
    ( "$NVCC" -fatbin -O3 -std=c++17 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Xptxas -v $flags \
        -I"$ROOT/packages/core/include" -o "$WORK/$tag/$f.fatbin" "$PKG/kernels/$f.cu" > "$WORK/build-$tag-$f.log" 2>&1 \
      || echo "BUILD FAILED: $tag $f" >> "$WORK/build-$tag-$f.log" ) &
  done
done
wait
for l in "$WORK"/build-*.log; do echo "=== $(basename "$l")"; grep -E "Compiling entry|spill|Used|error|FAILED" "$l"; done > "$OUT/build.log"
grep -h "BUILD FAILED" "$WORK"/build-*.log >> "$SUMMARY"
{ echo "registers / spills (sm_90a):"; grep -h -A3 "Compiling entry" "$WORK"/build-*-gdn-recurrent.log "$WORK"/build-*-gdn-fold.log \
    | grep -oE "entry function '[a-z_]+'|Used [0-9]+ registers|[0-9]+ bytes spill stores" | paste -sd' ' | sed "s/entry function/\n /g"; echo; } >> "$SUMMARY"
stamp "builds done" | tee -a "$SUMMARY"

# ---- the GPU suite, once per variant, in parallel (the 80B prefill case once; the lane builds
# its row-by-row oracle, test/gpu/kernels, when missing) ----
cd "$PKG"
run_suite() { # name build variant big
  local name=$1 build=$2 variant=$3 big=$4
  local log="$WORK/test-$name.log"
  ( export METRALE_GDN_FATBIN_DIR="$WORK/$build" METRALE_GDN_BIG="$big" METRALE_GDN_SEED=$RANDOM
    [ "$variant" = default ] && unset METRALE_GDN_VARIANT || export METRALE_GDN_VARIANT="$variant"
    timeout 150 node "$VITEST" run --config vitest.gpu.config.ts test/gpu/gdn-kernels.test.ts > "$log" 2>&1; echo "exit $?" >> "$log" ) &
}
run_suite default base default 1
run_suite smem base smem 0
run_suite general base general 0
run_suite pipe base pipe 0
run_suite split base split 0
wait
{ for l in "$WORK"/test-*.log; do
    n=$(basename "$l" .log); n=${n#test-}
    echo "=== $n: $(grep -E "Tests +[0-9]" "$l" | sed 's/\x1b\[[0-9;]*m//g' | tr -s ' ') $(tail -1 "$l")"
    sed 's/\x1b\[[0-9;]*m//g' "$l" | grep -E "FAIL|Error|  FAIL$" | head -20
    sed 's/\x1b\[[0-9;]*m//g' "$l" | grep -E "seed|kernels from" | head -2
    sed 's/\x1b\[[0-9;]*m//g' "$l" | grep -E "^\S.*  (y|state|stash|convRing|convStash) " | awk '{for(i=1;i<=NF;i++) if ($i ~ /^[0-9.]+e[-+][0-9]+$/) {print $i; break}}' | sort -g | tail -1 | sed 's/^/  max rel L2 error: /'
  done; } > "$OUT/tests.log"
sed 's/\x1b\[[0-9;]*m//g' "$WORK/test-default.log" > "$OUT/tests-default.log"
grep -E "^===" "$OUT/tests.log" >> "$SUMMARY"
stamp "suites done" | tee -a "$SUMMARY"

# ---- A/B timing (alone on the GPU) ----
export METRALE_GDN_AB_BUILDS="base=$WORK/base,nb3=$WORK/nb3,r96=$WORK/r96"
export METRALE_GDN_AB_PIPE_NB="nb3=3"
export METRALE_GDN_AB_ROWS="base:smem,base:pipe,nb3:pipe,r96:pipe,base:split,base:general,base:two"
METRALE_BENCH_OUT="$OUT/ab.json" timeout 100 node bench/gdn-ab.mjs > "$OUT/ab.log" 2>&1
echo "ab exit $?" >> "$OUT/ab.log"
sed -n '/GDN variants A\/B/,$p' "$OUT/ab.log" >> "$SUMMARY"
grep -E "^!!" "$OUT/ab.log" | head -10 >> "$SUMMARY"
stamp "A/B done" | tee -a "$SUMMARY"

# ---- a few counters (ncu, one launch per section and batch) ----
NCU="$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
if [ -n "$NCU" ] && [ $(( $(date +%s) - T0 )) -lt 170 ]; then
  METRICS=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__occupancy_limit_warps,launch__shared_mem_config_size,lts__t_sector_hit_rate.pct
  METRALE_GDN_AB_NCU=1 METRALE_GDN_AB_ROWS="base:smem,base:pipe" timeout $(( 230 - ($(date +%s) - T0) )) \
    "$NCU" --clock-control none --target-processes all --kernel-name regex:gdn_ --metrics "$METRICS" --csv \
    node bench/gdn-ab.mjs > "$OUT/ncu.csv" 2> "$WORK/ncu.err"
  echo "ncu exit $?" >> "$SUMMARY"
  tail -5 "$WORK/ncu.err" >> "$SUMMARY"
else
  echo "ncu: not found or no time left" >> "$SUMMARY"
fi
stamp "done" | tee -a "$SUMMARY"
cat "$SUMMARY"
rm -rf "$WORK"
