#!/usr/bin/env bash
# Session 10, call E: every GPU test binary on the final tree (cuda_kernels_test, cuda_runtime_test,
# cuda_attention_cudnn_test) and `penstock serve` with --fp8-attention (DeepSeek-V3, 2 dummy layers, 16K prompts).
set -uo pipefail
mkdir -p /tmp/s && tar -xJf build-dev-lead/s10.tar.xz -C /tmp/s; P=/tmp/s/s10
O=/tmp/c10e; mkdir -p $O
CUDNN_LIB="$(python3 -c "import glob,os,torch; h=glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),'nvidia','**','libcudnn.so.9'),recursive=True); print(os.path.dirname(h[0]) if h else '')")"
export LD_LIBRARY_PATH=$P/lib:$CUDNN_LIB:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
echo "commit $(cat $P/COMMIT 2>/dev/null)"
for t in cuda_runtime_test cuda_attention_cudnn_test cuda_kernels_test; do
  timeout 400 $P/bin/$t > $O/$t.log 2>&1; echo "$t rc $? ($(grep -c '| PASS' $O/$t.log) conf PASS, $(grep -c '| FAIL' $O/$t.log) conf FAIL)"
  grep -E "^\[  PASSED|^\[  FAILED|tests ran" $O/$t.log | head -6
done
for fa in "" "--fp8-attention"; do
  port=$((31000 + RANDOM % 2000))
  setsid $P/bin/penstock serve --model $P/configs/deepseek-v3.json --port $port --backend cuda --dtype bfloat16 --load-format dummy --num-layers 2 --skip-tokenizer-init --chunked-prefill-size 16384 --max-total-tokens 200000 $fa > $O/serve$fa.log 2>&1 & spid=$!
  for i in $(seq 120); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 1; done
  timeout 90 $P/bin/penstock bench --base-url http://127.0.0.1:$port --dataset random-ids --input-len 16384 --output-len 1 --num-prompts 16 --max-concurrency 4 --seed 1 --timeout-s 80 --summary-file $O/serve$fa.summary.json --quiet > $O/serve$fa.bench.log 2>&1
  echo "serve [$fa] bench rc $?"
  curl -s -m 5 http://127.0.0.1:$port/get_server_info | python3 -c "import json,sys; d=json.load(sys.stdin); print({k:d.get(k) for k in ('fp8_attention','mla_form')})" 2>/dev/null
  python3 -c "import json;d=json.load(open('$O/serve$fa.summary.json'));print({k:d[k] for k in d if 'throughput' in k or k in ('completed','failed','duration_s')}, d.get('ttft_ms',{}).get('p50') if isinstance(d.get('ttft_ms'),dict) else d.get('ttft_ms'))" 2>&1 | tail -1
  kill -TERM -- -$spid 2>/dev/null; sleep 3; kill -KILL -- -$spid 2>/dev/null
done
tar -C /tmp -cJf $OUT/c10e.tar.xz c10e
