#!/usr/bin/env bash
# The GPU half of the main job, in stages that each fit one device call:
#   scripts/gpu.sh check [ARGS]       GPU tests (gate on every revision, ncu end to end); ARGS go to pytest.
#                                     On the H100 the whole set runs past one 10-minute device call (the
#                                     gate of every softmax revision ~50 s each): split it, e.g.
#                                     check tests/test_gate_all_kernels.py -k softmax, then -k "not softmax",
#                                     then --ignore=tests/test_gate_all_kernels.py
#   scripts/gpu.sh sanitize           compute-sanitizer (memcheck, racecheck) on every CUDA C revision
#   scripts/gpu.sh profile K [K ...]  kernlog profile for each kernel (missing revisions only)
#   scripts/gpu.sh bench K [K ...]    kernlog bench for each kernel (BENCH_FAMILY=all: its shape families;
#                                     BENCH_REPEAT=3: three interleaved runs per point)
#   scripts/gpu.sh misses [K]         the ncu evidence the log's missed bars lack: each `kernlog profile`
#                                     that `kernlog misses` names (a point each, best step and reference)
#   scripts/gpu.sh liger              install Liger-Kernel (a reference) from wheels/ (make liger-wheel), no network
#   scripts/gpu.sh noise [K/R ...]    A/A noise calibration (default: a memory-, a latency- and a compute-bound revision)
#   scripts/gpu.sh retime A B [A B]   kernlog diff A B --retime for each pair
#   scripts/gpu.sh coldprofile [K]    time `kernlog profile K` (softmax) from an empty profiles/ and empty
#                                     compile caches (Triton, CuPy, Inductor), as the README's figure; profiles/ restored
#   scripts/gpu.sh adopt              kernlog as a new team runs it (docs/your-repository.md): the wheel built
#                                     here installed alone, `kernlog init` in a new git repository, the loop on
#                                     its example operator on this GPU; its log in adopt.log, the repository in
#                                     adopt-repo.tgz
# Logs go to $OUT (or ./gpu-logs); profiles/ is written in place.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
LOGS=${OUT:-gpu-logs}
mkdir -p "$LOGS"
stage=${1:?stage: check, profile or bench}; shift
status=0

sanitize() {  # every CUDA C revision of every kernel, on small odd shapes, both tools
  python3 - <<'PY' > "$LOGS/sanitize-plan.txt"
from pathlib import Path
from kernlog.registry import kernel_names, load_kernel
from kernlog.spec import format_shape
root = Path(".")
for name in kernel_names(root):
    k = load_kernel(root, name)
    revs = [r.name for r in k.revisions if r.kind == "cuda"]
    for shape in k.sanitize_shapes or k.check_shapes[-2:]:
        for dtype in k.dtypes:
            if revs:
                print(name, format_shape(shape), dtype, *revs)
PY
  while read -r line; do
    for tool in memcheck racecheck; do
      if compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all \
          python3 -m kernlog.run.target . $line > "$LOGS/sanitizer.tmp" 2>&1; then
        echo "$tool clean: $line"
      else
        echo "$tool FAILED: $line"; tail -30 "$LOGS/sanitizer.tmp"; status=1
      fi
    done
  done < "$LOGS/sanitize-plan.txt"
}

case $stage in
  check)
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
    python3 -m pytest -q -m "gpu or ncu" -p no:cacheprovider -rf "$@" 2>&1 | tee -a "$LOGS/pytest-gpu.log" | tail -40 || status=1
    ;;
  sanitize)
    sanitize 2>&1 | tee "$LOGS/sanitizer.log"
    grep -q FAILED "$LOGS/sanitizer.log" && status=1
    ;;
  profile)
    for k in "$@"; do
      /usr/bin/time -f "profile $k: %e s" python3 -m kernlog profile "$k" 2>&1 | tee -a "$LOGS/profile.log" || status=1
    done
    ;;
  bench)
    for k in "$@"; do  # KERNEL or KERNEL:SHAPE,SHAPE to sweep fewer shapes
      shapes=(); [[ $k == *:* ]] && { IFS=, read -ra s <<< "${k#*:}"; for x in "${s[@]}"; do shapes+=(--shape "$x"); done; }
      [ -n "${BENCH_FAMILY:-}" ] && shapes+=(--family "$BENCH_FAMILY")
      python3 -m kernlog bench "${k%%:*}" "${shapes[@]}" --budget "${BENCH_BUDGET:-0.5}" --repeat "${BENCH_REPEAT:-1}" 2>&1 | tee -a "$LOGS/bench.log" || status=1
    done
    ;;
  misses)
    python3 -m kernlog misses "$@" | tee "$LOGS/misses.txt"
    while read -r _ cmd; do  # "  kernlog profile K --rev ...": words without spaces or quotes
      # shellcheck disable=SC2086
      /usr/bin/time -f "$cmd: %e s" python3 -m kernlog $cmd 2>&1 | tee -a "$LOGS/misses-profile.log" || status=1
    done < <(grep '^  kernlog profile ' "$LOGS/misses.txt")
    ;;
  liger)
    wheel=$(ls wheels/liger_kernel-*.whl 2>/dev/null | tail -1)
    [ -n "$wheel" ] || { echo "no wheels/liger_kernel-*.whl: run make liger-wheel where there is a network"; exit 2; }
    python3 -m pip install -q --no-deps "$wheel" || status=1
    ;;
  noise)
    [ $# -gt 0 ] || set -- softmax/v7_bf16_packed softmax/v0_naive matmul_relu/v1_tma_persistent
    /usr/bin/time -f "noise: %e s" python3 -m kernlog noise "$@" --runs "${NOISE_RUNS:-5}" 2>&1 | tee -a "$LOGS/noise.log" || status=1
    ;;
  retime)
    while [ $# -ge 2 ]; do
      python3 -m kernlog diff "$1" "$2" --retime 2>&1 | tee -a "$LOGS/retime.log" || status=1
      shift 2
    done
    ;;
  coldprofile)  # the README's profile timing: an empty profiles/ and every compile cache emptied, then restored
    k=${1:-softmax}
    keep=$(mktemp -d)
    mv profiles "$keep/" && mkdir profiles
    rm -rf ~/.triton/cache ~/.cupy/kernel_cache /tmp/torchinductor_* ~/.cache/torch/inductor
    /usr/bin/time -f "cold profile $k: %e s" python3 -m kernlog profile "$k" 2>&1 | tee -a "$LOGS/coldprofile.log" || status=1
    rm -rf profiles && mv "$keep/profiles" profiles && rmdir "$keep"
    ;;
  adopt)
    site=$(mktemp -d); team=$(mktemp -d)/team
    mkdir -p "$site/source" && cp -r kernlog pyproject.toml "$site/source/"  # no stale in-tree build/
    python3 -m pip wheel -q --no-deps --no-build-isolation -w "$site/dist" "$site/source" \
      && python3 -m pip install -q --no-deps --no-compile --target "$site/lib" "$site"/dist/kernlog-*.whl || exit 1
    mkdir -p "$team" && git -C "$team" init -q && git -C "$team" config user.email team@example.com \
      && git -C "$team" config user.name team
    adopt_loop() {  # in the new repository, kernlog from the wheel alone
      cd "$team" && export PYTHONPATH="$site/lib"
      python3 -c 'import kernlog; print("kernlog from", kernlog.__file__)'
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
      for cmd in "init --kernels-dir gpu_ops" "list" "check add_relu" "profile add_relu" "bench add_relu" \
                 "diff add_relu/v0_two_kernels add_relu/v1_fused" "show add_relu/v1_fused" "report" "report --check"; do
        echo "\$ kernlog $cmd"
        # shellcheck disable=SC2086
        /usr/bin/time -f "(%e s)" python3 -m kernlog $cmd || echo "ADOPT FAILED: kernlog $cmd"
      done
      git add -A && git commit -qm "kernlog init; the first profiles"
      echo "\$ kernlog compare HEAD"; python3 -m kernlog compare HEAD || echo "ADOPT FAILED: compare"
      echo "\$ kernlog history add_relu/v1_fused"; python3 -m kernlog history add_relu/v1_fused || echo "ADOPT FAILED: history"
    }
    (adopt_loop) 2>&1 | tee "$LOGS/adopt.log"
    tar -C "$team" -czf "$LOGS/adopt-repo.tgz" --exclude .git . || status=1
    grep -q "ADOPT FAILED" "$LOGS/adopt.log" && status=1
    ;;
  *) echo "unknown stage $stage"; exit 2 ;;
esac
exit $status
