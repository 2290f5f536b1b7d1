"""`penstock sweep` end to end on the bundled tiny model: the committed CI matrix (bench/sweeps/ci_tiny.toml) produces
one results.csv row per run, summary.csv medians and valid PNG plots; a server that never becomes healthy (bad model,
start timeout) is recorded as failed with nothing left running; SIGTERM of the sweep stops the servers; a bad matrix
file exits 2 naming the key. Stdlib only. Env: PENSTOCK_BINARY, PENSTOCK_SOURCE_DIR."""
import csv
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import zlib

BINARY = os.environ.get("PENSTOCK_BINARY", "build/penstock")
SOURCE = os.environ.get("PENSTOCK_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODEL = os.path.join(SOURCE, "assets", "tiny-deepseek-v3")
CI_MATRIX = os.path.join(SOURCE, "bench", "sweeps", "ci_tiny.toml")
MPI_ENV = ('env = { OMPI_ALLOW_RUN_AS_ROOT = "1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = "1", '
           'OMPI_MCA_mpi_yield_when_idle = "1", OMPI_MCA_btl_vader_single_copy_mechanism = "none" }')


def check_png(path):
    """A PNG signature, then well-formed chunks with valid CRCs from IHDR to IEND; returns (width, height)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, kinds, size = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, f"{path}: bad CRC in {kind}"
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        kinds.append(kind)
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds, f"{path}: chunks {kinds}"
    return size


def leftover(marker):
    """Processes (other than this one) whose command line contains `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmd and state != "Z":
            found.append(f"{pid}: {cmd}")
    return found


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def sweep(*args, timeout=180):
    t0 = time.time()
    r = subprocess.run([BINARY, "sweep", *args], capture_output=True, text=True, timeout=timeout)
    return r, time.time() - t0


def mark_interrupted(out, layout):
    """Rewrites the first results.csv row of `layout` from ok to interrupted (a run cut short)."""
    path = os.path.join(out, "results.csv")
    with open(path) as f:
        text = f.read().splitlines(keepends=True)
    i = next(n for n, line in enumerate(text) if line.startswith(layout + ","))
    text[i] = text[i].replace(",ok,", ",interrupted,", 1)
    with open(path, "w") as f:
        f.write("".join(text))


class SweepE2E(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="penstock-sweep-")
        self.dir = self.tmp.name

    def tearDown(self):
        self.assertEqual(leftover(self.dir), [], "processes left behind")
        self.tmp.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_ci_matrix(self):
        out = os.path.join(self.dir, "out")
        r, secs = sweep(CI_MATRIX, "--output-dir", out, "--model", MODEL)
        print(f"\nci matrix: {secs:.1f} s, exit {r.returncode}\n{r.stdout}{r.stderr}", file=sys.stderr)
        rows = read_csv(os.path.join(out, "results.csv"))
        layouts = sorted({x["layout"] for x in rows})
        self.assertEqual(len(rows), len(layouts) * 2 * 2)  # layouts x C {2, 4} x 2 repeats, failed ones included
        self.assertIn("pp1_tp1_ep1_cp1", layouts)
        self.assertEqual(layouts, ["pp1_tp1_ep1_cp1", "pp1_tp2_ep2_cp1", "pp2_tp1_ep1_cp1", "pp4_tp1_ep1_cp1"])
        pending = set()  # every layout must serve: PP, TP/EP lanes under mpirun
        for x in rows:
            if x["layout"] in pending:
                self.assertEqual(x["status"], "server_start_failed", x)
                continue
            self.assertEqual(x["status"], "ok", x)
            n = int(x["num_prompts"])
            self.assertEqual(n, 2 * int(x["concurrency"]))
            self.assertEqual((int(x["completed"]), int(x["failed"])), (n, 0))
            self.assertGreater(float(x["input_tok_s"]), 0)
            self.assertLessEqual(float(x["ttft_p50_ms"]), float(x["ttft_p95_ms"]))
            run = os.path.join(out, x["dir"])
            for f in ("command.txt", "raw.jsonl", "summary.json", "memory.json", "bench.log"):
                self.assertTrue(os.path.isfile(os.path.join(run, f)), f"{run}/{f}")
            self.assertEqual(sum(1 for _ in open(os.path.join(run, "raw.jsonl"))), n)
            self.assertIn(" serve ", open(os.path.join(run, "command.txt")).read())
        self.assertEqual(r.returncode, 1 if pending else 0, r.stdout + r.stderr)
        summary = read_csv(os.path.join(out, "summary.csv"))
        self.assertEqual(len(summary), len(layouts) * 2)
        for s in summary:
            if s["layout"] in pending:
                continue
            self.assertEqual((s["runs"], s["ok_runs"]), ("2", "2"), s)
            self.assertGreater(float(s["input_tok_s"]), 0)
        for layout in sorted(set(layouts) - pending):
            ldir = os.path.join(out, layout)
            for f in ("server_command.txt", "server.stdout.log", "server.stderr.log", "server_info.json",
                      "memory_start.json", "memory_healthy.json", "memory_cleaned.json", "layout.json"):
                self.assertTrue(os.path.isfile(os.path.join(ldir, f)), f"{ldir}/{f}")
        for png in ("input_tps.png", "ttft.png"):
            w, h = check_png(os.path.join(out, "plots", png))
            self.assertGreaterEqual(w, 640)
            self.assertGreaterEqual(h, 400)
        # A sweep cut short keeps results.csv: --report-only makes the same summary, plots and exit code from it.
        with open(os.path.join(out, "summary.csv")) as f:
            before = f.read()
        for f in ("summary.csv", "sweep.json", "plots/input_tps.png"):
            os.remove(os.path.join(out, f))
        rr, _ = sweep(CI_MATRIX, "--output-dir", out, "--model", MODEL, "--report-only")
        self.assertEqual(rr.returncode, r.returncode, rr.stdout + rr.stderr)
        with open(os.path.join(out, "summary.csv")) as f:
            after = f.read()
        # The same cells; numbers to the 6 significant digits results.csv keeps (the medians are of those).
        b_rows, a_rows = list(csv.reader(before.splitlines())), list(csv.reader(after.splitlines()))
        self.assertEqual(len(a_rows), len(b_rows))
        for b_row, a_row in zip(b_rows, a_rows):
            self.assertEqual(len(a_row), len(b_row))
            for b_cell, a_cell in zip(b_row, a_row):
                b_parts, a_parts = b_cell.split(";"), a_cell.split(";")
                self.assertEqual(len(a_parts), len(b_parts), (b_cell, a_cell))
                for x, y in zip(b_parts, a_parts):
                    try:
                        fx, fy = float(x), float(y)
                    except ValueError:
                        self.assertEqual(y, x)
                        continue
                    self.assertLessEqual(abs(fx - fy), 1e-5 * max(abs(fx), abs(fy)) + 1e-12, (b_cell, a_cell))
        check_png(os.path.join(out, "plots", "input_tps.png"))
        with open(os.path.join(out, "sweep.json")) as f:
            manifest = json.load(f)
        self.assertEqual(manifest["runs"], len(rows))
        self.assertTrue(all(l["server_info"] for l in manifest["layouts"] if l["layout"] not in pending))
        empty = os.path.join(self.dir, "empty")
        os.makedirs(empty)
        rr, _ = sweep(CI_MATRIX, "--output-dir", empty, "--report-only")
        self.assertEqual(rr.returncode, 2)
        self.assertIn("holds no results.csv", rr.stderr)
        # --resume after a cut: the layout with a run that is not ok runs again, every other one is kept as it is.
        if not pending:
            cut = "pp2_tp1_ep1_cp1"
            mark_interrupted(out, cut)
            kept_dir = os.path.join(out, "pp1_tp1_ep1_cp1", "c2_r1", "summary.json")
            kept_mtime = os.path.getmtime(kept_dir)
            rr, _ = sweep(CI_MATRIX, "--output-dir", out, "--model", MODEL, "--resume")
            self.assertEqual(rr.returncode, 0, rr.stdout + rr.stderr)
            for layout in layouts:
                self.assertEqual(f"layout {layout}: kept" in rr.stdout, layout != cut, rr.stdout)
            again = read_csv(os.path.join(out, "results.csv"))
            self.assertEqual([(x["layout"], x["concurrency"], x["repeat"]) for x in again],
                             [(x["layout"], x["concurrency"], x["repeat"]) for x in rows])
            self.assertTrue(all(x["status"] == "ok" for x in again))
            self.assertEqual(os.path.getmtime(kept_dir), kept_mtime)  # a kept layout's runs were not run again
            rr, _ = sweep(CI_MATRIX, "--output-dir", out, "--resume", "--report-only")
            self.assertEqual(rr.returncode, 2)
            # A resume killed outright (a device call's time limit: SIGKILL, no clean-up) while it reruns the first
            # layout keeps every later layout's rows in results.csv.
            first = layouts[0]
            mark_interrupted(out, first)
            p = subprocess.Popen([BINARY, "sweep", CI_MATRIX, "--output-dir", out, "--model", MODEL, "--resume"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for line in p.stdout:
                if "layout verified" in line:
                    break
            p.send_signal(signal.SIGKILL)
            p.communicate(timeout=60)
            time.sleep(1)  # the servers follow their parent (PR_SET_PDEATHSIG)
            after_cut = read_csv(os.path.join(out, "results.csv"))
            for layout in layouts[1:]:
                mine = [x for x in after_cut if x["layout"] == layout]
                self.assertEqual(len(mine), 4, layout)
                self.assertTrue(all(x["status"] == "ok" for x in mine), layout)

    def test_server_that_never_becomes_healthy(self):
        # A bad model path: the server exits at start, on one rank and under mpirun.
        bad = os.path.join(self.dir, "no-such-model")
        cfg = self.write("bad.toml", f"""
output_dir = "{self.dir}/out"
model = "{bad}"
concurrencies = [2]
repeats = 2
[launcher]
args = ["--oversubscribe"]
{MPI_ENV}
[bench]
input_len = 16
num_prompts = 2
[timeouts]
server_start_s = 60
[[layouts]]
pp = 1
[[layouts]]
pp = 2
""")
        r, secs = sweep(cfg)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        rows = read_csv(os.path.join(self.dir, "out", "results.csv"))
        self.assertEqual(len(rows), 4)
        for x in rows:
            self.assertEqual(x["status"], "server_start_failed", x)
            self.assertIn("before /health answered", x["error"])
            self.assertEqual(x["completed"], "")
        self.assertIn("no-such-model", rows[0]["error"])  # penstock's own error line, not mpirun's banner
        self.assertEqual(leftover(bad), [])
        self.assertTrue(os.path.isfile(os.path.join(self.dir, "out", "summary.csv")))

    def test_start_timeout_kills_the_server(self):
        # The real model under a unique path; mpirun cannot be healthy within 50 ms, so the sweep must kill it.
        model = os.path.join(self.dir, "model-link")
        os.symlink(MODEL, model)
        cfg = self.write("slow.toml", f"""
output_dir = "{self.dir}/out"
model = "{model}"
concurrencies = [2]
[launcher]
always = true
args = ["--oversubscribe"]
{MPI_ENV}
[bench]
input_len = 16
num_prompts = 2
[timeouts]
server_start_s = 0.05
stop_grace_s = 5
[[layouts]]
pp = 1
""")
        r, secs = sweep(cfg)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        rows = read_csv(os.path.join(self.dir, "out", "results.csv"))
        self.assertEqual([x["status"] for x in rows], ["server_start_timeout"])
        self.assertIn("timeouts.server_start_s", rows[0]["error"])
        self.assertEqual(leftover(model), [])

    def test_sigterm_stops_servers(self):
        model = os.path.join(self.dir, "model-link")
        os.symlink(MODEL, model)
        cfg = self.write("long.toml", f"""
output_dir = "{self.dir}/out"
model = "{model}"
server_args = ["--threads", "1", "--skip-tokenizer-init"]
concurrencies = [1]
repeats = 3
[bench]
input_len = 256
output_len = 64
num_prompts = 1000
[[layouts]]
pp = 1
""")
        p = subprocess.Popen([BINARY, "sweep", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        for line in p.stdout:
            lines.append(line)
            if "layout verified" in line:
                break
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 128 + signal.SIGTERM, "".join(lines) + out + err)
        rows = read_csv(os.path.join(self.dir, "out", "results.csv"))
        self.assertEqual([x["status"] for x in rows], ["interrupted"] * 3)
        self.assertEqual(leftover(model), [])

    def test_gpu_memory_columns_from_nvidia_smi(self):
        # A fake nvidia-smi on PATH (this machine has no GPU): per-process used memory for the server's ranks when
        # BY_PID is set, else only per-device figures, which the sweep maps to ranks by local rank.
        model = os.path.join(self.dir, "model-link")
        os.symlink(MODEL, model)
        fake = os.path.join(self.dir, "bin")
        os.mkdir(fake)
        with open(os.path.join(fake, "nvidia-smi"), "w") as f:
            f.write(f"""#!/bin/sh
case "$*" in
  *query-compute-apps*) [ -n "$BY_PID" ] && for p in $(pgrep -f "serve --model {model}"); do echo "$p, 1234"; done ;;
  *query-gpu=index,memory.used,memory.total*) echo "index, memory.used [MiB], memory.total [MiB]" ;;
  *query-gpu=index,memory.used*) echo "0, 1000"; echo "1, 2000" ;;
esac
exit 0
""")
        os.chmod(os.path.join(fake, "nvidia-smi"), 0o755)
        for by_pid, want in (("1", ("1234;1234", "nvidia-smi per process")),
                             ("", ("1000;2000", "nvidia-smi per device (GPU = local rank)"))):
            out = os.path.join(self.dir, f"out{by_pid}")
            cfg = self.write(f"gpu{by_pid}.toml", f"""
output_dir = "{out}"
model = "{model}"
server_args = ["--threads", "1", "--skip-tokenizer-init"]
concurrencies = [2]
[launcher]
args = ["--oversubscribe", "--bind-to", "none"]
{MPI_ENV}
[bench]
input_len = 16
num_prompts = 2
[timeouts]
server_start_s = 60
[[layouts]]
pp = 2
""")
            env = dict(os.environ, PATH=fake + os.pathsep + os.environ["PATH"], BY_PID=by_pid)
            r = subprocess.run([BINARY, "sweep", cfg], capture_output=True, text=True, timeout=120, env=env)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            (row,) = read_csv(os.path.join(out, "results.csv"))
            self.assertEqual((row["status"], row["gpu_mem_mib_ranks"]), ("ok", want[0]), row)
            self.assertEqual(float(row["gpu_mem_mib_max"]), max(float(x) for x in want[0].split(";")))
            self.assertEqual(len(row["peak_rss_mib_ranks"].split(";")), 2)
            with open(os.path.join(out, row["dir"], "memory_ranks.json")) as f:
                ranks = json.load(f)
            self.assertEqual(ranks["gpu_source"], want[1])
            self.assertEqual([x["rank"] for x in ranks["ranks"]], [0, 1])
        self.assertEqual(leftover(model), [])

    def test_bad_matrix_file(self):
        cfg = self.write("typo.toml", 'output_dir = "o"\nmodel = "m"\nconcurency = [2]\n')
        r, _ = sweep(cfg)
        self.assertEqual(r.returncode, 2)
        self.assertIn("typo.toml", r.stderr)
        self.assertIn("concurrencies: is required (found 'concurency': a typo?)", r.stderr)
        r, _ = sweep(CI_MATRIX, "--dry-run", "--output-dir", os.path.join(self.dir, "dry"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("serve --model", r.stdout)
        self.assertIn("bench --base-url", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "dry")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
