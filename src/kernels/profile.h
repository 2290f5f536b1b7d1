// Opt-in per-scope timing of a forward: named, nested scopes (kernels::ProfileScope) around the ops a layer issues.
// Off unless Context::profiler is set; then each scope records a pair of markers on the context's queue (CUDA: a
// timing event recorded on the stream, no host synchronisation; CPU: std::chrono::steady_clock, the CPU ops being
// synchronous) and Profiler::collect() reads the intervals after the caller has waited for the work. Timings are the
// queue's wall time between the markers: on CUDA that includes any idle gap the host leaves inside the scope.
//
// Scope names nest: a scope opened while "layer" and "attn" are open is recorded as "layer.attn.<name>". Single
// thread: one Profiler belongs to the thread that issues the ops of its context.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ops.h"

namespace penstock::kernels {

// One closed scope instance.
struct ProfileRecord {
    std::string path;  // the names of the scopes open at its begin, outermost first, joined by '.'
    int depth = 0;     // 0 for a scope opened with no other scope open
    double ms = 0.0;   // end marker - begin marker
};

// The instances of one path summed (e.g. the same scope in every layer of a range, or in every slice of a loop).
struct ProfileTotal {
    std::string path;
    int depth = 0;
    int64_t count = 0;
    double ms = 0.0;
};

// Records scope intervals of the ops issued under one Context (device fixed at construction). Not copyable.
class Profiler final {
public:
    explicit Profiler(Device device);
    ~Profiler();
    Profiler(const Profiler&) = delete;
    Profiler& operator=(const Profiler&) = delete;

    Device device() const { return device_; }
    // Opens / closes a scope: records a marker on ctx's queue (ctx.device must be device()). end() closes the
    // innermost open scope.
    void begin(std::string_view name, const Context& ctx);
    void end(const Context& ctx);
    // Every scope closed since the last clear(), in the order they were opened (a parent before its children).
    // CUDA: the caller has waited for the stream first (Backend::synchronize); aborts while a scope is still open.
    std::vector<ProfileRecord> collect() const;
    // Forgets the recorded scopes (markers are reused by the next forward). No scope may be open.
    void clear();

private:
    struct Scope {
        std::string path;
        int depth = 0;
        int64_t begin_mark = 0;
        int64_t end_mark = -1;
    };
    int64_t mark(const Context& ctx);
    double elapsed_ms(int64_t from, int64_t to) const;

    Device device_;
    std::vector<Scope> scopes_;
    std::vector<size_t> open_;  // indices into scopes_, innermost last
    int64_t n_marks_ = 0;
    std::vector<std::chrono::steady_clock::time_point> host_marks_;  // CPU markers
    struct DeviceMarks;
    std::unique_ptr<DeviceMarks> device_marks_;  // CUDA markers (kernels/cuda/event_timeline.h)
};

// Device time of bracketed work, read without waiting for it (the pipeline's per-stage busy and stall counters):
// begin() / end() bracket work issued on ctx's queue, and poll() returns the total of every bracket the queue has
// finished. CUDA: a pair of timing events per bracket (cudaEventQuery; no host synchronisation), so a bracket counts
// the stream's time between its markers, including any wait inside it (an NCCL receive waiting for its sender);
// brackets still running are left for a later poll(). CPU: steady_clock at begin() and end(), the ops being
// synchronous, so poll() always has every bracket. One clock belongs to one thread and one queue.
class DeviceClock final {
public:
    explicit DeviceClock(Device device);
    ~DeviceClock();
    DeviceClock(const DeviceClock&) = delete;
    DeviceClock& operator=(const DeviceClock&) = delete;

    void begin(const Context& ctx);
    void end(const Context& ctx);  // closes the bracket begin() opened
    double poll();                 // ms of the finished brackets so far
    int64_t pending() const;       // brackets recorded and not yet counted (CPU: 0)

private:
    Device device_;
    double host_ms_ = 0.0;
    std::chrono::steady_clock::time_point host_begin_{};
    bool open_ = false;
    struct DevicePairs;
    std::unique_ptr<DevicePairs> pairs_;  // CUDA (kernels/cuda/event_timeline.h)
};

// Sums records by path; totals come in order of each path's first record.
std::vector<ProfileTotal> aggregate(const std::vector<ProfileRecord>& records);

// RAII scope: `const kernels::ProfileScope scope(ctx, "attn.core");`. With ctx.profiler null it costs one branch at
// construction and one at destruction. `ctx` must outlive the scope (it is a local in the issuing function).
class ProfileScope final {
public:
    ProfileScope(const Context& ctx, std::string_view name) : ctx_(ctx.profiler != nullptr ? &ctx : nullptr) {
        if (ctx_ != nullptr) [[unlikely]] {
            ctx_->profiler->begin(name, *ctx_);
        }
    }
    ~ProfileScope() {
        if (ctx_ != nullptr) [[unlikely]] {
            ctx_->profiler->end(*ctx_);
        }
    }
    ProfileScope(const ProfileScope&) = delete;
    ProfileScope& operator=(const ProfileScope&) = delete;

private:
    const Context* ctx_;
};

}  // namespace penstock::kernels
