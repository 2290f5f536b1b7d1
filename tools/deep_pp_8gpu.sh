#!/usr/bin/env bash
# The Deep-PP study of SPEC §7 on one machine (docs/design/bench.md "The Deep-PP study"): checks the GPU count, runs
# the sweep of both model shapes (GLM-5.3, Kimi K3; dummy weights from ../shared/configs) with `penstock sweep`, and
# collects results.csv / summary.csv / plots of each, the machine description and the commit into one folder meant to
# be committed under docs/perf/, with a README.md of tables (tools/deep_pp_report.py).
#   tools/deep_pp_8gpu.sh                 # 8 GPUs: bench/sweeps/deep_pp_8gpu_{glm,k3}.toml
#   tools/deep_pp_8gpu.sh --gpus 2        # 2 GPUs: bench/sweeps/deep_pp_2gpu_{glm,k3}.toml (TP2 vs PP2, fewer layers)
#   tools/deep_pp_8gpu.sh --cpu-tiny      # no GPU: bench/sweeps/deep_pp_cpu_tiny_{glm,k3}.toml (8 ranks on the CPU)
# Options: --penstock BIN (default build/penstock), --configs DIR (default ../shared/configs; the GPU sweeps' model
# files), --out DIR (default docs/perf/<UTC date>-deep-pp-<kind>), --models "glm k3", --force (reuse --out),
# --resume (continue a study cut short in --out: `penstock sweep --resume` keeps the layouts already all ok),
# --repeats N / --num-prompts N (override the sweep files' 3 repeats / 40 requests: a quick pass, not the study),
# --dry-run (print the sweep commands only). Exit status: 0 every run of every sweep ok; 1 some run failed (the folder
# is still written); 2 bad arguments; 3 the machine or the binary cannot run the study (GPU count, serve flags).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GPUS=8
KIND=""
BIN="${ROOT}/build/penstock"
CONFIGS="${ROOT}/../shared/configs"
OUT=""
MODELS="glm k3"
FORCE=0
RESUME=0
DRY=0
OVERRIDES=()
die() { echo "deep_pp_8gpu: error: $*" >&2; exit "${2:-2}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --gpus) GPUS="$2"; shift 2 ;;
    --cpu-tiny) KIND="cpu-tiny"; shift ;;
    --penstock) BIN="$2"; shift 2 ;;
    --configs) CONFIGS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --force) FORCE=1; shift ;;
    --resume) RESUME=1; shift ;;
    --repeats) OVERRIDES+=(--repeats "$2"); shift 2 ;;
    --num-prompts) OVERRIDES+=(--num-prompts "$2"); shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
case "${KIND:-${GPUS}}" in
  cpu-tiny) PREFIX="deep_pp_cpu_tiny" ;;
  8) KIND="8gpu"; PREFIX="deep_pp_8gpu" ;;
  2) KIND="2gpu"; PREFIX="deep_pp_2gpu" ;;
  *) die "--gpus must be 8 or 2 (got '${GPUS}')" ;;
esac
[ -x "${BIN}" ] || die "penstock binary '${BIN}' is not executable (build it, or pass --penstock)"
BIN="$(cd "$(dirname "${BIN}")" && pwd)/$(basename "${BIN}")"

# The machine: a GPU study needs at least GPUS GPUs and a server that runs on them (not checked for --dry-run).
if [ "${KIND}" != "cpu-tiny" ] && [ "${DRY}" = 0 ]; then
  command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this is not a GPU machine (--cpu-tiny runs on the CPU)" 3
  HAVE="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"
  [ "${HAVE}" -ge "${GPUS}" ] || die "${GPUS} GPUs needed, nvidia-smi lists ${HAVE}" 3
  [ "${HAVE}" -eq "${GPUS}" ] || echo "deep_pp_8gpu: note: ${HAVE} GPUs, the study uses the first ${GPUS}" >&2
  HELP="$("${BIN}" serve --help 2>&1)"
  # Every layout is multi-rank: the build must serve --backend cuda under mpirun (--device-links came with that).
  for flag in --backend --dtype --num-layers --load-format --device-links; do
    grep -q -- "${flag}" <<<"${HELP}" || die "'penstock serve' has no ${flag} option: this build cannot serve the \
study on GPUs (the sweep files pass --backend cuda --dtype bfloat16 under mpirun)" 3
  done
fi
[ "${DRY}" = 1 ] || command -v mpirun >/dev/null || die "mpirun not found (Open MPI launches the ranks)" 3
command -v gnuplot >/dev/null || echo "deep_pp_8gpu: warning: gnuplot not found: CSVs only, no plots" >&2

if [ -z "${OUT}" ]; then OUT="${ROOT}/docs/perf/$(date -u +%Y-%m-%d)-deep-pp-${KIND}"; fi
if [ "${DRY}" = 0 ]; then
  if [ -e "${OUT}" ] && [ "${FORCE}" = 0 ] && [ "${RESUME}" = 0 ]; then
    die "${OUT} exists (pass --force to write into it, or --resume to continue it)"
  fi
  mkdir -p "${OUT}" || die "cannot create ${OUT}"
  OUT="$(cd "${OUT}" && pwd)"
fi

model_file() {  # model key -> the sweep's --model
  case "${KIND}:$1" in
    cpu-tiny:glm) echo "${ROOT}/bench/sweeps/configs/tiny-glm-5.3.json" ;;
    cpu-tiny:k3) echo "${ROOT}/bench/sweeps/configs/tiny-kimi-k3.json" ;;
    *:glm) echo "${CONFIGS}/glm-5.3.json" ;;
    *:k3) echo "${CONFIGS}/kimi-k3.json" ;;
    *) die "unknown model '$1' in --models (glm, k3)" ;;
  esac
}

if [ "${DRY}" = 0 ]; then
  {
    echo "utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git -C "${ROOT}" rev-parse HEAD 2>/dev/null)$(git -C "${ROOT}" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "subject: $(git -C "${ROOT}" log -1 --format=%s 2>/dev/null)"
    echo "branch: $(git -C "${ROOT}" rev-parse --abbrev-ref HEAD 2>/dev/null)"
    echo "binary: ${BIN}"
    echo "host: $(hostname)"
    echo "kernel: $(uname -srm)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') x $(nproc)"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "mpirun: $(mpirun --version 2>/dev/null | head -1)"
    if command -v nvidia-smi >/dev/null; then
      echo "gpus:"
      nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader 2>&1 | sed 's/^/  /'
      echo "topology:"
      nvidia-smi topo -m 2>&1 | sed 's/^/  /'
    else
      echo "gpus: none (nvidia-smi not found)"
    fi
  } > "${OUT}/machine.txt"
fi

STATUS=0
for m in ${MODELS}; do
  CFG="${ROOT}/bench/sweeps/${PREFIX}_${m}.toml"
  [ -f "${CFG}" ] || die "no sweep file ${CFG}"
  MODEL="$(model_file "${m}")"
  [ -f "${MODEL}" ] || die "model config ${MODEL} not found (pass --configs DIR)" 3
  ARGS=(sweep "${CFG}" --output-dir "${OUT}/${m}" --model "${MODEL}" --penstock "${BIN}" ${OVERRIDES[@]+"${OVERRIDES[@]}"})
  if [ "${DRY}" = 1 ]; then
    (cd "${ROOT}" && "${BIN}" "${ARGS[@]}" --dry-run)
    continue
  fi
  [ "${FORCE}" = 1 ] && ARGS+=(--force)
  [ "${RESUME}" = 1 ] && ARGS+=(--resume)
  echo "+ penstock ${ARGS[*]} ($(date -u +%H:%M:%S))" | tee -a "${OUT}/sweeps.log"
  (cd "${ROOT}" && "${BIN}" "${ARGS[@]}") 2>&1 | tee -a "${OUT}/sweeps.log"
  rc=${PIPESTATUS[0]}
  echo "sweep ${m}: exit ${rc}" | tee -a "${OUT}/sweeps.log"
  [ "${rc}" = 0 ] || STATUS=1
done
[ "${DRY}" = 1 ] && exit 0

python3 "${ROOT}/tools/deep_pp_report.py" "${OUT}" --models ${MODELS} > "${OUT}/README.md" ||
  { echo "deep_pp_8gpu: warning: the README could not be written" >&2; STATUS=1; }
echo "deep_pp_8gpu: ${OUT} (README.md, machine.txt, <model>/results.csv, summary.csv, plots/); exit ${STATUS}"
exit "${STATUS}"
