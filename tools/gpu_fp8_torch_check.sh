#!/usr/bin/env bash
# Issue 6 must-show on the GPU machine: the CUDA e4m3 cast (kernels/cuda/quantize_e4m3.cu, fp8.cuh) is bit-exact with
# torch.Tensor.to(torch.float8_e4m3fn) over all 65,536 bf16 values. Two links, both run there: (1) torch, live on the
# GPU (and on the CPU), casts every bf16 pattern and must reproduce tests/data/e4m3_torch_bf16.bin byte for byte;
# (2) Penstock's kernel, on the same GPU, must reproduce that file (cuda_kernels_test QuantizeE4m3Test.*: every bf16
# pattern as f32 and as bf16 input, specials, sizes and offsets).
#   bash tools/gpu_fp8_torch_check.sh PKG_DIR OUT_DIR      (PKG_DIR: cuda_kernels_test + lib/, built with CUDA)
set -euo pipefail
pkg=$1; out=$2
mkdir -p "$out"
python3 - <<'PY' 2>&1 | tee "$out/torch_live.txt"
import torch, numpy as np
bits = torch.arange(65536, dtype=torch.int32).to(torch.int16)  # wraps to every 16-bit pattern
table = np.fromfile("tests/data/e4m3_torch_bf16.bin", dtype=np.uint8)
assert table.size == 65536, table.size
for dev in ("cuda", "cpu"):
    x = bits.to(dev).view(torch.bfloat16)
    got = x.to(torch.float8_e4m3fn).view(torch.uint8).cpu().numpy()
    bad = np.nonzero(got != table)[0]
    print(f"torch {torch.__version__} on {dev} ({torch.cuda.get_device_name(0) if dev == 'cuda' else 'host'}): "
          f"{65536 - bad.size}/65536 bf16 patterns equal the committed table; mismatches {bad.size}")
    assert bad.size == 0, bad[:10]
PY
# The test binary reads the table from the path it was built with.
data_dir=$(strings "$pkg/cuda_kernels_test" | grep -m1 -o '/[^ ]*/tests/data' || true)
if [ -n "$data_dir" ] && [ ! -e "$data_dir" ]; then mkdir -p "$(dirname "$data_dir")"; ln -s "$PWD/tests/data" "$data_dir"; fi
LD_LIBRARY_PATH="$pkg/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" "$pkg/cuda_kernels_test" \
  --gtest_filter='QuantizeE4m3Test.*:DsaOp*Quantize*' 2>&1 | tee "$out/kernel.txt"
grep -q "PASSED" "$out/kernel.txt" && ! grep -q "SKIPPED\|FAILED" "$out/kernel.txt"
echo "fp8 cast: torch live == table == Penstock kernel on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee "$out/summary.txt"
