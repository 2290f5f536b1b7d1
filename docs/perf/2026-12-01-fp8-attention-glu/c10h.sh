#!/usr/bin/env bash
# Session 10, call H: the lse-less cuDNN call on a ragged batch with rows that see no key (the empty-row kernel must
# not write an lse), with the rest of cuda_attention_cudnn_test.
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s10.tar.xz -C /tmp/s; P=/tmp/s/s10
O=/tmp/c10h; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
timeout 120 $P/bin/cuda_attention_cudnn_test > $O/attn_test.log 2>&1; echo "attn test rc $? ($(grep -c '| PASS' $O/attn_test.log) PASS, $(grep -c '| FAIL' $O/attn_test.log) FAIL)"
grep -E "^\[  PASSED|FAILED|attention_no_lse" $O/attn_test.log | head -8
tar -C /tmp -cJf $OUT/c10h.tar.xz c10h
