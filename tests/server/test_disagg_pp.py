"""A pipelined prefill server under disaggregation (SPEC §5 with deep PP; docs/design/disagg.md "Pipeline stages").

`mpirun -np P penstock serve --pp P --disaggregation-mode prefill` in front of a one-process decode server: every
pipeline stage sends its own layers' KV pages (and KDA state) straight to the decode server's pages, reports to stage
0, and stage 0 sends the aux record with the first token once all have. The decode server's greedy output_ids equal a
plain server's for several prompt lengths sent concurrently (a short prompt with a long decode too: only the prompt's
pages travel), for a DeepSeek-V3 model on 2 stages, a Kimi K3-shaped one (KDA + MLA, AttnRes) on 3 stages and a GLM
DSA one (index keys per full layer) on 2. A room whose decode end never answers fails at the prefill end's bootstrap
deadline, and every stage frees its pages. Each end ends with no KV page in use (every stage's exit line says so),
and the other stages' exit lines count their KV sends. With TP / CP lanes inside the stages (`--pp 2 --tp 2`,
`--pp 2 --cp 2`), lane 0 of each stage sends that stage's layers and every rank ends with no page in use; a room
aborted mid-prefill frees its pages on every rank too. KDA states split over tp ranks are refused, at pp 1 and 2.

Run: PENSTOCK_BINARY=build/penstock PENSTOCK_MPIEXEC=tests/common/mpiexec_checked.sh \
     PENSTOCK_MPIEXEC_REAL=/usr/bin/mpiexec python3 tests/server/test_disagg_pp.py (ctest does this)."""
import os
import re
import signal
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from serverlib import Server  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BUNDLED = os.path.join(ROOT, "assets", "tiny-deepseek-v3")
K3 = os.path.join(ROOT, "tests", "data", "variants_k3", "k3_tiny_block2")
GLM = os.path.join(ROOT, "tests", "data", "variants_dsa", "glm_pattern_topk24")
MPIEXEC = os.environ.get("PENSTOCK_MPIEXEC", os.path.join(ROOT, "tests", "common", "mpiexec_checked.sh"))
os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_mpi_yield_when_idle="1",
                  OMPI_MCA_btl_vader_single_copy_mechanism="none")


def mpirun(np):
    return [MPIEXEC, "--oversubscribe", "-np", str(np)]


def start(*flags, **kw):
    """A Server, or the test skipped when the build has no transfer engine (no libucx-dev)."""
    try:
        return Server(*flags, **kw)
    except RuntimeError as e:
        if "no UCX" in str(e):
            raise unittest.SkipTest("this build has no transfer engine (libucx-dev): " + str(e))
        raise


def stop_pipeline(test, srv):
    """SIGTERM to rank 0 (it drains and stops every stage); the launcher must exit 0. Returns all it printed."""
    if srv.proc.poll() is None:
        os.kill(srv.pid, signal.SIGTERM)
    rc = srv.proc.wait(timeout=120)
    output = "".join(srv.head) + srv.proc.stdout.read() + srv.proc.stderr.read()
    test.assertEqual(rc, 0, output[-6000:])
    return output


def generate(server, ids, max_new, **extra):
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True}}
    body.update(extra)
    return server.post("/generate", body, timeout=180)


def prompt(n, salt=0, vocab=250):
    return [(3 + 7 * i + salt) % vocab for i in range(n)]


class PipelinedPrefill(unittest.TestCase):
    def run_pair(self, model, pp, cases, extra=(), room0=0, lanes=()):
        """Plain, decode and a `--pp pp` prefill server of `model` (with `lanes`, e.g. ("--tp", 2): that many ranks
        per stage); each (prompt, max_new) of `cases` is sent to the prefill and the decode servers concurrently with
        its own room. Returns the prefill launcher's exit output."""
        flags = ("--model", model, "--skip-tokenizer-init", *extra)
        plain = Server(*flags)
        try:
            decode = start(*flags, "--disaggregation-mode", "decode", "--disaggregation-waiting-timeout-ms", "120000")
        except BaseException:
            plain.stop()
            raise
        prefill = None
        try:
            ranks = pp * (int(lanes[1]) if lanes else 1)
            prefill = start(*flags, "--disaggregation-mode", "prefill", "--chunked-prefill-size", "64", "--pp",
                             str(pp), *map(str, lanes), threads=1, launcher=mpirun(ranks))
            want = [generate(plain, ids, n)[2]["output_ids"] for ids, n in cases]
            results = {}

            def one(i):
                ids, n = cases[i]
                room = room0 + i
                dec = {}
                t = threading.Thread(target=lambda: dec.update(r=generate(decode, ids, n, bootstrap_room=room)))
                t.start()
                results[i] = (generate(prefill, ids, n, bootstrap_room=room, bootstrap_host="127.0.0.1",
                                       bootstrap_port=decode.port), dec)
                t.join()

            threads = [threading.Thread(target=one, args=(i,)) for i in range(len(cases))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for i, (ids, n) in enumerate(cases):
                (status, _, body), dec = results[i]
                self.assertEqual(status, 200, body)
                self.assertEqual(body["output_ids"], want[i][:1], "the prefill server answers with the first token")
                self.assertEqual(dec["r"][0], 200, dec["r"])
                self.assertEqual(dec["r"][2]["output_ids"], want[i], f"prompt of {len(ids)} tokens, {n} new")
            for server in (decode, prefill):
                self.assertEqual(server.wait_metric("penstock_kv_pages_used", lambda v: v == 0), 0)
            self.assertEqual(prefill.metrics().get('penstock_kv_transfers_total{outcome="sent"}'), len(cases))
            self.assertEqual(decode.metrics().get('penstock_kv_transfers_total{outcome="received"}'), len(cases))
        finally:
            for server in (plain, decode):
                server.stop()
            output = stop_pipeline(self, prefill) if prefill is not None else ""
        # Stages > 0 count their KV sends; with lanes, lane 0 (cp 0, tp 0) of each stage sends for it.
        stops = re.findall(r"stage (\d+)( lane cp \d+ tp \d+)? stopped[^\n]*KV pages in use: (\d+) of \d+; "
                           r"KV sends (\d+) done, (\d+) failed", output)
        self.assertEqual(sorted(int(s) for s, *_ in stops), list(range(1, pp)), output[-4000:])
        self.assertEqual({lane for _, lane, *_ in stops} - {""}, {" lane cp 0 tp 0"} if lanes and pp > 1 else set())
        stops = [(stage, used, done, failed) for stage, _, used, done, failed in stops]
        for stage, used, done, failed in stops:
            self.assertEqual(used, "0", f"stage {stage} ended with pages in use")
            self.assertEqual((int(done), int(failed)), (len(cases), 0), f"stage {stage}'s KV sends")
        # Every rank ends with no page in use (stage 0, each other stage, each following lane).
        used = re.findall(r"KV pages in use: (\d+)", output)
        self.assertEqual(len(used), ranks, output[-4000:])
        self.assertEqual(set(used), {"0"}, output[-4000:])
        if lanes:
            for stage in range(pp):
                lane_stops = re.findall(rf"stage {stage} lane cp \d+ tp \d+ stopped", output)
                self.assertEqual(len(lane_stops), int(lanes[1]) - (1 if stage == 0 else 0), output[-4000:])
        return output

    def test_deepseek_v3_two_stages(self):
        # 9 tokens with 80 new: the decode end reserves 2 pages and the prefill end 1; only the prompt's page travels.
        self.run_pair(BUNDLED, 2, [(prompt(9), 12), (prompt(64, 1), 12), (prompt(70, 2), 6), (prompt(130, 3), 12),
                                   (prompt(9, 4), 80)], room0=100)

    def test_kimi_k3_three_stages_carry_the_kda_state(self):
        self.run_pair(K3, 3, [(prompt(9), 6), (prompt(100, 1), 6), (prompt(150, 2), 6)], room0=200)

    def test_glm_dsa_two_stages_carry_the_index_keys(self):
        self.run_pair(GLM, 2, [(prompt(40, 0, 128), 6), (prompt(140, 1, 128), 6)], room0=300)

    def test_deepseek_v3_tensor_parallel_rank_0_sends_the_whole_latent(self):
        # TP replicates MLA's latent cache: rank 0 sends it all; rank 1 frees its pages as rank 0 releases.
        self.run_pair(BUNDLED, 1, [(prompt(9), 12), (prompt(70, 1), 6), (prompt(130, 2), 12), (prompt(9, 3), 80)],
                      room0=400, lanes=("--tp", 2))

    def test_kimi_k3_two_stages_on_context_parallel_lanes_carry_the_kda_state(self):
        # cp runs the KDA recurrences on the whole chunk on every rank: lane 0's stages hold each state whole.
        self.run_pair(K3, 2, [(prompt(9), 6), (prompt(100, 1), 6), (prompt(150, 2), 6)], room0=1000,
                      lanes=("--cp", 2))

    def test_kimi_k3_context_parallel_sends_the_kda_state(self):
        # CP keeps every cache whole on every rank (KDA states too): rank 0 sends them.
        self.run_pair(K3, 1, [(prompt(9), 6), (prompt(100, 1), 6), (prompt(150, 2), 6)], room0=500, lanes=("--cp", 2))

    def test_glm_dsa_context_parallel_carries_the_index_keys(self):
        self.run_pair(GLM, 1, [(prompt(40, 0, 128), 6), (prompt(140, 1, 128), 6)], room0=600, lanes=("--cp", 2))

    def test_deepseek_v3_two_stages_on_tensor_parallel_lanes(self):
        # --pp 2 --tp 2: lane 0 of each stage sends its layers' (replicated) latent; the other lanes only free.
        self.run_pair(BUNDLED, 2, [(prompt(9), 12), (prompt(70, 1), 6), (prompt(130, 2), 12), (prompt(9, 3), 40)],
                      room0=700, lanes=("--tp", 2))

    def test_glm_dsa_two_stages_on_context_parallel_lanes(self):
        # --pp 2 --cp 2: cp all-gathers each chunk's latent and index-K rows, so lane 0's stages hold them whole.
        self.run_pair(GLM, 2, [(prompt(40, 0, 128), 6), (prompt(140, 1, 128), 6), (prompt(70, 2, 128), 6)],
                      room0=800, lanes=("--cp", 2))

    def no_decode_end(self, lanes=()):
        flags = ("--model", BUNDLED, "--skip-tokenizer-init")
        ranks = 2 * (int(lanes[1]) if lanes else 1)
        decode = start(*flags, "--disaggregation-mode", "decode")
        prefill = start(*flags, "--disaggregation-mode", "prefill", "--pp", "2", *map(str, lanes),
                         "--disaggregation-bootstrap-timeout-ms", "1500", "--chunked-prefill-size", "64",
                         "--test-step-delay-ms", "100", threads=1, launcher=mpirun(ranks))
        try:
            # The decode server never heard of room 9: the bootstrap fails at its deadline, no stage sends anything.
            status, _, body = generate(prefill, prompt(100), 4, bootstrap_room=9, bootstrap_host="127.0.0.1",
                                       bootstrap_port=decode.port)
            self.assertEqual(status, 200, body)
            self.assertEqual(len(body["output_ids"]), 1)
            prefill.wait_metric('penstock_kv_transfers_total{outcome="send_failed"}', lambda v: v == 1, timeout=30)
            self.assertEqual(prefill.wait_metric("penstock_kv_pages_used", lambda v: v == 0), 0)
            # A room aborted mid-prefill (5 chunks, 100 ms a step): it ends without a first token, nothing is sent,
            # and every rank frees its pages (checked on the exit lines below).
            cut = {}
            t = threading.Thread(target=lambda: cut.update(r=generate(
                prefill, prompt(300, 5), 4, rid="cut", bootstrap_room=10, bootstrap_host="127.0.0.1",
                bootstrap_port=decode.port)))
            t.start()
            for _ in range(100):
                if prefill.post("/abort_request", {"rid": "cut"})[2].get("success"):
                    break
                time.sleep(0.05)
            t.join()
            self.assertEqual(cut["r"][2]["meta_info"]["finish_reason"]["type"], "abort", cut["r"])
            self.assertEqual(prefill.wait_metric("penstock_kv_pages_used", lambda v: v == 0), 0)
        finally:
            decode.stop()
            output = stop_pipeline(self, prefill)
        lane = " lane cp 0 tp 0" if lanes else ""
        self.assertRegex(output, rf"stage 1{lane} stopped[^\n]*KV pages in use: 0 of \d+; KV sends 0 done, 0 failed")
        used = re.findall(r"KV pages in use: (\d+)", output)
        self.assertEqual(used, ["0"] * ranks, output[-4000:])

    def test_a_room_with_no_decode_end_frees_every_stage(self):
        self.no_decode_end()

    def test_a_room_with_no_decode_end_frees_every_lane_of_every_stage(self):
        self.no_decode_end(lanes=("--tp", 2))

    def test_kda_states_split_over_tp_ranks_are_refused(self):
        # With or without pipeline stages: each tp rank holds its heads' share of every state slot (not sent yet).
        for pp in (1, 2):
            with self.subTest(pp=pp), self.assertRaises(RuntimeError) as e:
                Server("--model", K3, "--skip-tokenizer-init", "--disaggregation-mode", "prefill", "--pp", str(pp),
                       "--tp", "2", threads=1, launcher=mpirun(2 * pp))
            self.assertIn("KDA states are split by head over the tp ranks", str(e.exception))

    def test_a_pipelined_decode_end_is_refused(self):
        with self.assertRaises(RuntimeError) as e:
            Server("--model", BUNDLED, "--skip-tokenizer-init", "--disaggregation-mode", "decode", "--pp", "2",
                   threads=1, launcher=mpirun(2))
        self.assertIn("decode runs as one rank", str(e.exception))

    def test_a_bad_transfer_queue_count_is_refused_by_every_rank(self):
        # Refused with the arguments, before any rank waits on another (the engine alone used to refuse it, on rank 0
        # after the others had entered their loops).
        with self.assertRaises(RuntimeError) as e:
            Server("--model", BUNDLED, "--skip-tokenizer-init", "--disaggregation-mode", "prefill", "--pp", "2",
                   "--tp", "2", "--disaggregation-transfer-queues", "0", threads=1, launcher=mpirun(4))
        self.assertIn("--disaggregation-transfer-queues must be in [1, 64]", str(e.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
