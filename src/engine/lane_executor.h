// Tensor- and context-parallel lanes of pipeline stage 0 under `penstock serve`: every rank of stage 0 (its tp x cp
// ranks) must run each step the engine plans, because the model's collectives span them. Global rank 0 runs the
// engine; its executor is a LaneLeaderExecutor, which broadcasts each command (submit with its batch and sampling,
// collect, release, stop) to the other stage-0 ranks before running it through its own inner executor; those ranks
// run run_lane_follower(), which binds each batch to their own runner and runs the same command through their inner
// executor (their own pipeline lane, or the whole model when pp = 1), so their lanes keep as many micro-batches in
// flight as the leader's. Commands are plain data validated on receipt (parallel::decode_plan).
//
// Broadcast in two levels over existing groups: the leader's cp group (the tp-rank-0 ranks of stage 0), then every
// stage-0 tp group from its tp rank 0. Host (MPI) communicators; a few bytes per token.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "engine/step_executor.h"
#include "parallel/communicator.h"

namespace penstock::engine {

class LaneLeaderExecutor final : public StepExecutor {
public:
    // `cp` and `tp` are this rank's (stage 0, cp 0, tp 0) groups; either may be null or of size 1.
    LaneLeaderExecutor(std::unique_ptr<StepExecutor> inner, parallel::Communicator* cp, parallel::Communicator* tp);

    [[nodiscard]] Status submit(const StepInput& in) override;
    [[nodiscard]] Result<runtime::StepOutput> collect() override;
    int64_t in_flight() const override { return inner_->in_flight(); }
    int64_t slots() const override { return inner_->slots(); }
    [[nodiscard]] Status release(std::span<const int64_t> request_ids) override;
    [[nodiscard]] Status stop() override;
    bool isolates_failures() const override { return false; }
    ExecutorStats stats() const override { return inner_->stats(); }
    // A disaggregated prefill under PP: lane 0 (this rank's pipeline) sends every stage's KV, since each rank of a
    // stage caches the whole latent and index keys (tp replicates them, cp all-gathers each chunk's rows). The
    // commands go down this lane only: they carry no step, so the other lanes' collectives stay paired.
    int64_t n_stages() const override { return inner_->n_stages(); }
    [[nodiscard]] Status send_stage_commands(std::span<const parallel::StageCommand> commands) override {
        return inner_->send_stage_commands(commands);
    }

private:
    std::unique_ptr<StepExecutor> inner_;
    parallel::Communicator* cp_;
    parallel::Communicator* tp_;
};

// A stage-0 rank other than the leader: runs the leader's commands on `runner` through `inner` until stop (the results
// it collects are dropped: only the leader samples for the engine). `cp` and `tp` are this rank's groups (the cp group
// is used only by tp rank 0).
[[nodiscard]] Status run_lane_follower(runtime::ModelRunner* runner, StepExecutor* inner, parallel::Communicator* cp,
                                       parallel::Communicator* tp);

}  // namespace penstock::engine
