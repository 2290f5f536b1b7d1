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

// Pairs of timing events recorded around work on a stream and read back without waiting: begin() / end() record a
// pair, poll() adds the elapsed time of every pair whose end the stream has reached (cudaEventQuery, oldest first;
// no host synchronisation) to the running total and returns it, recycling their events. The pairs of one queue are
// recorded on one stream, in order.
class EventPairs final {
  public:
    EventPairs() = default;
    ~EventPairs();
    EventPairs(const EventPairs&) = delete;
    EventPairs& operator=(const EventPairs&) = delete;

    void begin(void* stream);
    void end(void* stream);     // closes the pair begin() opened
    double poll();              // ms of all completed pairs so far
    int64_t pending() const { return static_cast<int64_t>(pairs_.size()); }

  private:
    CUevent_st* take();
    struct Pair {
        CUevent_st* begin = nullptr;
        CUevent_st* end = nullptr;
    };
    std::vector<Pair> pairs_;  // recorded, oldest first (the open pair last, end null)
    std::vector<CUevent_st*> free_;
    double total_ms_ = 0.0;
};

}  // namespace penstock::cuda
