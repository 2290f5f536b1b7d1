// A growing pool of CUDA timing events recorded in order on a stream: the markers of kernels::Profiler on the CUDA
// backend. Recording is asynchronous (cudaEventRecord, no host synchronisation); read the intervals only after the
// stream has reached the last recorded event. Host-only header (no CUDA headers).
#pragma once

#include <cstdint>
#include <vector>

struct CUevent_st;  // cudaEvent_t is CUevent_st*

namespace penstock::cuda {

class EventTimeline final {
  public:
    EventTimeline() = default;
    ~EventTimeline();
    EventTimeline(const EventTimeline&) = delete;
    EventTimeline& operator=(const EventTimeline&) = delete;

    // Records marker `index` (0, 1, 2, ... in order; an index seen before reuses its event) on `stream` (a
    // cudaStream_t) of the current device; events are created on first use.
    void record(int64_t index, void* stream);
    // Milliseconds between two recorded markers, both completed (aborts with CUDA's error otherwise).
    double elapsed_ms(int64_t from, int64_t to) const;

  private:
    std::vector<CUevent_st*> events_;
};

}  // namespace penstock::cuda
