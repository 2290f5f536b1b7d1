// Internal to `penstock serve` (serve_command.cc, serve_pipeline.cc): what every rank checks before communicating, and
// the pieces the single-process and the pipeline start-up share.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/step_executor.h"
#include "engine/tokenizer.h"
#include "kernels/backend.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "models/model.h"
#include "parallel/layout.h"
#include "runtime/model_runner.h"
#include "scheduler/scheduler.h"
#include "server/serve_command.h"
#include "server/warmup.h"

namespace penstock::server {

struct ServeSetup {
    scheduler::SchedulerConfig scheduler;
    loader::ModelConfig config;
    models::ModelOptions model_options;
    int64_t n_pages = 0;
    parallel::ParallelSizes sizes;
    engine::DisaggOptions disagg;  // mode, backend, timeouts (the prefill end's resolver is set by serve_http)
    WarmupOptions warmup;          // --warmup-lengths / -concurrency / -timeout-s
};

// Every argument check that needs no communication (identical on every rank, so that all ranks fail alike).
[[nodiscard]] Result<ServeSetup> check_serve_args(const ServeArgs& args);

// Loads `range` of the model with the KV pool of setup.n_pages pages.
// `cp`: the context-parallel group (RunnerOptions::cp), null without CP; tensor parallelism comes with
// setup.model_options.tp. `backend`: the device the model and its KV cache live on (null: the host).
[[nodiscard]] Result<std::unique_ptr<runtime::ModelRunner>> load_serve_runner(
    const ServeArgs& args, const ServeSetup& setup, const loader::LayerRange& range,
    parallel::Communicator* cp = nullptr, const kernels::Backend* backend = nullptr);

// Null with --skip-tokenizer-init.
[[nodiscard]] Result<std::unique_ptr<engine::Tokenizer>> load_serve_tokenizer(const ServeArgs& args);

// Installs the SIGTERM/SIGINT flag handler and ignores SIGPIPE.
void install_stop_signal_handlers();
// Whether SIGTERM / SIGINT arrived since install_stop_signal_handlers().
bool stop_requested();

// The single process, or global rank 0: the engine over `runner` and `executor`, the HTTP server, signals and the
// drain. Returns after the drain with the engine stopped (which stops the executor's other ranks). `parallel_info`
// is merged into /get_server_info (pp/tp/ep/cp sizes, the layer partition). `engine_created`, when set, runs once the
// engine exists, before it starts (a pipeline's stage 0 tells the other stages where its transfer queues are).
[[nodiscard]] Status serve_http(const ServeArgs& args, const ServeSetup& setup,
                                std::unique_ptr<runtime::ModelRunner> runner,
                                std::unique_ptr<engine::StepExecutor> executor,
                                std::unique_ptr<engine::Tokenizer> tokenizer, const nlohmann::json& parallel_info,
                                const std::function<Status(engine::Engine&)>& engine_created = {});

// `penstock serve` with pp x tp x cp > 1 ranks under mpirun (serve_pipeline.cc; Unimplemented in a build without MPI).
[[nodiscard]] Status run_serve_pipeline(const ServeArgs& args, const ServeSetup& setup);

}  // namespace penstock::server
