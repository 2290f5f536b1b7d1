"""The Deep-PP protocol on the CPU, end to end through its driver: `tools/deep_pp_8gpu.sh --cpu-tiny` runs
bench/sweeps/deep_pp_cpu_tiny_{glm,k3}.toml (TP8 / PP2xTP4 / PP4xTP2 / PP8, and K3 PP8 with eager bank forwarding,
all `mpirun -np 8` oversubscribed; tiny GLM-5.3- and Kimi-K3-shaped configs cut from 16 to 8 layers by --num-layers,
dummy weights) with one repeat of 8 requests per concurrency, and writes the folder docs/perf would get. Checked:
every layout completed N/N with no error at C = 8 and 16; /get_server_info confirms 8 layers and the eager-bank
setting; the pipeline columns are present and sane (one busy fraction per stage, each in [0, 1]; bubble = 1 - mean
busy; boundary stall >= 0 and 0 without PP); peak memory per rank for all 8 ranks and > 0; no GPU columns here;
plots; machine.txt with the commit; the README's tables. Stdlib only. Env: PENSTOCK_BINARY, PENSTOCK_SOURCE_DIR."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

BINARY = os.path.abspath(os.environ.get("PENSTOCK_BINARY", "build/penstock"))
SOURCE = os.environ.get("PENSTOCK_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DRIVER = os.path.join(SOURCE, "tools", "deep_pp_8gpu.sh")
NUM_PROMPTS = 8
LAYOUTS = {
    "glm": {"tp8_ep8": (1, 8, 8), "pp2_tp4_ep4": (2, 4, 4), "pp4_tp2_ep2": (4, 2, 2), "pp8": (8, 1, 1)},
    "k3": {"tp8_ep8": (1, 8, 8), "pp2_tp4_ep4": (2, 4, 4), "pp4_tp2_ep2": (4, 2, 2), "pp8": (8, 1, 1),
           "pp8_eager_bank": (8, 1, 1)},
}
EPS = 0.02  # busy fractions are ratios of two host clocks' differences; allow rounding at the top end


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def floats(cell):
    return [float(x) for x in cell.split(";")] if cell else []


def leftover(marker):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            found.append(f"{pid}: {cmd}")
    return found


class DeepPpCpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="penstock-deep-pp-")
        cls.out = os.path.join(cls.tmp.name, "deep-pp-cpu-tiny")
        t0 = time.time()
        cls.proc = subprocess.run(
            ["bash", DRIVER, "--cpu-tiny", "--penstock", BINARY, "--out", cls.out, "--repeats", "1",
             "--num-prompts", str(NUM_PROMPTS)],
            capture_output=True, text=True, timeout=900)
        cls.secs = time.time() - t0
        print(f"\n[figures] deep_pp_cpu_tiny: {cls.secs:.1f} s, exit {cls.proc.returncode}", file=sys.stderr)
        print(cls.proc.stdout[-6000:] + cls.proc.stderr[-3000:], file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_driver_exit_and_folder(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stdout[-3000:] + self.proc.stderr[-3000:])
        machine = open(os.path.join(self.out, "machine.txt")).read()
        self.assertRegex(machine, r"commit: [0-9a-f]{40}")
        self.assertIn("gpus: none", machine)
        readme = open(os.path.join(self.out, "README.md")).read()
        for needle in ("GLM-5.3 shape", "Kimi K3 shape", "| pp8 | 1,1,1,1,1,1,1,1 | 16 | 1/1 |",
                       "Eager bank forwarding at `pp8`", "busy fraction per stage", "plots/input_tps.png"):
            self.assertIn(needle, readme)
        self.assertEqual(leftover(self.out), [], "processes left behind")

    def test_gpu_study_refuses_a_machine_or_server_that_cannot_run_it(self):
        # A fake nvidia-smi listing `n` GPUs: too few -> exit 3 naming the count. Enough, but a `penstock` whose serve
        # lacks --device-links (a build from before multi-rank GPU serving) -> exit 3 naming the option. Nothing is
        # started either way; --dry-run prints all commands.
        with tempfile.TemporaryDirectory(prefix="penstock-fake-smi-") as d:
            smi = os.path.join(d, "nvidia-smi")
            with open(smi, "w") as f:
                f.write("#!/bin/sh\nfor i in $(seq 0 $((N - 1))); do echo \"GPU $i: NVIDIA H200 (UUID: GPU-$i)\"; done\n")
            os.chmod(smi, 0o755)
            old = os.path.join(d, "penstock-old")
            with open(old, "w") as f:  # serve --help of a one-process-only GPU build
                f.write("#!/bin/sh\necho '--backend --dtype --num-layers --load-format'\n")
            os.chmod(old, 0o755)
            env = dict(os.environ, PATH=d + os.pathsep + os.environ["PATH"])
            for n, gpus, binary, needle in (("4", "8", BINARY, "8 GPUs needed, nvidia-smi lists 4"),
                                            ("8", "8", old, "has no --device-links option"),
                                            ("2", "2", old, "has no --device-links option")):
                r = subprocess.run(["bash", DRIVER, "--gpus", gpus, "--penstock", binary, "--out",
                                    os.path.join(d, "out")], capture_output=True, text=True, timeout=60,
                                   env=dict(env, N=n))
                self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
                self.assertIn(needle, r.stderr)
                self.assertFalse(os.path.exists(os.path.join(d, "out")))
        for gpus, n_layouts in (("8", 9), ("2", 5)):
            r = subprocess.run(["bash", DRIVER, "--gpus", gpus, "--penstock", BINARY, "--dry-run"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(r.stdout.count("# layout "), n_layouts)
            self.assertEqual(r.stdout.count(f"mpirun -np {gpus} "), n_layouts)
            self.assertEqual(r.stdout.count(" bench --base-url"), n_layouts * 2 * 3)  # C 8/16 x 3 repeats
            self.assertIn("--backend cuda --dtype bfloat16", r.stdout)

    def check_model(self, key):
        d = os.path.join(self.out, key)
        rows = read_csv(os.path.join(d, "results.csv"))
        layouts = LAYOUTS[key]
        self.assertEqual(sorted({r["layout"] for r in rows}), sorted(layouts))
        self.assertEqual(len(rows), len(layouts) * 2)  # C 8 and 16, one repeat
        for r in rows:
            where = f"{key} {r['layout']} C={r['concurrency']}"
            self.assertEqual(r["status"], "ok", f"{where}: {r['error']}")
            self.assertEqual((int(r["num_prompts"]), int(r["completed"]), int(r["failed"])),
                             (NUM_PROMPTS, NUM_PROMPTS, 0), where)
            pp, tp, ep = layouts[r["layout"]]
            self.assertEqual((int(r["pp"]), int(r["tp"]), int(r["ep"])), (pp, tp, ep), where)
            self.assertGreater(float(r["input_tok_s"]), 0, where)
            # Pipeline columns: one busy fraction per stage, each a fraction; bubble = 1 - mean busy.
            busy = floats(r["stage_busy_frac"])
            self.assertEqual(int(r["stages"]), pp, where)
            self.assertEqual(len(busy), pp, where)
            for b in busy:
                self.assertGreaterEqual(b, 0.0, where)
                self.assertLessEqual(b, 1.0 + EPS, where)
            self.assertGreater(max(busy), 0.0, where)
            self.assertAlmostEqual(float(r["busy_frac_mean"]), sum(busy) / pp, delta=1e-4)
            self.assertAlmostEqual(float(r["bubble_frac_mean"]), 1 - float(r["busy_frac_mean"]), delta=1e-4)
            self.assertGreater(float(r["active_s"]), 0, where)
            stall = floats(r["stage_stall_s"])
            self.assertEqual(len(stall), pp, where)
            self.assertTrue(all(s >= 0 for s in stall), where)
            self.assertAlmostEqual(float(r["boundary_stall_s"]), sum(stall[1:]), delta=1e-3)
            if pp == 1:
                self.assertEqual(float(r["boundary_stall_s"]), 0.0, where)
            self.assertGreaterEqual(float(r["boundary_stall_frac"]), 0.0, where)
            self.assertLessEqual(float(r["boundary_stall_frac"]), 1.0 + EPS, where)
            # Peak memory per rank: all 8 ranks, each above zero; no GPU on this machine.
            rss = floats(r["peak_rss_mib_ranks"])
            self.assertEqual(len(rss), 8, where)
            self.assertTrue(all(x > 0 for x in rss), where)
            self.assertAlmostEqual(float(r["peak_rss_mib_max"]), max(rss), delta=0.01)
            self.assertEqual((r["gpu_mem_mib_ranks"], r["gpu_mem_mib_max"]), ("", ""), where)
            run = os.path.join(d, r["dir"])
            ranks = json.load(open(os.path.join(run, "memory_ranks.json")))
            self.assertEqual([x["rank"] for x in ranks["ranks"]], list(range(8)), where)
            self.assertEqual(ranks["vm_hwm_since"], "start of the run", where)
            for f in ("metrics_before.prom", "metrics_after.prom", "raw.jsonl", "summary.json"):
                self.assertTrue(os.path.isfile(os.path.join(run, f)), f"{run}/{f}")
        for layout in layouts:
            info = json.load(open(os.path.join(d, layout, "server_info.json")))
            self.assertEqual((info["num_hidden_layers"], info["num_layers_override"]), (8, 8), layout)
            self.assertEqual(info["load_format"], "dummy")
            self.assertEqual(info["pp_eager_bank_forward"], layout.endswith("_eager_bank"), layout)
            self.assertEqual(sum(info["pp_layer_partition"]), 8, layout)
        summary = read_csv(os.path.join(d, "summary.csv"))
        self.assertEqual(len(summary), len(layouts) * 2)
        for s in summary:
            self.assertEqual((s["runs"], s["ok_runs"]), ("1", "1"), s["layout"])
            self.assertNotEqual(s["busy_frac_mean"], "")
            self.assertNotEqual(s["peak_rss_mib_max"], "")
        for png in ("input_tps.png", "ttft.png", "pipeline.png"):
            with open(os.path.join(d, "plots", png), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", png)

    def test_glm_shape(self):
        self.check_model("glm")

    def test_k3_shape_with_eager_bank_pair(self):
        self.check_model("k3")
        rows = {(r["layout"], r["concurrency"]): r for r in read_csv(os.path.join(self.out, "k3", "results.csv"))}
        for c in ("8", "16"):
            off, on = rows[("pp8", c)], rows[("pp8_eager_bank", c)]
            print(f"[figures] k3 pp8 C={c}: eager bank off {float(off['input_tok_s']):.0f} tok/s, boundary stall "
                  f"{float(off['boundary_stall_s']):.3f} s; on {float(on['input_tok_s']):.0f} tok/s, "
                  f"{float(on['boundary_stall_s']):.3f} s", file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
