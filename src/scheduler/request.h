// Request: one generation request as the scheduler sees it (prompt, sampling limits, progress, state). Transitions
// are methods that PENSTOCK_CHECK their preconditions, so an illegal transition is a bug that aborts, never a
// silent state change. Owned by the Scheduler; touched only by the scheduler thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace penstock::scheduler {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
inline constexpr TimePoint kNoDeadline = TimePoint::max();

// Sampling limits the scheduler needs. Temperature, top-p/top-k and seed arrive with issue #4 item 2 and do not
// affect scheduling.
struct SamplingParams {
    int64_t max_new_tokens = 1;                // >= 1: prefill produces the first token
    std::vector<int32_t> stop_token_ids = {};  // sampling one of these finishes the request (the token is kept)
};

// kWaiting: queued, owns no pages. kPrefilling: admitted (whole KV reserved), prompt not fully computed.
// kDecoding: prompt computed and at least one token generated, more to come. kFinished / kAborted: terminal, pages
// freed. Legal moves: Waiting -> Prefilling -> Decoding -> Finished, Prefilling -> Finished (max_new_tokens 1 or a
// stop token), and any non-terminal state -> Aborted.
enum class RequestState : uint8_t { kWaiting, kPrefilling, kDecoding, kFinished, kAborted };

enum class FinishReason : uint8_t {
    kNone,      // not finished
    kLength,    // max_new_tokens generated
    kStop,      // a stop token was sampled
    kAbort,     // abort(id): client disconnect, /abort_request, shutdown
    kTimeout,   // the deadline passed (expire_deadlines)
    kRejected,  // can never be admitted (needs more KV pages than the pool holds)
};

std::string_view request_state_name(RequestState s);
std::string_view finish_reason_name(FinishReason r);

class Request final {
public:
    Request(int64_t id, std::vector<int32_t> prompt, SamplingParams sampling, TimePoint arrival, TimePoint deadline);

    int64_t id() const { return id_; }
    std::span<const int32_t> prompt() const { return prompt_; }
    int64_t prompt_len() const { return static_cast<int64_t>(prompt_.size()); }
    const SamplingParams& sampling() const { return sampling_; }
    TimePoint arrival() const { return arrival_; }
    TimePoint deadline() const { return deadline_; }
    RequestState state() const { return state_; }
    FinishReason finish_reason() const { return finish_reason_; }
    const std::vector<int32_t>& generated() const { return generated_; }
    int64_t n_generated() const { return static_cast<int64_t>(generated_.size()); }

    // Positions whose KV has been computed (confirmed by a finished step).
    int64_t prefix_len() const { return prefix_len_; }
    // Positions handed to plans so far (>= prefix_len; larger while a step holding this request is in flight).
    int64_t scheduled_len() const { return scheduled_len_; }
    // Tokens of the whole KV reserved at admission: prompt + max_new_tokens (the reserved decode tokens).
    int64_t reserved_kv_tokens() const { return prompt_len() + sampling_.max_new_tokens; }
    // Prompt-cache hint for the longest-prefix policy: prompt tokens a prefix cache already holds. 0 until a prefix
    // cache exists (TODO(#4)); it orders the queue only and does not change what is computed.
    int64_t matched_prefix_len() const { return matched_prefix_len_; }
    void set_matched_prefix_len(int64_t n);

    bool is_terminal() const { return state_ == RequestState::kFinished || state_ == RequestState::kAborted; }
    // Admitted with prompt tokens not yet handed to any plan: the one request allowed to be mid-chunk.
    bool is_mid_chunk() const { return state_ == RequestState::kPrefilling && scheduled_len_ < prompt_len(); }
    // A step holding this request has been planned and its result has not come back yet.
    bool in_flight() const { return scheduled_len_ > prefix_len_; }
    // Ready for a one-token decode step.
    bool is_decodable() const { return state_ == RequestState::kDecoding && !in_flight(); }

    // Transitions (each checks its precondition).
    void admit();                                  // kWaiting -> kPrefilling
    void schedule_prefill(int64_t n_tokens);       // kPrefilling: scheduled_len += n_tokens <= prompt_len
    void schedule_decode();                        // decodable -> one position in flight
    void complete_positions(int64_t n_positions);  // prefix_len += n <= scheduled_len
    // Appends a sampled token once the prompt is computed; kPrefilling -> kDecoding. Then finishes the request
    // (kLength / kStop) when it should; returns true when it did.
    bool append_token(int32_t token_id);
    void abort(FinishReason reason);  // any non-terminal state -> kAborted

private:
    int64_t id_;
    std::vector<int32_t> prompt_;
    SamplingParams sampling_;
    TimePoint arrival_, deadline_;
    RequestState state_ = RequestState::kWaiting;
    FinishReason finish_reason_ = FinishReason::kNone;
    std::vector<int32_t> generated_;
    int64_t prefix_len_ = 0;
    int64_t scheduled_len_ = 0;
    int64_t matched_prefix_len_ = 0;
};

}  // namespace penstock::scheduler
