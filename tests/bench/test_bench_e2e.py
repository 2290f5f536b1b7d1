"""`penstock bench` against `penstock serve` on the embedded model: N/N completed -> exit 0 with JSONL + summary;
failing requests -> exit 1; unreachable server -> exit 2."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from serverlib import BINARY, Server  # noqa: E402


class BenchE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server()
        cls.url = f"http://127.0.0.1:{cls.srv.port}"

    @classmethod
    def tearDownClass(cls):
        assert cls.srv.stop() == 0

    def bench(self, *flags):
        return subprocess.run([BINARY, "bench", "--base-url", self.url, "--quiet", *flags], capture_output=True,
                              text=True, timeout=120)

    def test_random_ids_and_random_text(self):
        with tempfile.TemporaryDirectory() as d:
            runs, summary = os.path.join(d, "runs.jsonl"), os.path.join(d, "summary.json")
            r = self.bench("--dataset", "random-ids", "--input-len", "128", "--output-len", "4", "--num-prompts", "8",
                           "--max-concurrency", "4", "--range-ratio", "0.5", "--seed", "3", "--output-file", runs,
                           "--summary-file", summary)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("OK: 8/8", r.stdout)
            s = json.load(open(summary))
            self.assertEqual((s["completed"], s["failed"], s["all_ok"]), (8, 0, True))
            self.assertEqual(s["total_output_tokens"], 8 * 0 + sum(
                json.loads(line)["output_tokens"] for line in open(runs)))
            self.assertGreater(s["input_throughput_tok_s"], 0)
            for key in ("mean", "p50", "p95", "p99"):
                self.assertIn(key, s["ttft_ms"])
            lines = [json.loads(line) for line in open(runs)]
            self.assertEqual(len(lines), 8)
            self.assertTrue(all(64 <= x["prompt_tokens"] <= 128 for x in lines))
            self.assertTrue(all(x["ok"] and x["ttft_s"] > 0 for x in lines))
        r = self.bench("--dataset", "random", "--input-len", "32", "--output-len", "2", "--num-prompts", "4",
                       "--max-concurrency", "2", "--request-rate", "50")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_failures_exit_nonzero(self):
        r = self.bench("--input-len", "5000", "--output-len", "1", "--num-prompts", "2", "--max-concurrency", "2")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("FAILED: 2 of 2", r.stdout)
        r = subprocess.run([BINARY, "bench", "--base-url", "http://127.0.0.1:1", "--num-prompts", "1"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
