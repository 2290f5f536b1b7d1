// EventTimeline: cudaEvent_t pool for kernels::Profiler's CUDA markers.
#include "kernels/cuda/event_timeline.h"

#include <cuda_runtime_api.h>

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

}  // namespace penstock::cuda
