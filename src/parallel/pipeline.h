// Pipeline-parallel execution over a Communicator: stage 0 owns the plan; every step's plan travels with the
// activations (hidden [n_tokens, hidden] f32) down the pipeline; the last stage computes the logit rows and returns
// them to stage 0. Messages are plain data validated on receipt (magic, version, bounded sizes): a malformed or
// foreign message is a DataLoss Status, never executed or trusted.
//
// Wire format per step on the link stage s -> s+1 (the plan goes first, before s computes, so s+1 can admit the batch
// while s works):
//   envelope (kTagEnvelope): u32 magic 'PSTK', u32 version, u64 plan bytes
//   plan (kTagPlan):  u32 flags (bit 0: stop, bit 1: eager bank), u32 n_seqs, u32 bank_total, u32 bank_inherited,
//                     u32 bank_valid, u32 topk_cols, u32 n_free, then per sequence: i64 request_id, i64 prefix_len,
//                     i64 prompt_len, u32 n_tokens, u8 logits mode, u8 release_after, u16 0; then all token ids (i32)
//                     in sequence order; then n_free request ids (i64) to free before the batch. A plan with no
//                     sequences only frees: nothing else follows it on the link and no logits come back.
//   eager bank only (kTagBankInherited): f32 [n_tokens, bank_inherited, hidden] = bank rows [0, inherited), sent by s
//                     the moment s has them (before its own layers); an empty message when there are none
//   hidden (kTagHidden): f32 [n_tokens, hidden] (a bf16 residual stream is widened for the link and narrowed back)
//   bank (kTagBank), when bank_total > 0: f32 [n_tokens, rows, hidden] = rows [inherited, valid) with eager bank,
//                     rows [0, valid) without. Either way the same bytes cross the link.
//   DSA top-k (kTagTopk), when topk_cols > 0: i32 [n_tokens, topk_cols] = the key positions the sender's last full
//                     indexer layer selected, for a receiver whose first layer is a `shared` indexer layer (host link).
// last stage -> stage 0 (kTagLogits): f32 [n_logit_rows, vocab].
// bank_total is the bank's row count (Kimi K3 AttnRes; 0 for other families); bank_valid = rows completed before the
// receiving stage's first layer; bank_inherited = rows the sender itself received.
//
// Two links per stage pair (StageOptions): the control link (host tensors, MPI) carries the envelope, the plan, the
// returning logits and the stats; the data link carries the hidden and bank rows. With a CUDA backend the data link is
// the NCCL pp group and those tensors go device to device, stream-ordered on the backend's stream (a send returns
// once enqueued; the receiver's layers, enqueued after its recv, see the data). With a host data link (MPI) device
// activations are staged through host memory. The logits go back on the control link so that stage 0's receive,
// posted at submit, never sits on its compute stream ahead of the layers the last stage is waiting for.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "models/forward_batch.h"
#include "parallel/communicator.h"
#include "runtime/model_runner.h"

namespace penstock::parallel {

inline constexpr uint32_t kStageMagic = 0x4b545350;  // "PSTK"
inline constexpr uint32_t kStageVersion = 3;

// When the stages after stage 0 free a request's pages and non-paged state.
enum class ReleasePolicy : uint8_t {
    kAtPromptEnd,  // after the step whose chunk ends the prompt (prefill-only drivers: pipeline_prefill)
    kExplicit,     // only when stage 0 calls release() (serving: a request lives on through its decode steps)
};

struct StagePlan {
    models::ForwardBatch batch;     // page tables unset
    std::vector<uint8_t> release;   // per sequence: free its state after this step
    std::vector<int64_t> free_ids;  // requests to free before this step's batch
    uint32_t bank_total = 0;        // rows of the AttnRes bank tensor (0: no bank)
    uint32_t bank_inherited = 0;    // rows the sender received from upstream
    uint32_t bank_valid = 0;        // rows valid after the sender's layers
    uint32_t topk_cols = 0;         // DSA: columns of the top-k key positions that follow the hidden (0: none)
    bool eager_bank = false;
    bool stop = false;
};

// Per-stage counters (host wall time).
struct StageStats {
    int64_t steps = 0;
    double busy_ms = 0;      // running this stage's layers (and the head on the last stage)
    double stall_ms = 0;     // blocked receiving from the previous stage (boundary stall)
    int64_t bytes_sent = 0;  // to the next stage (and logits to stage 0)
    int64_t bank_bytes_sent = 0;
};

// Stage 0's driver for a pipeline prefill, with the scheduling rules of SPEC §4 (as SGLang's PP scheduler): every
// prompt is a request; at most `micro_batch_size` requests run at once (pp_max_micro_batch_size: admission takes
// micro_batch_size - running); a micro-batch holds the next chunk of every running request whose previous chunk has
// come back, in admission order, within a token budget of `chunk_size` (0 = unlimited); up to `slots` micro-batches
// are in flight (pp_size + pp_async_batch_depth). A request's chunks are therefore sequential, and only different
// requests keep several stages busy: micro_batch_size = 1 leaves one chunk in flight (the starved pipeline).
// Returns every position's logits per prompt; frees the requests' pages.
struct MicroBatchOptions {
    int64_t chunk_size = 0;
    int64_t micro_batch_size = 1;
    int64_t slots = 1;
};
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
    // The residual stream's dtype on this stage (--dtype; f32 or bf16): received hidden rows are converted to it.
    DType hidden_dtype = DType::kF32;
    // Stage 0: when the other stages free a request (the plans stage 0 writes carry it).
    ReleasePolicy release = ReleasePolicy::kAtPromptEnd;
};

class PipelineStage final {
public:
    // `pp` is the pipeline group's control link (host tensors); its rank is this stage's index. The runner holds this
    // stage's layer range; activations live on the runner's device.
    PipelineStage(runtime::ModelRunner* runner, Communicator* pp, const StageOptions& options);
    PipelineStage(runtime::ModelRunner* runner, Communicator* pp, bool eager_bank = false)
        : PipelineStage(runner, pp, StageOptions{.eager_bank = eager_bank}) {}

    // Stage 0: runs one step of `batch` (bound to stage 0's pages) through every stage and returns the logit rows.
    // With kAtPromptEnd, sequences whose chunk ends their prompt are released on the other stages after the step.
    [[nodiscard]] Result<Tensor> step(const models::ForwardBatch& batch);
    // Stage 0, micro-batched: submit() runs stage 0's layers on `batch`, sends it downstream and returns with the
    // micro-batch in flight (its logits receive is posted first, so the last stage never blocks on stage 0);
    // collect() waits for the oldest in-flight micro-batch and returns its logit rows (submission order).
    [[nodiscard]] Status submit(const models::ForwardBatch& batch);
    [[nodiscard]] Result<Tensor> collect();
    size_t in_flight() const { return in_flight_.size(); }
    // Stage 0: the most micro-batches that were in flight at once (how full the pipeline was kept).
    size_t max_in_flight() const { return max_in_flight_; }
    // Stage 0: frees these requests' pages and state on every other stage (ids a stage never saw are ignored). Ordered
    // with the steps on each link, so a later step never finds the pages still taken. No-op with one stage.
    [[nodiscard]] Status release(std::span<const int64_t> request_ids);
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

    struct InFlight {
        Tensor logits;  // [n_logit_rows, vocab] f32, filled by `recv`
        std::unique_ptr<PendingOp> recv;
    };

    runtime::ModelRunner* runner_;
    Communicator* pp_;
    Communicator* data_;
    bool eager_bank_;
    DType hidden_dtype_;
    ReleasePolicy release_policy_;
    StageStats stats_;
    std::deque<InFlight> in_flight_;
    size_t max_in_flight_ = 0;
};

}  // namespace penstock::parallel
