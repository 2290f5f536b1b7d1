// The `penstock sweep` matrix file (TOML, schema in docs/design/bench.md): layouts × concurrencies × repeats plus
// how to launch the servers and what to bench. Parsing is strict: every key is type- and range-checked, unknown keys
// are errors (a typo must not silently fall back to a default), and every error names the file, line and key path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace penstock::bench {

// One server configuration of the matrix. world size (mpirun -np) = pp * tp * cp; ep divides tp (SPEC §4).
struct SweepLayout {
    std::string name;  // directory and CSV id, [A-Za-z0-9_.-]; default "pp{pp}_tp{tp}_ep{ep}_cp{cp}"
    int pp = 1, tp = 1, ep = 1, cp = 1;
    std::vector<int64_t> pp_layer_partition;  // layers per stage; empty: the server's balanced default
    std::vector<std::string> args;            // extra `serve` arguments for this layout only
    int np() const { return pp * tp * cp; }
    // "7,5,6" or "" when none was given.
    std::string partition_string() const;
};

struct SweepLauncher {
    std::string mpirun = "mpirun";                             // program (PATH lookup) or path
    std::vector<std::string> args;                             // after `-np N`, e.g. --oversubscribe
    std::vector<std::pair<std::string, std::string>> env;      // added to the server's environment, in file order
    bool always = false;                                       // use mpirun for np == 1 too
};

struct SweepBench {
    std::string dataset = "random-ids";  // random-ids | random
    int64_t input_len = 1024;
    int64_t output_len = 1;
    double range_ratio = 1.0;
    int64_t num_prompts = 0;              // N per run; exactly one of num_prompts / prompts_per_concurrency is > 0
    int64_t prompts_per_concurrency = 0;  // N = C * this
    uint64_t seed = 1;                    // the same dataset for every repeat
    double request_timeout_s = 600;
    std::vector<std::string> args;  // extra `bench` arguments
    int64_t prompts_for(int64_t concurrency) const {
        return num_prompts > 0 ? num_prompts : prompts_per_concurrency * concurrency;
    }
};

struct SweepTimeouts {
    double server_start_s = 600;  // launch -> /health 200
    double run_s = 3600;          // one bench run, wall clock
    double stop_grace_s = 30;     // SIGTERM -> SIGKILL
};

struct SweepPlots {
    bool enabled = true;
    std::string gnuplot = "gnuplot";
    std::string terminal = "pngcairo";  // falls back to `png` when this terminal fails
    bool required = false;              // true: a plot that cannot be drawn makes the exit code non-zero
};

struct SweepConfig {
    std::string source;      // the file name, for messages
    std::string output_dir;  // required; relative paths are taken from the current directory
    std::string model;       // required
    std::string penstock;    // server binary; "" = the running executable
    std::string host = "127.0.0.1";
    int port_base = 0;  // layout i listens on port_base + i; 0 = ephemeral, read from the server's log
    std::vector<std::string> server_args;  // `serve` arguments for every layout
    SweepLauncher launcher;
    std::vector<SweepLayout> layouts;       // required, names unique
    std::vector<int64_t> concurrencies;     // required, each >= 1
    int repeats = 1;
    SweepBench bench;
    SweepTimeouts timeouts;
    SweepPlots plots;
};

// Parses and validates a matrix file's text. `source` names the file in error messages, which read
// "<source>:<line>:<col>: <key.path>: <problem>".
[[nodiscard]] Result<SweepConfig> parse_sweep_config(std::string_view text, const std::string& source);
[[nodiscard]] Result<SweepConfig> load_sweep_config(const std::string& path);

}  // namespace penstock::bench
