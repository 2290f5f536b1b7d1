// Pipeline-parallel execution over a Communicator: stage 0 owns the plan; every step's plan travels with the
// activations (hidden [n_tokens, hidden] f32) down the pipeline and carries each sequence's sampling parameters; the
// last stage computes the logit rows, samples, and returns the token ids (and the logit rows only when stage 0 asked
// for them) to stage 0. Messages are plain data validated on receipt (magic, version, bounded sizes): a malformed or
// foreign message is a DataLoss Status, never executed or trusted.
//
// Wire format per step on the link stage s -> s+1 (the plan goes first, before s computes, so s+1 can admit the batch
// while s works):
//   envelope (kTagEnvelope): u32 magic 'PSTK', u32 version, u64 plan bytes
//   plan (kTagPlan):  u32 flags (bit 0: stop, bit 1: eager bank, bit 2: return logits), u32 n_seqs, u32 bank_total,
//                     u32 bank_inherited, u32 bank_valid, u32 topk_cols, u32 n_free, u32 n_counters, u32 n_commands,
//                     then per
//                     sequence: i64 request_id, i64 prefix_len, i64 prompt_len, u32 n_tokens, u8 logits mode,
//                     u8 release_after, u8 flags (bit 0 sample, bit 1 prompt_logprobs), u8 top_logprobs (0 unless
//                     a flag is set), f32 temperature, f32 top_p, i32 top_k, f32 min_p, u64 seed,
//                     i64 token_index, i32 next_token (-1 without prompt_logprobs), f32 presence_penalty, f32
//                     frequency_penalty, f32 repetition_penalty, u32 n_history (a penalized sampled sequence's output
//                     so far, else 0), u32 n_prompt (its prompt's distinct ids with a repetition penalty, else 0),
//                     u32 n_banned (tokens the draw may not produce: stop tokens before min_new_tokens), u32 n_bias
//                     (logit_bias entries); then all token ids (i32) in sequence order; then each sequence's history,
//                     prompt and banned ids (i32) and logit biases (i32 id, f32 bias);
//                     then n_free request ids (i64) to
//                     free before the batch; then n_counters x 5 i64 (steps, busy us, stall us, bytes sent, bank bytes
//                     sent) of stages 1..s, each appended by its stage as it forwards the plan; then n_commands
//                     stage commands, each i64 request id, u64 room, i64 timeout ms, u32 payload bytes, payload
//                     (a disaggregated prefill's KV send: the payload is the decode end's destination record). A plan
//                     with no sequences only frees and carries commands: nothing else follows it on the link and
//                     nothing comes back.
//   eager bank only (kTagBankInherited): f32 [n_tokens, bank_inherited, hidden] = bank rows [0, inherited), sent by s
//                     the moment s has them (before its own layers); an empty message when there are none
//   hidden (kTagHidden): f32 [n_tokens, hidden] (a bf16 residual stream is widened for the link and narrowed back)
//   bank (kTagBank), when bank_total > 0: f32 [n_tokens, rows, hidden] = rows [inherited, valid) with eager bank,
//                     rows [0, valid) without. Either way the same bytes cross the link. (The bank, like the
//                     stream, is held in the stage's hidden dtype and widened for the link / narrowed back.)
//   DSA top-k (kTagTopk), when topk_cols > 0: i32 [n_tokens, topk_cols] = the key positions the sender's last full
//                     indexer layer selected, for a receiver whose first layer is a `shared` indexer layer (data link,
//                     after the bank rows; i32 as it is, never widened).
// last stage -> stage 0, per step with sequences: i64 [pp - 1, 5] counters of stages 1..pp-1 (kTagCounters; the last
// stage's after this step, the others' as of this step's plan), i32 [n_sampled] token ids (kTagTokens) and f32
// [n_sampled] their log-probabilities (kTagLogprobs) when n_sampled > 0, i32 [n_top] then f32 [n_top] the
// alternatives' ids and log-probabilities (kTagTopIds, kTagTopLogprobs; n_top = the sum of the sampled sequences'
// top_logprobs, each sequence's in turn, fewer entries padded with id -1) when n_top > 0; for the sequences with
// prompt_logprobs, f32 [n_scored] the scored prompt tokens' log-probabilities (kTagPromptLogprobs; n_scored = each
// one's token count, less one where next_token is -1) and, with top_logprobs, i32 then f32 [the sum of n x
// top_logprobs] their alternatives (kTagPromptTopIds, kTagPromptTopLogprobs; padded with id -1); and f32
// [n_logit_rows, vocab] (kTagLogits) only with the return-logits flag. Stage 0 knows every size from the plan it sent.
// bank_total is the bank's row count (Kimi K3 AttnRes; 0 for other families); bank_valid = rows completed before the
// receiving stage's first layer; bank_inherited = rows the sender itself received.
//
// Two links per stage pair (StageOptions): the control link (host tensors, MPI) carries the envelope, the plan, the
// returning tokens and logits and the stats; the data link carries the hidden, bank rows and top-k. With a CUDA backend
// the data link is the NCCL pp group and those tensors go device to device, stream-ordered on the backend's stream (a
// send returns once enqueued; the receiver's layers, enqueued after its recv, see the data). With a host data link
// (MPI) device activations are staged through host memory. The results go back on the control link so that stage 0's
// receives, posted at submit, never sit on its compute stream ahead of the layers the last stage is waiting for.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kernels/profile.h"
#include "models/forward_batch.h"
#include "parallel/communicator.h"
#include "runtime/model_runner.h"
#include "runtime/sampling.h"

namespace penstock::parallel {

inline constexpr uint32_t kStageMagic = 0x4b545350;  // "PSTK"
// 4: per-sequence sampling parameters, last-stage sampling (tokens back instead of logits), stage counters.
// 5: the DSA top-k on the data link (device to device with NCCL) instead of the control link.
// 6: per-sequence top_logprobs, and the alternatives among the results.
// 7: stage commands (a disaggregated prefill's per-stage KV sends).
inline constexpr uint32_t kStageVersion = 7;

// When the stages after stage 0 free a request's pages and non-paged state.
enum class ReleasePolicy : uint8_t {
    kAtPromptEnd,  // after the step whose chunk ends the prompt (prefill-only drivers: pipeline_prefill)
    kExplicit,     // only when stage 0 calls release() (serving: a request lives on through its decode steps)
};

// Per-stage counters. busy_ms and the stall of stages > 0 are the runner's queue time (kernels::DeviceClock): on the
// CPU the host's wall time, on a GPU the stream's, read without waiting (a step still running on the GPU is counted
// by a later report). Stage 0's stall is host time.
struct StageStats {
    int64_t steps = 0;
    double busy_ms = 0;      // running this stage's layers (and the head on the last stage)
    // Stages > 0: receiving a planned micro-batch's activations (hidden, bank rows, DSA top-k) from the previous
    // stage (boundary stall: on a GPU the stream's wait for them; the wait for the next plan is idle or held-back
    // time, not counted). Stage 0: waiting on the host for the last stage's results.
    double stall_ms = 0;
    int64_t bytes_sent = 0;  // to the next stage (and results to stage 0)
    int64_t bank_bytes_sent = 0;
};

// Work stage 0 hands every other stage outside the steps: send request `request_id`'s pages of this stage's layers to
// a disaggregated decode end (payload: the room's encoded disagg::KvDestination), within timeout_ms.
struct StageCommand {
    int64_t request_id = 0;
    uint64_t room = 0;
    int64_t timeout_ms = 0;
    std::vector<uint8_t> payload;
};

struct StagePlan {
    models::ForwardBatch batch;     // page tables unset
    std::vector<uint8_t> release;   // per sequence: free its state after this step
    std::vector<int64_t> free_ids;  // requests to free before this step's batch
    // Per sequence (empty: none is sampled): how the last stage samples its next token.
    std::vector<runtime::SeqSampling> sampling;
    // Counters of stages 1..s (microsecond resolution on the wire), appended by each stage as it forwards the plan.
    std::vector<StageStats> counters;
    std::vector<StageCommand> commands;  // run by every stage > 0 (StageOptions::on_command)
    uint32_t bank_total = 0;        // rows of the AttnRes bank tensor (0: no bank)
    uint32_t bank_inherited = 0;    // rows the sender received from upstream
    uint32_t bank_valid = 0;        // rows valid after the sender's layers
    uint32_t topk_cols = 0;         // DSA: columns of the top-k key positions that follow the hidden (0: none)
    bool eager_bank = false;
    bool return_logits = false;  // the last stage also returns the logit rows
    bool stop = false;
};

// Stage 0's driver for a pipeline prefill, with the scheduling rules of SPEC §4 (as SGLang's PP scheduler): every
// prompt is a request; at most `micro_batch_size` requests run at once (pp_max_micro_batch_size: admission takes
// micro_batch_size - running); a micro-batch holds the next chunk of every running request whose previous chunk has
// come back, in admission order, within a token budget of `chunk_size` (0 = unlimited); up to `slots` micro-batches
// are in flight (pp_size + pp_async_batch_depth). A request's chunks are therefore sequential, and only different
// requests keep several stages busy: micro_batch_size = 1 leaves one chunk in flight (the starved pipeline).
// The last stage samples each prompt's next token (after its last position) with `sampling` (seed as given,
// token_index 0); every position's logits come back only with `return_logits`. Frees the requests' pages.
struct MicroBatchOptions {
    int64_t chunk_size = 0;
    int64_t micro_batch_size = 1;
    int64_t slots = 1;
    runtime::SeqSampling sampling = {.sample = true};  // greedy by default
    bool return_logits = true;
};
struct PrefillOutput {
    std::vector<Tensor> logits;          // per prompt [len, vocab] f32 (empty without return_logits)
    std::vector<runtime::Sampled> next;  // per prompt: the token the last stage sampled after the prompt
};
[[nodiscard]] Result<PrefillOutput> pipeline_prefill_sampled(runtime::ModelRunner* runner, class PipelineStage* pipe,
                                                             std::span<const std::vector<int32_t>> prompts,
                                                             const MicroBatchOptions& options);
// The same, returning only the logits (penstock forward: every position's logits are its output).
[[nodiscard]] Result<std::vector<Tensor>> pipeline_prefill(runtime::ModelRunner* runner, class PipelineStage* pipe,
                                                           std::span<const std::vector<int32_t>> prompts,
                                                           const MicroBatchOptions& options);

std::vector<uint8_t> encode_plan(const StagePlan& plan);
[[nodiscard]] Result<StagePlan> decode_plan(std::span<const uint8_t> bytes);

struct StageOptions {
    // The data link (hidden, bank rows): the same ranks as the control link; may work on the device (NCCL pp group).
    // Null: the control link carries everything.
    Communicator* data = nullptr;
    // Forward inherited AttnRes bank rows before running this stage's layers (SPEC §4).
    bool eager_bank = false;
    // The residual stream's dtype on this stage (--dtype; f32 or bf16): received hidden and AttnRes bank rows are
    // converted to it.
    DType hidden_dtype = DType::kF32;
    // Stage 0: when the other stages free a request (the plans stage 0 writes carry it).
    ReleasePolicy release = ReleasePolicy::kAtPromptEnd;
    // Stages > 0: runs each StageCommand (after the plan went on downstream; it should hand the work to another
    // thread and return). A plan with commands and no handler is DataLoss.
    std::function<Status(const StageCommand&)> on_command = {};
    // Stages > 0: called with the requests a plan frees, before their pages go back (waits for a command's work on
    // them, e.g. a KV send still reading them).
    std::function<void(std::span<const int64_t>)> before_free = {};
};

class PipelineStage final {
public:
    // `pp` is the pipeline group's control link (host tensors); its rank is this stage's index. The runner holds this
    // stage's layer range; activations live on the runner's device.
    PipelineStage(runtime::ModelRunner* runner, Communicator* pp, const StageOptions& options);
    PipelineStage(runtime::ModelRunner* runner, Communicator* pp, bool eager_bank = false)
        : PipelineStage(runner, pp, StageOptions{.eager_bank = eager_bank}) {}

    // Stage 0: runs one step of `batch` (bound to stage 0's pages) through every stage: the last stage samples every
    // sequence with sampling[i].sample (`sampling` has one entry per sequence, or none) and returns the tokens, and the
    // logit rows [n_logit_rows, vocab] f32 when `return_logits`. With kAtPromptEnd, sequences whose chunk ends their
    // prompt are released on the other stages after the step. With one stage, the whole model runs here.
    [[nodiscard]] Result<runtime::StepOutput> step(const models::ForwardBatch& batch,
                                                   std::span<const runtime::SeqSampling> sampling, bool return_logits);
    // Stage 0, micro-batched: submit() runs stage 0's layers on `batch`, sends it downstream and returns with the
    // micro-batch in flight (its result receives are posted first, so the last stage never blocks on stage 0);
    // collect() waits for the oldest in-flight micro-batch and returns its result (submission order). A result whose
    // token ids fall outside the vocabulary is DataLoss. Needs two stages or more.
    [[nodiscard]] Status submit(const models::ForwardBatch& batch, std::span<const runtime::SeqSampling> sampling,
                                bool return_logits);
    [[nodiscard]] Result<runtime::StepOutput> collect();
    size_t in_flight() const { return in_flight_.size(); }
    // Stage 0: the most micro-batches that were in flight at once (how full the pipeline was kept).
    size_t max_in_flight() const { return max_in_flight_; }
    // Stage 0: micro-batches submitted so far, and the wall time during which at least one was in flight.
    int64_t submitted() const { return submitted_; }
    double active_ms() const;
    // Stage 0: every stage's counters as last reported with a result (stage 0's own are current; stage s > 0's as of
    // its latest plan, so they may lag by one step).
    std::vector<StageStats> pipeline_stats() const;
    // Stage 0: frees these requests' pages and state on every other stage (ids a stage never saw are ignored). Ordered
    // with the steps on each link, so a later step never finds the pages still taken. No-op with one stage.
    [[nodiscard]] Status release(std::span<const int64_t> request_ids);
    // Stage 0: hands every other stage these commands (ordered with the steps on each link). No-op with one stage.
    [[nodiscard]] Status send_commands(std::span<const StageCommand> commands);
    // Stage 0: ends the other stages' serve() loops.
    [[nodiscard]] Status stop();
    // Stages > 0: receive and run steps until stage 0 stops the pipeline.
    [[nodiscard]] Status serve();

    const StageStats& stats() const { return stats_; }
    // Collective over the pipeline group: every stage's counters, in stage order.
    [[nodiscard]] Result<std::vector<StageStats>> gather_stats();

private:
    [[nodiscard]] Status send_plan(const StagePlan& plan);
    [[nodiscard]] Result<StagePlan> recv_plan();
    [[nodiscard]] Status send_rows(const Tensor& bank, uint32_t begin, uint32_t end, int tag);
    [[nodiscard]] Status send_topk(const models::Activations& act, const StagePlan& plan);
    [[nodiscard]] Status recv_topk(const StagePlan& plan, int64_t rows, models::Activations* act);
    [[nodiscard]] Status recv_rows(const Tensor& bank, uint32_t begin, uint32_t end, int tag);
    // One activation message on the data link: f32 and contiguous on the wire, staged through the host when the link
    // works there and `t` does not. `t` lives on the runner's device, any f32/bf16 layout.
    [[nodiscard]] Status send_tensor(const TensorView& t, int peer, int tag);
    [[nodiscard]] Status recv_tensor(const TensorView& t, int peer, int tag);
    // This stage's outgoing plan for `batch` (bank fields from the model's layer range).
    StagePlan make_plan(const models::ForwardBatch& batch, uint32_t bank_inherited) const;

    // Stage 0: one micro-batch whose results have not come back (buffers filled by the posted receives).
    struct InFlight {
        Tensor counters;  // [pp - 1, 5] i64
        Tensor tokens;    // [n_sampled] i32
        Tensor logprobs;  // [n_sampled] f32
        Tensor top_ids;   // [n_top] i32 (-1: no alternative), when some sampled sequence asked for alternatives
        Tensor top_logprobs;                  // [n_top] f32
        std::vector<int32_t> top_per_token;   // per sampled sequence: its top_logprobs (empty when n_top is 0)
        // Prompt log-probabilities: per scored sequence (batch order) its scored tokens and top_logprobs.
        std::vector<std::vector<int32_t>> prompt_targets;
        std::vector<int32_t> prompt_top;
        Tensor prompt_logprobs;      // f32 [n_scored]
        Tensor prompt_top_ids;       // i32 [sum of n x top], when some scored sequence asked for alternatives
        Tensor prompt_top_logprobs;  // f32, as prompt_top_ids
        Tensor logits;    // [n_logit_rows, vocab] f32, with return_logits only
        std::vector<std::unique_ptr<PendingOp>> recvs;
    };
    // The last stage: the head (closing the busy bracket serve() opened) and sampling, then this step's results to
    // stage 0.
    [[nodiscard]] Status send_results(const StagePlan& plan, const models::BatchLayout& layout,
                                      const models::Activations& act);
    // stats_.busy_ms / stall_ms from the clocks (stall: stages > 0; stage 0's is host time added in collect()).
    void refresh_stats();

    runtime::ModelRunner* runner_;
    Communicator* pp_;
    Communicator* data_;
    bool eager_bank_;
    DType hidden_dtype_;
    ReleasePolicy release_policy_;
    std::function<Status(const StageCommand&)> on_command_;
    std::function<void(std::span<const int64_t>)> before_free_;
    StageStats stats_;
    kernels::DeviceClock busy_clock_;   // brackets this stage's layers (and the head on the last stage)
    kernels::DeviceClock stall_clock_;  // stages > 0: brackets the receives of a planned micro-batch
    std::deque<InFlight> in_flight_;
    size_t max_in_flight_ = 0;
    int64_t submitted_ = 0;
    double active_ms_ = 0;                                  // closed intervals with micro-batches in flight
    std::chrono::steady_clock::time_point active_since_{};  // start of the open one (in_flight_ non-empty)
    std::vector<StageStats> remote_stats_;                  // stages 1..pp-1, from the latest result
};

}  // namespace penstock::parallel
