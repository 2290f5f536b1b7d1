// Request state transitions; every precondition is a PENSTOCK_CHECK (an illegal move is a scheduler bug).
#include "scheduler/request.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace penstock::scheduler {

std::string_view request_state_name(RequestState s) {
    switch (s) {
        case RequestState::kWaiting:
            return "waiting";
        case RequestState::kPrefilling:
            return "prefilling";
        case RequestState::kDecoding:
            return "decoding";
        case RequestState::kFinished:
            return "finished";
        case RequestState::kAborted:
            return "aborted";
    }
    return "?";
}

std::string_view finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kNone:
            return "none";
        case FinishReason::kLength:
            return "length";
        case FinishReason::kStop:
            return "stop";
        case FinishReason::kAbort:
            return "abort";
        case FinishReason::kTimeout:
            return "timeout";
        case FinishReason::kRejected:
            return "rejected";
    }
    return "?";
}

Request::Request(int64_t id, std::vector<int32_t> prompt, SamplingParams sampling, TimePoint arrival,
                 TimePoint deadline)
    : id_(id), prompt_(std::move(prompt)), sampling_(std::move(sampling)), arrival_(arrival), deadline_(deadline) {}

void Request::set_matched_prefix_len(int64_t n) {
    PENSTOCK_CHECK(state_ == RequestState::kWaiting) << "request " << id_ << " is " << request_state_name(state_);
    PENSTOCK_CHECK(n >= 0 && n <= prompt_len())
        << "matched prefix " << n << " of a " << prompt_len() << "-token prompt";
    matched_prefix_len_ = n;
}

void Request::admit() {
    PENSTOCK_CHECK(state_ == RequestState::kWaiting)
        << "admit request " << id_ << " in state " << request_state_name(state_);
    state_ = RequestState::kPrefilling;
}

void Request::schedule_prefill(int64_t n_tokens) {
    PENSTOCK_CHECK(state_ == RequestState::kPrefilling)
        << "prefill chunk for request " << id_ << " in state " << request_state_name(state_);
    PENSTOCK_CHECK_GT(n_tokens, 0);
    PENSTOCK_CHECK_LE(scheduled_len_ + n_tokens, prompt_len());
    scheduled_len_ += n_tokens;
}

void Request::schedule_decode() {
    PENSTOCK_CHECK(is_decodable()) << "decode step for request " << id_ << " in state " << request_state_name(state_)
                                   << ", in flight " << in_flight();
    PENSTOCK_CHECK_EQ(prefix_len_, prompt_len() + n_generated() - 1);
    scheduled_len_ += 1;
}

void Request::complete_positions(int64_t n_positions) {
    PENSTOCK_CHECK(!is_terminal()) << "request " << id_;
    PENSTOCK_CHECK_GT(n_positions, 0);
    PENSTOCK_CHECK_LE(prefix_len_ + n_positions, scheduled_len_);
    prefix_len_ += n_positions;
}

bool Request::append_token(int32_t token_id) {
    PENSTOCK_CHECK(state_ == RequestState::kPrefilling || state_ == RequestState::kDecoding)
        << "token for request " << id_ << " in state " << request_state_name(state_);
    PENSTOCK_CHECK_EQ(prefix_len_, prompt_len() + n_generated()) << "a token needs every input position computed";
    PENSTOCK_CHECK_LT(n_generated(), sampling_.max_new_tokens);
    generated_.push_back(token_id);
    const auto& stops = sampling_.stop_token_ids;
    if (std::find(stops.begin(), stops.end(), token_id) != stops.end()) {
        finish_reason_ = FinishReason::kStop;
    } else if (n_generated() >= sampling_.max_new_tokens) {
        finish_reason_ = FinishReason::kLength;
    }
    state_ = finish_reason_ == FinishReason::kNone ? RequestState::kDecoding : RequestState::kFinished;
    return state_ == RequestState::kFinished;
}

void Request::abort(FinishReason reason) {
    PENSTOCK_CHECK(!is_terminal()) << "abort request " << id_ << " in state " << request_state_name(state_);
    PENSTOCK_CHECK(reason == FinishReason::kAbort || reason == FinishReason::kTimeout ||
                   reason == FinishReason::kRejected)
        << "abort reason " << finish_reason_name(reason);
    state_ = RequestState::kAborted;
    finish_reason_ = reason;
}

}  // namespace penstock::scheduler
