"""Prefill/decode disaggregation through two `penstock serve` processes (SPEC §5; docs/design/disagg.md).

A decode server (--disaggregation-mode decode) and a prefill server (--disaggregation-mode prefill) on the bundled tiny
DeepSeek-V3 model. Each request goes to both with the same bootstrap_room (SGLang's fields); the prefill server gets
the decode server as bootstrap_host / bootstrap_port, computes the first token, and sends the room's KV pages over UCX
into the pages the decode server reserved; the decode server generates the rest. The decode server's greedy output_ids
equal a plain server's for several prompt lengths sent concurrently, streamed or not; /get_server_info reports the
mode; /metrics ends with no KV page in use on either end. A room with no prefill request fails at the waiting deadline
with a clean error (RELIABILITY T11); a prefill request without bootstrap_host is a 400; a plain server refuses
bootstrap_room; a malformed destination query is a 400 and an unknown room a 404.

Run: PENSTOCK_BINARY=build/penstock python3 tests/server/test_disagg.py (ctest does this)."""
import json
import os
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from serverlib import Server  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BUNDLED = os.path.join(ROOT, "assets", "tiny-deepseek-v3")
PROMPTS = [list(range(3, 3 + n)) for n in (9, 64, 70, 130)]


def generate(server, ids, max_new, **extra):
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True}}
    body.update(extra)
    return server.post("/generate", body, timeout=120)


class Disaggregation(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.plain = Server("--model", BUNDLED)
        cls.decode = Server("--model", BUNDLED, "--disaggregation-mode", "decode",
                            "--disaggregation-waiting-timeout-ms", "3000", "--disaggregation-transfer-timeout-ms", "500")
        cls.prefill = Server("--model", BUNDLED, "--disaggregation-mode", "prefill", "--chunked-prefill-size", "64")

    @classmethod
    def tearDownClass(cls):
        for s in (cls.plain, cls.decode, cls.prefill):
            s.stop()

    def test_prefill_then_decode_equals_one_server(self):
        want = []
        for ids in PROMPTS:
            status, _, body = generate(self.plain, ids, 6)
            self.assertEqual(status, 200, body)
            want.append(body["output_ids"])
        results = {}

        def run(i, room, stream):
            dec = {}

            def on_decode():
                if stream:
                    st, frames, done = self.decode.sse("/generate", {
                        "input_ids": PROMPTS[i], "stream": True, "bootstrap_room": room,
                        "sampling_params": {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}}, timeout=120)
                    dec["status"], dec["ids"] = st, frames[-1]["output_ids"] if frames else None
                    dec["done"] = done
                else:
                    st, _, body = generate(self.decode, PROMPTS[i], 6, bootstrap_room=room)
                    dec["status"], dec["ids"], dec["body"] = st, body.get("output_ids"), body
            t = threading.Thread(target=on_decode)
            t.start()
            st, _, body = generate(self.prefill, PROMPTS[i], 6, bootstrap_room=room, bootstrap_host="127.0.0.1",
                                   bootstrap_port=self.decode.port)
            t.join()
            results[i] = (st, body, dec)

        threads = [threading.Thread(target=run, args=(i, 7000 + i, i % 2 == 1)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, ids in enumerate(PROMPTS):
            st, body, dec = results[i]
            self.assertEqual(st, 200, body)
            self.assertEqual(body["output_ids"], want[i][:1], "the prefill server answers with the first token")
            self.assertEqual(dec["status"], 200, dec)
            self.assertEqual(dec["ids"], want[i], f"prompt of {len(ids)} tokens")
        for server in (self.decode, self.prefill):
            server.wait_metric("penstock_kv_pages_used", lambda v: v == 0)
        info = json.loads(self.decode.request("GET", "/get_server_info")[2])
        self.assertEqual(info["disaggregation_mode"], "decode")
        self.assertEqual(json.loads(self.prefill.request("GET", "/get_server_info")[2])["disaggregation_mode"],
                         "prefill")
        self.assertEqual(self.prefill.metrics().get('penstock_kv_transfers_total{outcome="sent"}'), len(PROMPTS))
        self.assertEqual(self.decode.metrics().get('penstock_kv_transfers_total{outcome="received"}'), len(PROMPTS))

    def test_failures_are_clean(self):
        # No prefill request for the room: the decode request fails at the waiting deadline, its pages freed.
        status, _, body = generate(self.decode, PROMPTS[1], 4, bootstrap_room=99)
        self.assertNotEqual(status, 200, body)
        self.assertIn("deadline passed in WaitingForInput", json.dumps(body))
        self.decode.wait_metric("penstock_kv_pages_used", lambda v: v == 0)
        status, _, body = generate(self.prefill, PROMPTS[0], 4, bootstrap_room=5)
        self.assertEqual(status, 400, body)
        self.assertIn("bootstrap_host", json.dumps(body))
        status, _, body = generate(self.plain, PROMPTS[0], 4, bootstrap_room=5)
        self.assertEqual(status, 400, body)
        self.assertIn("not in a disaggregation mode", json.dumps(body))
        self.assertEqual(self.decode.request("GET", "/disagg/destination?room=x")[0], 400)
        self.assertEqual(self.decode.request("GET", "/disagg/destination?room=12345")[0], 404)
        self.assertEqual(self.plain.request("GET", "/disagg/destination?room=1")[0], 409)


if __name__ == "__main__":
    unittest.main(verbosity=2)
