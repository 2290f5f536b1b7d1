// Start-up warm-up (SPEC §6): before the server reports ready, one prefill at each length of a list runs through the
// engine (up to `concurrency` at once, within an overall deadline), so that no client request meets a cold start
// (first-touch allocations, cuBLASLt / cuDNN plan selection, NCCL channel set-up, lazily built kernels).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace penstock::server {

struct WarmupOptions {
    std::vector<int64_t> lengths;  // prompt tokens of each warm-up request (empty: no warm-up)
    int64_t concurrency = 1;       // warm-up requests in flight at once
    double timeout_s = 600;        // the whole warm-up must end within this (DeadlineExceeded otherwise)
};

// "512,2048,8192" -> lengths; InvalidArgument naming --warmup-lengths for anything but positive integers.
[[nodiscard]] Result<std::vector<int64_t>> parse_warmup_lengths(const std::string& text);

struct WarmupResult {
    std::vector<double> seconds;  // per length, submit to finish
    double total_s = 0;
};

// Runs the warm-up on a started engine: prompts of seeded pseudo-random ids in [0, vocab), one output token each,
// greedy. A request the engine refuses or fails fails the warm-up, naming its length; past the deadline the rest are
// aborted (their pages freed) and the result is DeadlineExceeded.
[[nodiscard]] Result<WarmupResult> run_warmup(engine::Engine& engine, const WarmupOptions& options, int64_t vocab);

}  // namespace penstock::server
