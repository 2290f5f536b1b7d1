#!/usr/bin/env python3
"""`penstock serve --backend cuda` on a GPU machine: for each model directory, serve it on the CPU (float32), on the
GPU (float32) and on the GPU (bfloat16), send the same greedy /generate requests (token ids, --skip-tokenizer-init)
to each, and print how many generated tokens agree with the CPU server's, plus /get_server_info's backend and dtype.
Multi-rank modes serve under `$MPIRUN -np 2` (MPIRUN defaults to mpirun): cuda-pp2 / cuda-bf16-pp2 (--pp 2) and
cuda-tp2 (--tp 2), with --device-links host --ranks-per-gpu 2 when GPUS=1 (both ranks on GPU 0: NCCL refuses that),
else NCCL links, one GPU per rank; they are also compared with the single-process server of the same dtype.

  python3 tools/gpu_serve_check.py PENSTOCK_BINARY MODEL_DIR [MODEL_DIR ...] [--modes cpu,cuda,cuda-bf16] [--json OUT]

Exit status: non-zero when a server fails to start or a request fails (agreement is reported, not asserted: greedy
tokens may differ at near-ties between backends; the CUDA float32 logits are checked against the reference elsewhere).
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.request

MODES = {"cpu": ("cpu", "float32", []), "cuda": ("cuda", "float32", []), "cuda-bf16": ("cuda", "bfloat16", []),
         "cuda-pp2": ("cuda", "float32", ["--pp", "2"]), "cuda-bf16-pp2": ("cuda", "bfloat16", ["--pp", "2"]),
         "cuda-tp2": ("cuda", "float32", ["--tp", "2"]), "cpu-pp2": ("cpu", "float32", ["--pp", "2"])}
SINGLE = {"cuda-pp2": "cuda", "cuda-bf16-pp2": "cuda-bf16", "cuda-tp2": "cuda"}


class Server:
    def __init__(self, binary, model, backend, dtype, parallel=()):
        cmd = [binary, "serve", "--model", model, "--port", "0", "--skip-tokenizer-init", "--threads", "4",
               "--backend", backend, "--dtype", dtype, "--max-total-tokens", "8192"]
        if parallel and backend == "cpu":
            cmd = [os.environ.get("MPIRUN", "mpirun"), "--oversubscribe", "-np", "2"] + cmd + list(parallel)
        elif parallel:
            links = ["--device-links", "host", "--ranks-per-gpu", "2"] if os.environ.get("GPUS", "1") == "1" else []
            cmd = [os.environ.get("MPIRUN", "mpirun"), "--oversubscribe", "-np", "2"] + cmd + list(parallel) + links
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.port = None
        self.head = []
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.head.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                pid = re.search(r"pid (\d+)", line)
                self.pid = int(pid.group(1)) if pid else self.proc.pid  # rank 0 under mpirun
                break
        if self.port is None:
            self.proc.kill()
            raise RuntimeError(f"server did not start: {' '.join(cmd)}\n{''.join(self.head)}")

    def request(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())

    def stop(self):
        # SIGTERM to the serving process (global rank 0 under mpirun): it drains and stops the other ranks.
        os.kill(self.pid, 15)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--modes", default="cpu,cuda,cuda-bf16")
    ap.add_argument("--json")
    args = ap.parse_args()
    modes = args.modes.split(",")
    results = []
    failed = False
    for model in args.models:
        outputs = {}
        for mode in modes:
            backend, dtype, parallel = MODES[mode]
            t0 = time.time()
            try:
                srv = Server(args.binary, model, backend, dtype, parallel)
            except RuntimeError as e:
                print(f"{model} {mode}: FAILED TO START\n{e}", flush=True)
                failed = True
                continue
            try:
                info = srv.request("GET", "/get_server_info")
                rng = random.Random(7)
                vocab = info["vocab_size"]
                prompts = [[rng.randrange(1, vocab) for _ in range(n)] for n in (1, 5, 17, 64, 130, 300)]
                outs = []
                for p in prompts:
                    body = srv.request("POST", "/generate", {"input_ids": p, "sampling_params":
                                                             {"max_new_tokens": 8, "temperature": 0}})
                    outs.append(body["output_ids"])
                outputs[mode] = outs
                print(f"{model} {mode}: backend {info.get('backend')} dtype {info.get('dtype')}, "
                      f"{len(outs)} requests in {time.time() - t0:.1f} s", flush=True)
            except Exception as e:  # noqa: BLE001 (report and go on to the next mode)
                print(f"{model} {mode}: REQUEST FAILED: {e}", flush=True)
                failed = True
            finally:
                rc = srv.stop()
                if rc != 0:
                    print(f"{model} {mode}: server exit status {rc}", flush=True)
                    failed = True
        for mode, outs in outputs.items():
            for base in ("cpu", SINGLE.get(mode)):
                ref = outputs.get(base) if base else None
                if mode == base or ref is None:
                    continue
                same = sum(a == b for ra, rb in zip(ref, outs) for a, b in zip(ra, rb))
                total = sum(len(r) for r in ref)
                first = sum(ra[:1] == rb[:1] for ra, rb in zip(ref, outs))
                print(f"{model} {mode} vs {base}: {same}/{total} generated tokens equal, first token equal in "
                      f"{first}/{len(ref)} requests", flush=True)
                results.append({"model": model, "mode": mode, "versus": base, "equal_tokens": same, "tokens": total,
                                "first_token_equal": first, "requests": len(ref)})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
