"""Prefill/decode disaggregation through two `penstock serve` processes (SPEC §5; docs/design/disagg.md).

A decode server (--disaggregation-mode decode) and a prefill server (--disaggregation-mode prefill) on the bundled tiny
DeepSeek-V3 model. Each request goes to both with the same bootstrap_room (SGLang's fields); the prefill server gets
the decode server as bootstrap_host / bootstrap_port, computes the first token, and sends the room's KV pages over UCX
into the pages the decode server reserved; the decode server generates the rest. The decode server's greedy output_ids
equal a plain server's for several prompt lengths sent concurrently, streamed or not; /get_server_info reports the
mode; /metrics ends with no KV page in use on either end. A Kimi K3-shaped model's rooms carry their KDA state with the pages. A room with no prefill request fails at the
waiting deadline
with a clean error (RELIABILITY T11); a prefill request without bootstrap_host is a 400; a plain server refuses
bootstrap_room; a malformed destination query is a 400 and an unknown room a 404.

`penstock router --prefill URL --decode URL` in front of them: /generate (streamed and not), /v1/completions and
/v1/chat/completions give the plain server's greedy outputs; /health, /get_server_info and /v1/models cover the servers;
a killed decode server is skipped after the router's next health round; `penstock
bench` through the router completes N/N requests.

Run: PENSTOCK_BINARY=build/penstock python3 tests/server/test_disagg.py (ctest does this)."""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from serverlib import BINARY, Server  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BUNDLED = os.path.join(ROOT, "assets", "tiny-deepseek-v3")
K3 = os.path.join(ROOT, "tests", "data", "variants_k3", "k3_tiny_block2")
PROMPTS = [list(range(3, 3 + n)) for n in (9, 64, 70, 130)]


def generate(server, ids, max_new, **extra):
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True}}
    body.update(extra)
    return server.post("/generate", body, timeout=120)


class Router:
    """A `penstock router --port 0` subprocess in front of the given servers."""

    def __init__(self, prefill, decode, extra_decode=None):
        extra = ["--decode", f"http://127.0.0.1:{extra_decode.port}"] if extra_decode else []
        self.proc = subprocess.Popen(
            [BINARY, "router", "--port", "0", "--prefill", f"http://127.0.0.1:{prefill.port}",
             "--decode", f"http://127.0.0.1:{decode.port}", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            raise RuntimeError(f"router did not start: {line!r} {self.proc.stderr.read()!r}")
        self.port = int(m.group(1))

    def request(self, method, path, body=None, timeout=120):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, data

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


class Disaggregation(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.plain = Server("--model", BUNDLED)
        try:
            cls.decode = Server("--model", BUNDLED, "--disaggregation-mode", "decode",
                                "--disaggregation-waiting-timeout-ms", "60000")
        except RuntimeError as e:
            cls.plain.stop()
            if "no UCX" in str(e):
                raise unittest.SkipTest("this build has no transfer engine (libucx-dev): " + str(e))
            raise
        cls.prefill = Server("--model", BUNDLED, "--disaggregation-mode", "prefill", "--chunked-prefill-size", "64")
        cls.router = Router(cls.prefill, cls.decode)

    @classmethod
    def tearDownClass(cls):
        assert cls.router.stop() == 0
        for s in (cls.plain, cls.decode, cls.prefill):
            s.stop()

    def test_router_fronts_the_pair(self):
        body = {"input_ids": PROMPTS[2], "sampling_params": {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True}}
        want = self.plain.post("/generate", body)[2]["output_ids"]
        status, data = self.router.request("POST", "/generate", body)
        self.assertEqual(status, 200, data)
        self.assertEqual(json.loads(data)["output_ids"], want)
        status, data = self.router.request("POST", "/generate", dict(body, stream=True))
        self.assertEqual(status, 200, data)
        frames = [json.loads(f[6:]) for f in data.decode().split("\n\n") if f.startswith("data: {")]
        self.assertEqual(frames[-1]["output_ids"], want)
        self.assertIn("data: [DONE]", data.decode())
        for path, req in (("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 5,
                                               "temperature": 0}),
                          ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5,
                                                    "temperature": 0})):
            status, data = self.router.request("POST", path, req)
            self.assertEqual(status, 200, data)
            got, ref = json.loads(data), self.plain.post(path, req)[2]
            key = "text" if path == "/v1/completions" else "message"
            self.assertEqual(got["choices"][0][key], ref["choices"][0][key], path)
        self.assertEqual(self.router.request("GET", "/health")[0], 200)
        info = json.loads(self.router.request("GET", "/get_server_info")[1])["router"]
        self.assertEqual(info["decode"][0]["info"]["disaggregation_mode"], "decode")
        self.assertEqual(info["prefill"][0]["info"]["disaggregation_mode"], "prefill")
        self.assertEqual(self.router.request("GET", "/nowhere")[0], 404)
        status, data = self.router.request("GET", "/v1/models")
        self.assertEqual(status, 200, data)
        self.assertEqual(json.loads(data)["data"][0]["id"], json.loads(self.plain.request("GET", "/v1/models")[2])[
            "data"][0]["id"])
        self.assertEqual(self.router.request("POST", "/generate", None)[0], 400)
        # The load generator through the router: every request completes.
        run = subprocess.run([BINARY, "bench", "--base-url", f"http://127.0.0.1:{self.router.port}", "--dataset",
                              "random-ids", "--input-len", "100", "--output-len", "4", "--num-prompts", "8",
                              "--max-concurrency", "4", "--seed", "3"], capture_output=True, text=True, timeout=240)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        for server in (self.decode, self.prefill):
            server.wait_metric("penstock_kv_pages_used", lambda v: v == 0)

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
        self.assertGreaterEqual(self.prefill.metrics().get('penstock_kv_transfers_total{outcome="sent"}'),
                                len(PROMPTS))
        self.assertGreaterEqual(self.decode.metrics().get('penstock_kv_transfers_total{outcome="received"}'),
                                len(PROMPTS))

    def test_lazy_allocation_pair_and_mismatch(self):
        lazy_decode = Server("--model", BUNDLED, "--disaggregation-mode", "decode", "--disaggregation-lazy-allocation",
                             "--disaggregation-waiting-timeout-ms", "5000")
        lazy_prefill = Server("--model", BUNDLED, "--disaggregation-mode", "prefill",
                              "--disaggregation-lazy-allocation")
        try:
            want = generate(self.plain, PROMPTS[3], 5)[2]["output_ids"]
            for prefill, ok in ((lazy_prefill, True), (self.prefill, False)):
                room = 8000 + ok
                out = {}
                t = threading.Thread(target=lambda: out.update(r=generate(lazy_decode, PROMPTS[3], 5,
                                                                          bootstrap_room=room)))
                t.start()
                lazy_decode.wait_metric("penstock_kv_pages_used", lambda v: v == 0)  # claimed, no pages yet
                status, _, body = generate(prefill, PROMPTS[3], 5, bootstrap_room=room, bootstrap_host="127.0.0.1",
                                           bootstrap_port=lazy_decode.port)
                self.assertEqual(status, 200, body)
                t.join()
                status, _, body = out["r"]
                if ok:
                    self.assertEqual(status, 200, body)
                    self.assertEqual(body["output_ids"], want)
                else:
                    # An eager prefill server against a lazy decode server: refused naming the setting (T12).
                    self.assertNotEqual(status, 200, body)
                    self.assertIn("--disaggregation-lazy-allocation is on at the decode server and off at the "
                                  "prefill server", json.dumps(body))
            lazy_decode.wait_metric("penstock_kv_pages_used", lambda v: v == 0)
            self.prefill.wait_metric("penstock_kv_pages_used", lambda v: v == 0)
        finally:
            lazy_decode.stop()
            lazy_prefill.stop()

    def test_dead_decode_server_frees_the_prefill_pages(self):
        # RELIABILITY T10: the decode server dies after claiming the room; the prefill server's transfer fails at its
        # bootstrap deadline and its held pages are freed (its own client already has the first token).
        decode = Server("--model", BUNDLED, "--disaggregation-mode", "decode")
        prefill = Server("--model", BUNDLED, "--disaggregation-mode", "prefill",
                         "--disaggregation-bootstrap-timeout-ms", "500")
        try:
            t = threading.Thread(target=lambda: generate(decode, PROMPTS[2], 4, bootstrap_room=4242))
            t.start()
            decode.wait_metric("penstock_kv_pages_used", lambda v: v > 0)
            decode.proc.send_signal(signal.SIGKILL)
            decode.proc.wait(timeout=30)
            t.join()
            status, _, body = generate(prefill, PROMPTS[2], 4, bootstrap_room=4242, bootstrap_host="127.0.0.1",
                                       bootstrap_port=decode.port)
            self.assertEqual(status, 200, body)
            prefill.wait_metric('penstock_kv_transfers_total{outcome="send_failed"}', lambda v: v == 1)
            prefill.wait_metric("penstock_kv_pages_used", lambda v: v == 0)
        finally:
            prefill.stop()
            if decode.proc.poll() is None:
                decode.stop()

    def test_kimi_k3_kda_state_goes_with_the_pages(self):
        # A K3-shaped model (KDA + MLA layers, AttnRes): the KDA state of each room travels with its MLA pages.
        k3 = ("--model", K3, "--skip-tokenizer-init")
        plain, decode = Server(*k3), Server(*k3, "--disaggregation-mode", "decode")
        prefill = Server(*k3, "--disaggregation-mode", "prefill")
        try:
            for n in (9, 100):
                ids = [(3 + 7 * i) % 250 for i in range(n)]
                want = generate(plain, ids, 5)[2]["output_ids"]
                out = {}
                t = threading.Thread(target=lambda: out.update(r=generate(decode, ids, 5, bootstrap_room=600 + n)))
                t.start()
                status, _, body = generate(prefill, ids, 5, bootstrap_room=600 + n, bootstrap_host="127.0.0.1",
                                           bootstrap_port=decode.port)
                t.join()
                self.assertEqual(status, 200, body)
                self.assertEqual(out["r"][0], 200, out["r"])
                self.assertEqual(out["r"][2]["output_ids"], want, f"prompt of {n} tokens")
            for server in (decode, prefill):
                self.assertEqual(server.wait_metric("penstock_kv_pages_used", lambda v: v == 0), 0)
        finally:
            for server in (plain, decode, prefill):
                server.stop()

    def test_router_skips_a_dead_decode_server(self):
        spare = Server("--model", BUNDLED, "--disaggregation-mode", "decode")
        router = Router(self.prefill, self.decode, extra_decode=spare)
        try:
            spare.proc.send_signal(signal.SIGKILL)
            spare.proc.wait(timeout=30)
            for _ in range(100):  # the checker's next round (each second) marks it down
                status, body = router.request("GET", "/health")
                if b"down:" in body:
                    break
                time.sleep(0.05)
            self.assertEqual(status, 200, body)
            self.assertIn(f"127.0.0.1:{spare.port}".encode(), body)
            want = generate(self.plain, PROMPTS[1], 3)[2]["output_ids"]
            for _ in range(4):  # round robin would have sent every second one to the dead server
                body = {"input_ids": PROMPTS[1],
                        "sampling_params": {"max_new_tokens": 3, "temperature": 0, "ignore_eos": True}}
                status, data = router.request("POST", "/generate", body)
                self.assertEqual(status, 200, data)
                self.assertEqual(json.loads(data)["output_ids"], want)
        finally:
            self.assertEqual(router.stop(), 0)

    def test_failures_are_clean(self):
        # No prefill request for the room: nobody fetches its destination, so the decode request fails at the
        # bootstrap deadline; its pages are freed after the transfer deadline's quarantine.
        short = Server("--model", BUNDLED, "--disaggregation-mode", "decode", "--disaggregation-bootstrap-timeout-ms",
                       "1000", "--disaggregation-transfer-timeout-ms", "500")
        try:
            status, _, body = generate(short, PROMPTS[1], 4, bootstrap_room=99)
            self.assertNotEqual(status, 200, body)
            self.assertIn("deadline passed in Bootstrapping", json.dumps(body))
            self.assertEqual(short.wait_metric("penstock_kv_pages_used", lambda v: v == 0), 0)
        finally:
            short.stop()
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
