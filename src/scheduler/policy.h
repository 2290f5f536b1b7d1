// Waiting-queue policies as small pure function objects (TRT-LLM style): they order a snapshot of the waiting queue
// (given in arrival order) for the PrefillAdder and touch nothing else.
#pragma once

#include <span>
#include <vector>

#include "scheduler/config.h"
#include "scheduler/request.h"

namespace penstock::scheduler {

class WaitingOrder final {
public:
    explicit WaitingOrder(Policy policy) : policy_(policy) {}

    // kFcfs: the queue as given. kLongestPrefix: by Request::matched_prefix_len (prompt tokens a prefix cache already
    // holds), longest first, stable so that equals keep arrival order. There is no prefix cache yet, so every
    // matched_prefix_len is 0 and the order falls back to FCFS until one sets it (TODO(#4)).
    std::vector<const Request*> operator()(std::span<const Request* const> queue) const;

private:
    Policy policy_;
};

}  // namespace penstock::scheduler
