// Pipeline-parallel execution over a Communicator: stage 0 owns the plan; every step's plan travels with the
// activations (hidden [n_tokens, hidden] f32) down the pipeline; the last stage computes the logit rows and returns
// them to stage 0. Messages are plain data validated on receipt (magic, version, bounded sizes): a malformed or
// foreign message is a DataLoss Status, never executed or trusted.
//
// Wire format per step, stage s -> s+1 (tags kTagEnvelope, kTagPlan, kTagHidden):
//   envelope: u32 magic 'PSTK', u32 version, u64 plan bytes
//   plan:     u32 flags (bit 0: stop), u32 n_seqs, u32 bank_rows, then per sequence: i64 request_id, i64 prefix_len,
//   i64 prompt_len,
//             u32 n_tokens, u8 logits mode, u8 release_after, u16 0; then all token ids (i32) in sequence order
//   hidden:   f32 [n_tokens, hidden]
//   bank:     f32 [n_tokens, bank_rows, hidden] when bank_rows > 0 (Kimi K3 Attention Residuals; kTagBank)
// last stage -> stage 0 (kTagLogits): f32 [n_logit_rows, vocab].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/forward_batch.h"
#include "parallel/communicator.h"
#include "runtime/model_runner.h"

namespace penstock::parallel {

inline constexpr uint32_t kStageMagic = 0x4b545350;  // "PSTK"
inline constexpr uint32_t kStageVersion = 1;

struct StagePlan {
    models::ForwardBatch batch;    // page tables unset
    std::vector<uint8_t> release;  // per sequence: free its state after this step
    uint32_t bank_rows = 0;        // AttnRes bank rows travelling with the hidden (0: no bank)
    bool stop = false;
};

std::vector<uint8_t> encode_plan(const StagePlan& plan);
[[nodiscard]] Result<StagePlan> decode_plan(std::span<const uint8_t> bytes);

class PipelineStage final {
public:
    // `pp` is the pipeline group; its rank is this stage's index. The runner holds this stage's layer range.
    PipelineStage(runtime::ModelRunner* runner, Communicator* pp);

    // Stage 0: runs one step of `batch` (bound to stage 0's pages) through every stage and returns the logit rows.
    // Sequences whose chunk ends their prompt are released on the other stages after the step.
    [[nodiscard]] Result<Tensor> step(const models::ForwardBatch& batch);
    // Stage 0: ends the other stages' serve() loops.
    [[nodiscard]] Status stop();
    // Stages > 0: receive and run steps until stage 0 stops the pipeline.
    [[nodiscard]] Status serve();

private:
    [[nodiscard]] Status send_step(const StagePlan& plan, const models::Activations* act);
    [[nodiscard]] Result<StagePlan> recv_plan();

    runtime::ModelRunner* runner_;
    Communicator* pp_;
};

}  // namespace penstock::parallel
