// BenchContext: timing loop and JSON reporting.
#include "bench/kernels/bench_harness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench/energy_counter.h"
#include "penstock_git_commit.h"  // generated at build time (cmake/git_commit.cmake)

namespace penstock::bench {

BenchContext::BenchContext(const BenchOptions& options, cuda::DeviceProperties props)
    : options_(options),
      props_(std::move(props)),
      alloc_(options.device),
      stream_(options.device),
      start_(options.device),
      end_(options.device) {
    const size_t flush_bytes = std::max<size_t>(size_t{128} << 20, 2 * props_.l2_cache_bytes);
    flush_ = Tensor::empty({static_cast<int64_t>(flush_bytes)}, DType::kU8, alloc_);
}

Timing BenchContext::time(const std::function<void()>& op) { return time(op, options_.warmup, options_.reps); }

Timing BenchContext::time(const std::function<void()>& op, int warmup, int reps) {
    for (int i = 0; i < warmup; ++i) op();
    std::vector<double> us;
    us.reserve(static_cast<size_t>(reps));
    for (int i = 0; i < reps; ++i) {
        cuda::fill_bytes_async(flush_, i & 0xff, stream_);
        start_.record(stream_);
        op();
        end_.record(stream_);
        end_.synchronize();
        us.push_back(1000.0 * static_cast<double>(cuda::Event::elapsed_ms(start_, end_)));
    }
    std::sort(us.begin(), us.end());
    Timing t;
    t.reps = reps;
    if (us.empty()) return t;
    t.median_us = us[us.size() / 2];
    t.min_us = us.front();
    t.max_us = us.back();
    return t;
}

Sustained BenchContext::sustain(const std::function<void()>& op, double seconds, double est_us) {
    if (!energy_) energy_ = std::make_shared<EnergyCounter>(options_.device);
    op();
    stream_.synchronize();
    Sustained s;
    s.calls = std::max(3, static_cast<int>(std::ceil(seconds * 1e6 / std::max(est_us, 1.0))));
    const double mj0 = energy_->read_mj();
    start_.record(stream_);
    for (int i = 0; i < s.calls; ++i) op();
    end_.record(stream_);
    end_.synchronize();
    const double mj1 = energy_->read_mj();
    const double ms = static_cast<double>(cuda::Event::elapsed_ms(start_, end_));
    s.us_per_call = 1000.0 * ms / s.calls;
    if (mj0 >= 0.0 && mj1 >= mj0) {
        s.joules_per_call = (mj1 - mj0) / 1e3 / s.calls;
        s.watts = ms > 0.0 ? (mj1 - mj0) / ms : -1.0;
    }
    return s;
}

void BenchContext::add_sustained(nlohmann::json& record, const Sustained& s) {
    record["sustained_calls"] = s.calls;
    record["sustained_us"] = s.us_per_call;
    if (s.joules_per_call >= 0.0) {
        record["energy_j"] = s.joules_per_call;
        record["mean_power_w"] = s.watts;
    }
}

nlohmann::json BenchContext::base_record(const std::string& bench) const {
    return {{"bench", bench},
            {"gpu", props_.name},
            {"cc", std::to_string(props_.cc_major) + "." + std::to_string(props_.cc_minor)},
            {"driver", props_.driver_version},
            {"runtime", props_.runtime_version},
            {"commit", PENSTOCK_GIT_COMMIT}};
}

void BenchContext::report(nlohmann::json record, const Timing& t, double bytes) const {
    const double gbps = t.median_us > 0 ? bytes / (t.median_us * 1e3) : 0.0;
    record["time_us"] = t.median_us;
    record["min_us"] = t.min_us;
    record["max_us"] = t.max_us;
    record["reps"] = t.reps;
    record["bytes"] = bytes;
    record["gbps"] = gbps;
    record["pct_of_copy_peak"] = 100.0 * gbps / kH200CopyGBps;
    std::printf("%s\n", record.dump().c_str());
    std::fflush(stdout);
}

}  // namespace penstock::bench
