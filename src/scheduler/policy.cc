// Waiting-queue ordering.
#include "scheduler/policy.h"

#include <algorithm>

namespace penstock::scheduler {

std::vector<const Request*> WaitingOrder::operator()(std::span<const Request* const> queue) const {
    std::vector<const Request*> out(queue.begin(), queue.end());
    switch (policy_) {
        case Policy::kFcfs:
            break;
        case Policy::kLongestPrefix:
            std::stable_sort(out.begin(), out.end(), [](const Request* a, const Request* b) {
                return a->matched_prefix_len() > b->matched_prefix_len();
            });
            break;
    }
    return out;
}

}  // namespace penstock::scheduler
