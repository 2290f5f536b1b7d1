// EventTimeline: cudaEvent_t pool for kernels::Profiler's CUDA markers.
#include "kernels/cuda/event_timeline.h"

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"

namespace penstock::cuda {

EventTimeline::~EventTimeline() {
    for (CUevent_st* e : events_) cudaEventDestroy(e);  // no check: destruction must not abort
}

void EventTimeline::record(int64_t index, void* stream) {
    PENSTOCK_CHECK_GE(index, 0);
    PENSTOCK_CHECK_LE(index, static_cast<int64_t>(events_.size())) << "markers are recorded in order";
    if (index == static_cast<int64_t>(events_.size())) {
        cudaEvent_t e = nullptr;
        PENSTOCK_CUDA_CHECK(cudaEventCreate(&e));
        events_.push_back(e);
    }
    PENSTOCK_CUDA_CHECK(cudaEventRecord(events_[static_cast<size_t>(index)], static_cast<cudaStream_t>(stream)));
}

double EventTimeline::elapsed_ms(int64_t from, int64_t to) const {
    PENSTOCK_CHECK(from >= 0 && to >= 0 && from < static_cast<int64_t>(events_.size()) &&
                   to < static_cast<int64_t>(events_.size()))
        << "marker " << from << " or " << to << " never recorded";
    float ms = 0.0f;
    PENSTOCK_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[static_cast<size_t>(from)], events_[static_cast<size_t>(to)]));
    return static_cast<double>(ms);
}

EventPairs::~EventPairs() {
    for (const Pair& p : pairs_) {  // no check: destruction must not abort
        cudaEventDestroy(p.begin);
        if (p.end != nullptr) cudaEventDestroy(p.end);
    }
    for (CUevent_st* e : free_) cudaEventDestroy(e);
}

CUevent_st* EventPairs::take() {
    if (!free_.empty()) {
        CUevent_st* e = free_.back();
        free_.pop_back();
        return e;
    }
    cudaEvent_t e = nullptr;
    PENSTOCK_CUDA_CHECK(cudaEventCreate(&e));
    return e;
}

void EventPairs::begin(void* stream) {
    PENSTOCK_CHECK(pairs_.empty() || pairs_.back().end != nullptr) << "EventPairs::begin with a pair open";
    Pair p;
    p.begin = take();
    PENSTOCK_CUDA_CHECK(cudaEventRecord(p.begin, static_cast<cudaStream_t>(stream)));
    pairs_.push_back(p);
}

void EventPairs::end(void* stream) {
    PENSTOCK_CHECK(!pairs_.empty() && pairs_.back().end == nullptr) << "EventPairs::end without begin";
    CUevent_st* e = take();
    PENSTOCK_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(stream)));
    pairs_.back().end = e;
}

double EventPairs::poll() {
    size_t done = 0;
    for (; done < pairs_.size() && pairs_[done].end != nullptr; ++done) {
        const cudaError_t q = cudaEventQuery(pairs_[done].end);
        if (q == cudaErrorNotReady) break;
        PENSTOCK_CUDA_CHECK(q);
        float ms = 0.0f;
        PENSTOCK_CUDA_CHECK(cudaEventElapsedTime(&ms, pairs_[done].begin, pairs_[done].end));
        total_ms_ += static_cast<double>(ms);
        free_.push_back(pairs_[done].begin);
        free_.push_back(pairs_[done].end);
    }
    pairs_.erase(pairs_.begin(), pairs_.begin() + static_cast<std::ptrdiff_t>(done));
    return total_ms_;
}

}  // namespace penstock::cuda
