"""NVIDIA's `aiperf` benchmark client (a real third-party client, not written here) against `penstock serve` on the
embedded model: `/v1/completions` and `/v1/chat/completions`, streaming, synthetic prompts, a few requests at
concurrency 2. Asserts that every request completed without an error and that TTFT and throughput are present and
positive, from aiperf's own export files.

aiperf is found through $PENSTOCK_AIPERF, else where tools/setup.sh installs it (the tools venv, ~/.local/bin), else on
PATH. Without it the test prints a loud SKIPPING line (ctest reports it as skipped). Runs offline: the tokenizer is the bundled model
directory (aiperf counts tokens with it; a local path never touches the Hugging Face Hub), and HTTP(S) proxies point at
a closed port so that any stray network call fails at once instead of hanging."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from serverlib import Server, find_tool  # noqa: E402

MODEL_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "assets", "tiny-deepseek-v3"))
N_REQUESTS = 6
OUTPUT_LEN = 8


def find_aiperf():
    path = os.environ.get("PENSTOCK_AIPERF", "")
    if path and os.access(path, os.X_OK):
        return path
    return find_tool("aiperf")


AIPERF = find_aiperf()
SKIP_MESSAGE = ("aiperf is not installed (tools/setup.sh installs it: pip install aiperf); "
                "SKIPPING the third-party benchmark client test")


def metric(summary, name, stat="avg"):
    value = summary.get(name)
    if not isinstance(value, dict) or value.get(stat) is None:
        raise AssertionError(f"aiperf summary has no {name}.{stat}: {value!r}")
    return float(value[stat])


@unittest.skipIf(AIPERF is None, SKIP_MESSAGE)
class AiperfClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server()
        cls.tmp = tempfile.mkdtemp(prefix="penstock-aiperf-")

    @classmethod
    def tearDownClass(cls):
        try:
            assert cls.srv.stop() == 0
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_aiperf(self, endpoint_type):
        out = os.path.join(self.tmp, endpoint_type)
        cmd = [AIPERF, "profile", "--model", "tiny-deepseek-v3", "--url", f"http://127.0.0.1:{self.srv.port}",
               "--endpoint-type", endpoint_type, "--streaming", "--tokenizer", MODEL_DIR,
               "--request-count", str(N_REQUESTS), "--concurrency", "2",
               "--prompt-input-tokens-mean", "32", "--prompt-input-tokens-stddev", "0",
               "--prompt-output-tokens-mean", str(OUTPUT_LEN), "--prompt-output-tokens-stddev", "0",
               "--extra-inputs", "ignore_eos:true", "--use-server-token-count", "--random-seed", "7",
               "--workers-max", "1", "--record-processors", "1", "--ui-type", "none",
               "--output-artifact-dir", out]
        env = dict(os.environ, HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9",
                   NO_PROXY="127.0.0.1,localhost", HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false")
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=240)
        self.assertEqual(proc.returncode, 0, f"aiperf failed:\n{proc.stdout[-4000:]}")
        with open(os.path.join(out, "profile_export_aiperf.json")) as f:
            summary = json.load(f)
        with open(os.path.join(out, "profile_export.jsonl")) as f:
            records = [json.loads(line) for line in f if line.strip()]
        return summary, records

    def check(self, endpoint_type):
        summary, records = self.run_aiperf(endpoint_type)
        self.assertEqual(len(records), N_REQUESTS)
        for r in records:
            self.assertFalse(r.get("error"), f"request failed: {r.get('error')}")
            self.assertFalse(r["metadata"].get("was_cancelled"))
        self.assertTrue(summary.get("is_complete"))
        self.assertFalse(summary.get("was_cancelled"))
        self.assertFalse(summary.get("error_summary"), summary.get("error_summary"))
        self.assertEqual(metric(summary, "request_count"), N_REQUESTS)
        self.assertEqual(metric(summary, "request_error_rate"), 0.0)
        # Server-reported usage (ignore_eos): every request generated exactly OUTPUT_LEN tokens.
        self.assertEqual(metric(summary, "usage_completion_tokens", "min"), OUTPUT_LEN)
        self.assertEqual(metric(summary, "usage_completion_tokens", "max"), OUTPUT_LEN)
        ttft_p50 = metric(summary, "time_to_first_token", "p50")
        ttft_p99 = metric(summary, "time_to_first_token", "p99")
        itl = metric(summary, "inter_token_latency")
        req_tput = metric(summary, "request_throughput")
        out_tput = metric(summary, "output_token_throughput")
        in_tput = metric(summary, "input_token_throughput")
        for name, v in [("ttft_p50", ttft_p50), ("ttft_p99", ttft_p99), ("itl", itl), ("request_throughput", req_tput),
                        ("output_token_throughput", out_tput), ("input_token_throughput", in_tput)]:
            self.assertGreater(v, 0.0, name)
        print(f"[figures] aiperf {summary.get('aiperf_version')} {endpoint_type} streaming: {N_REQUESTS}/{N_REQUESTS} "
              f"ok, concurrency 2, ISL {metric(summary, 'input_sequence_length'):.0f} OSL {OUTPUT_LEN}: "
              f"TTFT p50 {ttft_p50:.1f} ms p99 {ttft_p99:.1f} ms, ITL {itl:.1f} ms, {req_tput:.2f} req/s, "
              f"{in_tput:.1f} input tok/s, {out_tput:.1f} output tok/s", flush=True)

    def test_completions(self):
        self.check("completions")

    def test_chat(self):
        self.check("chat")


if __name__ == "__main__":
    if AIPERF is None:
        print(f"*** {SKIP_MESSAGE} ***", flush=True)
    unittest.main(verbosity=2)
