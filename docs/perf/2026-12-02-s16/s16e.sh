#!/usr/bin/env bash
# Session 16, call E: out_scale_from (bf16 / f32) — Fp8AttentionTest.* with the f32 composed path added.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s16e.tar.xz -C /tmp/s
P=/tmp/s/s16e; O=/tmp/s16e; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t=cuda_attention_cudnn_test
timeout 150 $P/bin/$t > $O/$t.log 2>&1; echo "$t rc $? at ${SECONDS}s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $O/$t.log | head -8
echo "  conf PASS $(grep -c '\[conf\].*PASS' $O/$t.log) FAIL $(grep -c '\[conf\].*FAIL' $O/$t.log)"
grep -E "\[conf\].*FAIL" $O/$t.log | head -5
echo "  out_scale lines: $(grep -c 'attention_fp8_out_scale.*PASS' $O/$t.log) PASS, f32 composed: $(grep -c 'f32, composed.*PASS' $O/$t.log)"
grep -E "^\[conf\]|PASSED|FAILED|OK \]" $O/$t.log > $O/$t.conf.log; rm $O/$t.log
tar -C /tmp -cJf $OUT/s16e.tar.xz s16e
