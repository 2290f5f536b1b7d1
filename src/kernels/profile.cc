// Profiler: scope bookkeeping on the host; markers from steady_clock (CPU) or the CUDA event timeline.
#include "kernels/profile.h"

#include <unordered_map>

#include "core/check.h"

#if PENSTOCK_ENABLE_CUDA
#include "kernels/cuda/event_timeline.h"
#endif

namespace penstock::kernels {

#if PENSTOCK_ENABLE_CUDA
struct Profiler::DeviceMarks {
    cuda::EventTimeline events;
};
struct DeviceClock::DevicePairs {
    cuda::EventPairs pairs;
};
#else
struct Profiler::DeviceMarks {};
struct DeviceClock::DevicePairs {};
#endif

DeviceClock::DeviceClock(Device device) : device_(device) {
#if PENSTOCK_ENABLE_CUDA
    if (device_ == Device::kCUDA) pairs_ = std::make_unique<DevicePairs>();
#else
    PENSTOCK_CHECK(device_ == Device::kCPU) << "a CUDA clock in a build without the CUDA backend";
#endif
}

DeviceClock::~DeviceClock() = default;

void DeviceClock::begin(const Context& ctx) {
    PENSTOCK_CHECK(ctx.device == device_) << "clock of one device used under a context of another";
    PENSTOCK_CHECK(!open_) << "DeviceClock::begin with a bracket open";
    open_ = true;
#if PENSTOCK_ENABLE_CUDA
    if (device_ == Device::kCUDA) {
        pairs_->pairs.begin(ctx.stream);
        return;
    }
#endif
    host_begin_ = std::chrono::steady_clock::now();
}

void DeviceClock::end(const Context& ctx) {
    PENSTOCK_CHECK(ctx.device == device_) << "clock of one device used under a context of another";
    PENSTOCK_CHECK(open_) << "DeviceClock::end without begin";
    open_ = false;
#if PENSTOCK_ENABLE_CUDA
    if (device_ == Device::kCUDA) {
        pairs_->pairs.end(ctx.stream);
        return;
    }
#endif
    host_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_begin_).count();
}

double DeviceClock::poll() {
#if PENSTOCK_ENABLE_CUDA
    if (device_ == Device::kCUDA) return pairs_->pairs.poll();
#endif
    return host_ms_;
}

int64_t DeviceClock::pending() const {
#if PENSTOCK_ENABLE_CUDA
    if (device_ == Device::kCUDA) return pairs_->pairs.pending();
#endif
    return 0;
}

Profiler::Profiler(Device device) : device_(device) {
#if PENSTOCK_ENABLE_CUDA
    if (device_ == Device::kCUDA) device_marks_ = std::make_unique<DeviceMarks>();
#else
    PENSTOCK_CHECK(device_ == Device::kCPU) << "a CUDA profiler in a build without the CUDA backend";
#endif
}

Profiler::~Profiler() = default;

int64_t Profiler::mark(const Context& ctx) {
    PENSTOCK_CHECK(ctx.device == device_) << "profiler of one device used under a context of another";
    const int64_t index = n_marks_++;
    switch (device_) {
        case Device::kCPU:
            if (index == static_cast<int64_t>(host_marks_.size())) {
                host_marks_.push_back(std::chrono::steady_clock::now());
            } else {
                host_marks_[static_cast<size_t>(index)] = std::chrono::steady_clock::now();
            }
            return index;
        case Device::kCUDA:
#if PENSTOCK_ENABLE_CUDA
            device_marks_->events.record(index, ctx.stream);
#endif
            return index;
    }
    return index;
}

double Profiler::elapsed_ms(int64_t from, int64_t to) const {
    switch (device_) {
        case Device::kCPU:
            return std::chrono::duration<double, std::milli>(host_marks_[static_cast<size_t>(to)] -
                                                             host_marks_[static_cast<size_t>(from)])
                .count();
        case Device::kCUDA:
#if PENSTOCK_ENABLE_CUDA
            return device_marks_->events.elapsed_ms(from, to);
#else
            break;
#endif
    }
    return 0.0;
}

void Profiler::begin(std::string_view name, const Context& ctx) {
    Scope s;
    if (!open_.empty()) {
        const Scope& parent = scopes_[open_.back()];
        s.path.reserve(parent.path.size() + 1 + name.size());
        s.path = parent.path;
        s.path += '.';
        s.depth = parent.depth + 1;
    }
    s.path += name;
    s.begin_mark = mark(ctx);
    open_.push_back(scopes_.size());
    scopes_.push_back(std::move(s));
}

void Profiler::end(const Context& ctx) {
    PENSTOCK_CHECK(!open_.empty()) << "ProfileScope end without a begin";
    scopes_[open_.back()].end_mark = mark(ctx);
    open_.pop_back();
}

std::vector<ProfileRecord> Profiler::collect() const {
    PENSTOCK_CHECK(open_.empty()) << "collect() while " << open_.size() << " scope(s) are open";
    std::vector<ProfileRecord> out;
    out.reserve(scopes_.size());
    for (const Scope& s : scopes_) {
        out.push_back({.path = s.path, .depth = s.depth, .ms = elapsed_ms(s.begin_mark, s.end_mark)});
    }
    return out;
}

void Profiler::clear() {
    PENSTOCK_CHECK(open_.empty()) << "clear() while " << open_.size() << " scope(s) are open";
    scopes_.clear();
    n_marks_ = 0;
}

std::vector<ProfileTotal> aggregate(const std::vector<ProfileRecord>& records) {
    std::vector<ProfileTotal> out;
    std::unordered_map<std::string, size_t> index;
    for (const ProfileRecord& r : records) {
        auto [it, inserted] = index.try_emplace(r.path, out.size());
        if (inserted) out.push_back({.path = r.path, .depth = r.depth, .count = 0, .ms = 0.0});
        ProfileTotal& t = out[it->second];
        ++t.count;
        t.ms += r.ms;
    }
    return out;
}

}  // namespace penstock::kernels
