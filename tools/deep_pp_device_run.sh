#!/usr/bin/env bash
# One device call of the Deep-PP study on a lent multi-GPU machine (docs/design/bench.md "The Deep-PP study"): unpacks
# the session bundle (tools/session_gpu_pack.sh: penstock and its libraries, the model configs), points the loader at
# the machine's CUDA, NCCL, cuDNN and OpenMPI, then runs tools/deep_pp_8gpu.sh for MODELS and leaves the study folder
# as OUT/deep-pp-<models>.tar.xz (the device tool brings back no deeper than two folders).
#   OUT=DIR [GPUS=2] [MODELS="glm k3"] [STUDY_TIMEOUT=500] [EXTRA="--repeats 1"] [RESUME_FROM=deep-pp-<models>.tar.xz] \
#     tools/deep_pp_device_run.sh BUNDLE.tar.xz
# RESUME_FROM: the folder an earlier call brought back (carried with the call), unpacked first and continued with
# --resume, so that a study longer than one call's limit runs over several calls.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:?}"; GPUS="${GPUS:-2}"; MODELS="${MODELS:-glm k3}"
mkdir -p /tmp/s && tar -xJf "$1" -C /tmp/s || exit 3
PKG=/tmp/s/$(basename "$1" .tar.xz)
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
NCCL_DIR=$(dirname "$( (ls /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/local/cuda/lib64/libnccl.so.2 2>/dev/null) | head -1)")
export LD_LIBRARY_PATH="${PKG}/lib:${CUDNN_LIB}:/usr/local/cuda/lib64:${NCCL_DIR}:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
echo "bundle commit $(cat "${PKG}/COMMIT"); $(mpirun --version 2>&1 | head -1)"
nvidia-smi topo -m 2>&1 | head -6
ldd "${PKG}/bin/penstock" | grep -E "not found|mpi|nccl|cudnn"
tag=$(echo "${MODELS}" | tr ' ' '-')
if [ -n "${RESUME_FROM:-}" ]; then
  tar -xJf "${RESUME_FROM}" -C /tmp || exit 3
  [ -d "/tmp/deep-pp-${tag}" ] || { echo "deep_pp_device_run: ${RESUME_FROM} holds no deep-pp-${tag}/" >&2; exit 3; }
  EXTRA="${EXTRA:-} --resume"
fi
# The study runs in its own session; at STUDY_TIMEOUT the whole group gets SIGINT (the sweep stops its servers and
# keeps the finished runs), then SIGKILL a minute later, so the folder is packed before the device call's limit.
setsid bash "${ROOT}/tools/deep_pp_8gpu.sh" --gpus "${GPUS}" --penstock "${PKG}/bin/penstock" \
  --configs "${PKG}/configs" --out "/tmp/deep-pp-${tag}" --models "${MODELS}" ${EXTRA:-} &
study=$!
( sleep "${STUDY_TIMEOUT:-500}"; echo "deep_pp_device_run: study timeout, SIGINT"; kill -INT -- "-${study}"
  sleep 60; kill -KILL -- "-${study}" ) 2>/dev/null &
watchdog=$!
wait "${study}"; rc=$?
kill "${watchdog}" 2>/dev/null
echo "deep_pp_8gpu exit ${rc}"
tar -C /tmp -cJf "${OUT}/deep-pp-${tag}.tar.xz" "deep-pp-${tag}"
exit ${rc}
