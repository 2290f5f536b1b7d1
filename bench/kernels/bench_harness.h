// The kernel-benchmark harness (PERF.md): warm-up, an L2 flush (a >= 128 MiB memset, over twice H200's L2) before
// every timed rep, CUDA events around the op alone, median of N; results print as one JSON line per config with
// the GPU, driver, runtime and commit, and the fraction of H200's measured copy bandwidth.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/tensor.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/device.h"

namespace penstock::bench {

// Device-to-device copy on one H200, read + write (PERF.md): the ceiling for memory-bound ops.
inline constexpr double kH200CopyGBps = 4300.0;

struct BenchOptions {
    int device = 0;
    int warmup = 10;
    int reps = 100;
    std::string only;  // run only this benchmark ("copy", "rms_norm", "gemm", "attention", "mla"); empty runs all
};

struct Timing {
    double median_us = 0;
    double min_us = 0;
    double max_us = 0;
    int reps = 0;
};

// A sustained run (BenchContext::sustain): the op back to back with no flush between, long enough for the GPU to settle
// at its power limit, and NVML's energy counter read around it (joules < 0: no counter).
struct Sustained {
    int calls = 0;
    double us_per_call = 0;
    double joules_per_call = -1;
    double watts = -1;
};

class EnergyCounter;

// One device, stream, allocator and flush buffer shared by every benchmark of a run.
class BenchContext final {
public:
    BenchContext(const BenchOptions& options, cuda::DeviceProperties props);

    // Runs `op` (which enqueues on stream()) options.warmup times, then options.reps timed times with an L2 flush
    // before each. The flush is outside the timed interval.
    Timing time(const std::function<void()>& op);
    // The same with this call's own warm-up and rep counts (slow baselines).
    Timing time(const std::function<void()>& op, int warmup, int reps);
    // Runs `op` back to back for about `seconds` (calls = seconds / est_us, at least 3) after one unmeasured call.
    Sustained sustain(const std::function<void()>& op, double seconds, double est_us);
    // Adds sustained_us, sustained_calls and, with a counter, energy_j and mean_power_w to `record`.
    static void add_sustained(nlohmann::json& record, const Sustained& s);
    // A JSON object with the fields every result line carries (bench, gpu, cc, driver, runtime, commit).
    nlohmann::json base_record(const std::string& bench) const;
    // Adds time, bandwidth for `bytes` moved and % of kH200CopyGBps to `record` and prints it as one line.
    void report(nlohmann::json record, const Timing& t, double bytes) const;

    cuda::CudaCachingAllocator& alloc() { return alloc_; }
    const cuda::Stream& stream() const { return stream_; }
    const cuda::DeviceProperties& props() const { return props_; }

private:
    BenchOptions options_;
    cuda::DeviceProperties props_;
    cuda::CudaCachingAllocator alloc_;
    cuda::Stream stream_;
    cuda::Event start_;
    cuda::Event end_;
    Tensor flush_;
    std::shared_ptr<EnergyCounter> energy_;  // created on the first sustain()
};

void run_copy_bench(BenchContext& ctx);
void run_rms_norm_bench(BenchContext& ctx);
void run_gemm_bench(BenchContext& ctx);
void run_attention_bench(BenchContext& ctx);
void run_mla_bench(BenchContext& ctx);

}  // namespace penstock::bench
