// The penstock CLI: one binary, subcommands. `forward` runs a prompt through a model on the CPU reference path and
// writes the logits of every position. Every expected failure (bad arguments, missing files, unsupported model type,
// malformed checkpoint) prints one line "penstock: error: ..." and exits with code 2.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/sweep.h"
#include "core/logging.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "loader/safetensors_writer.h"
#include "models/model.h"
#include "parallel/consensus.h"
#include "parallel/layout.h"
#include "parallel/partition.h"
#include "parallel/pipeline.h"
#include "runtime/model_runner.h"
#include "server/serve_command.h"
#if PENSTOCK_ENABLE_MPI
#include "parallel/comm_factory.h"
#include "parallel/mpi_communicator.h"
#endif

#ifndef PENSTOCK_DEFAULT_MODEL_DIR
#define PENSTOCK_DEFAULT_MODEL_DIR "assets/tiny-deepseek-v3"
#endif

namespace penstock {
namespace {

constexpr int kExitError = 2;

struct ForwardArgs {
    std::string model = PENSTOCK_DEFAULT_MODEL_DIR;
    std::string input_ids;
    int64_t chunk_size = 0;
    std::string mla_form = "mha";
    std::string backend = "cpu";
    std::string dtype = "float32";
    int64_t max_kv_chunk_capacity = 128 * 1024;
    int threads = 0;
    int64_t n_pages = 0;
    std::string out;
    parallel::ParallelSizes parallel;
    std::string pp_layer_partition;
    bool pp_eager_bank_forward = false;
    int64_t concurrency = 1;
    int64_t pp_max_micro_batch_size = 0;
    int64_t max_running_requests = 256;
    int64_t pp_async_batch_depth = 0;
    // Decision pinning (models/decision_pins.h): at most one of the three.
    std::string record_decisions, compare_decisions, pin_decisions;
};

Result<std::vector<int32_t>> parse_ids(const std::string& text) {
    std::vector<int32_t> ids;
    size_t pos = 0;
    while (pos <= text.size()) {
        const size_t comma = text.find(',', pos);
        const std::string tok = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        if (tok.empty()) return invalid_argument("--input-ids: empty entry in '" + text + "'");
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(tok, &used);
        } catch (const std::exception&) {
            return invalid_argument("--input-ids: '" + tok + "' is not an integer");
        }
        if (used != tok.size() || v < 0 || v > INT32_MAX) {
            return invalid_argument("--input-ids: '" + tok + "' is not a token id");
        }
        ids.push_back(static_cast<int32_t>(v));
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return ids;
}

struct ForwardSetup {
    models::ModelOptions options;
    bool eager_bank = false;
    std::vector<int32_t> ids;
    loader::ModelConfig config;
};

// Everything that can be checked identically on every rank before any communication.
Result<ForwardSetup> check_forward_args(const ForwardArgs& args) {
    if (args.backend != "cpu" && args.backend != "cuda") {
        return invalid_argument("--backend must be cpu or cuda, got '" + args.backend + "'");
    }
    ForwardSetup setup;
    if (args.mla_form == "mha") {
        setup.options.mla_form = models::MlaForm::kMha;
    } else if (args.mla_form == "absorbed") {
        setup.options.mla_form = models::MlaForm::kAbsorbed;
    } else {
        return invalid_argument("--mla-form must be mha or absorbed, got '" + args.mla_form + "'");
    }
    if (args.dtype == "float32") {
        setup.options.dtype = DType::kF32;
    } else if (args.dtype == "bfloat16") {
        setup.options.dtype = DType::kBF16;
    } else {
        return invalid_argument("--dtype must be float32 or bfloat16, got '" + args.dtype + "'");
    }
    if (args.chunk_size < 0) return invalid_argument("--chunk-size must be >= 0");
    if (args.max_kv_chunk_capacity <= 0) return invalid_argument("--max-kv-chunk-capacity must be > 0");
    setup.options.max_kv_chunk_capacity = args.max_kv_chunk_capacity;
    PENSTOCK_RETURN_IF_ERROR(parallel::validate_sizes(args.parallel, 0));
    if (args.concurrency < 1 || args.concurrency > 4096) return invalid_argument("--concurrency must be in [1, 4096]");
    if (args.pp_max_micro_batch_size < 0) return invalid_argument("--pp-max-micro-batch-size must be >= 0");
    if (args.max_running_requests < 1) return invalid_argument("--max-running-requests must be >= 1");
    if (args.pp_async_batch_depth < 0 || args.pp_async_batch_depth > 64) {
        return invalid_argument("--pp-async-batch-depth must be in [0, 64]");
    }
    if (!args.pp_layer_partition.empty() && args.parallel.pp == 1) {
        return invalid_argument("--pp-layer-partition needs --pp > 1");
    }
    const int n_decision_flags = static_cast<int>(!args.record_decisions.empty()) +
                                 static_cast<int>(!args.compare_decisions.empty()) +
                                 static_cast<int>(!args.pin_decisions.empty());
    if (n_decision_flags > 1) {
        return invalid_argument("--record-decisions, --compare-decisions and --pin-decisions exclude each other");
    }
    if (n_decision_flags > 0 && args.parallel.world() > 1) {
        return invalid_argument("decision recording and pinning run in one process (no --pp, --tp or --cp)");
    }
    PENSTOCK_ASSIGN_OR_RETURN(setup.ids, parse_ids(args.input_ids));
    PENSTOCK_ASSIGN_OR_RETURN(setup.config, loader::load_model_config(std::filesystem::path(args.model)));
    if (!models::is_supported_model_type(setup.config.model_type)) {
        return unimplemented("model_type '" + setup.config.model_type + "' is not supported yet");
    }
    return setup;
}

Result<std::vector<int64_t>> stage_partition(const ForwardArgs& args, const loader::ModelConfig& config) {
    if (!args.pp_layer_partition.empty()) {
        return parallel::parse_partition(args.pp_layer_partition, args.parallel.pp, config.num_hidden_layers);
    }
    return parallel::balance_partition(config, args.parallel.pp, /*chunk_tokens=*/8192, /*prefix_tokens=*/0);
}

Result<std::unique_ptr<runtime::ModelRunner>> load_runner(const ForwardArgs& args, const ForwardSetup& setup,
                                                          const loader::LayerRange& range,
                                                          const kernels::Backend* backend, loader::LoadStats* stats,
                                                          parallel::Communicator* cp = nullptr) {
    PENSTOCK_ASSIGN_OR_RETURN(loader::Checkpoint checkpoint, loader::Checkpoint::open(args.model));
    models::ModelOptions options = setup.options;
    if (backend != nullptr) options.placement = backend->context(nullptr);
    PENSTOCK_ASSIGN_OR_RETURN(std::unique_ptr<models::Model> model,
                              models::load_model(setup.config, checkpoint, range, options, stats));
    runtime::RunnerOptions ropts;
    ropts.backend = backend;
    ropts.cp = cp;
    ropts.n_threads = args.threads;
    ropts.n_pages = args.n_pages > 0
                        ? args.n_pages
                        : args.concurrency * kv_cache::pages_for_tokens(static_cast<int64_t>(setup.ids.size()));
    return std::make_unique<runtime::ModelRunner>(std::move(model), ropts);
}

Status report(const ForwardArgs& args, const ForwardSetup& setup, const Tensor& l, const loader::LoadStats& stats,
              double load_ms, double run_ms) {
    if (!args.out.empty()) {
        PENSTOCK_RETURN_IF_ERROR(loader::write_safetensors(args.out, {{"logits", l.view()}}));
    }
    const int64_t n = l.size(0);
    const int64_t vocab = l.size(1);
    const float* last = l.ptr<const float>() + (n - 1) * vocab;
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v) {
        if (last[v] > last[best]) best = v;
    }
    std::printf("model %s (%s, %lld layers), %lld tokens, chunk %lld, mla %s, %s, backend %s\n", args.model.c_str(),
                setup.config.model_type.c_str(), static_cast<long long>(setup.config.num_hidden_layers),
                static_cast<long long>(n), static_cast<long long>(args.chunk_size), args.mla_form.c_str(),
                args.parallel.to_string().c_str(), args.backend.c_str());
    std::printf(
        "stage 0 loaded %lld tensors (%.1f MB read from %zu file(s)) in %.1f ms; forward %.1f ms (%.1f tok/s)\n",
        static_cast<long long>(stats.n_tensors), static_cast<double>(stats.bytes_read) / 1e6, stats.files_opened.size(),
        load_ms, run_ms, static_cast<double>(n) / (run_ms / 1e3));
    std::printf("last position: argmax %lld (logit %.4f)\n", static_cast<long long>(best), last[best]);
    if (!args.out.empty()) {
        std::printf("wrote logits [%lld, %lld] f32 to %s\n", static_cast<long long>(n), static_cast<long long>(vocab),
                    args.out.c_str());
    }
    return ok_status();
}

// The DecisionPins of --record-decisions / --compare-decisions / --pin-decisions, or null.
Result<std::unique_ptr<models::DecisionPins>> open_decisions(const ForwardArgs& args, const ForwardSetup& setup) {
    using Mode = models::DecisionPins::Mode;
    if (!args.record_decisions.empty()) {
        return std::make_unique<models::DecisionPins>(models::DecisionPins::recorder(setup.config));
    }
    const bool pin = !args.pin_decisions.empty();
    if (!pin && args.compare_decisions.empty()) return std::unique_ptr<models::DecisionPins>();
    PENSTOCK_ASSIGN_OR_RETURN(models::DecisionPins d,
                              models::DecisionPins::load(pin ? args.pin_decisions : args.compare_decisions,
                                                         setup.config, pin ? Mode::kPin : Mode::kCompare));
    return std::make_unique<models::DecisionPins>(std::move(d));
}

Status run_forward_single(const ForwardArgs& args, const ForwardSetup& setup_in) {
    const auto t0 = std::chrono::steady_clock::now();
    loader::LoadStats stats;
    PENSTOCK_ASSIGN_OR_RETURN(std::unique_ptr<models::DecisionPins> decisions, open_decisions(args, setup_in));
    ForwardSetup setup = setup_in;
    setup.options.decisions = decisions.get();
    PENSTOCK_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> backend, kernels::make_backend(args.backend, 0));
    PENSTOCK_ASSIGN_OR_RETURN(std::unique_ptr<runtime::ModelRunner> runner,
                              load_runner(args, setup, {0, setup.config.num_hidden_layers}, backend.get(), &stats));
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(args.concurrency), setup.ids);
    PENSTOCK_ASSIGN_OR_RETURN(std::vector<Tensor> logits, runner->prefill_all_logits(prompts, args.chunk_size));
    const auto t2 = std::chrono::steady_clock::now();
    if (decisions) {
        PENSTOCK_RETURN_IF_ERROR(decisions->status());
        if (!args.record_decisions.empty()) PENSTOCK_RETURN_IF_ERROR(decisions->save(args.record_decisions));
        std::printf("decisions %s\n", decisions->summary().c_str());
    }
    return report(args, setup, logits[0], stats, std::chrono::duration<double, std::milli>(t1 - t0).count(),
                  std::chrono::duration<double, std::milli>(t2 - t1).count());
}

#if PENSTOCK_ENABLE_MPI
// --pp N under `mpirun -np N`: each rank loads only its stage's layers; rank 0 drives, the others serve.
// Start-up failures on any rank are agreed on (all-reduce) so that no rank waits on a peer that gave up.
// The two-ended settings of `penstock forward --pp`: stage 0's plan decides chunking, so only what each stage computes
// with or what pairs messages is agreed on.
Status agree_pipeline_settings(parallel::Communicator& pp, const ForwardArgs& args, ForwardSetup* setup) {
    using parallel::Agreement;
    const loader::ModelConfig& c = setup->config;
    std::vector<parallel::TwoEndedSetting> settings = parallel::pipeline_identity_settings(c);
    settings.insert(settings.end(), {
        {"--dtype", static_cast<int64_t>(setup->options.dtype), Agreement::kFatal},
        {"--pp-layer-partition", parallel::fingerprint(args.pp_layer_partition), Agreement::kFatal},
        {"--mla-form", static_cast<int64_t>(setup->options.mla_form), Agreement::kStage0Wins},
        {"--max-kv-chunk-capacity", setup->options.max_kv_chunk_capacity, Agreement::kStage0Wins},
        {"--pp-eager-bank-forward", args.pp_eager_bank_forward ? 1 : 0, Agreement::kStage0Wins},
    });
    PENSTOCK_ASSIGN_OR_RETURN(parallel::ConsensusResult agreed, parallel::agree_settings(pp, settings));
    for (const std::string& w : agreed.warnings) PENSTOCK_LOG_WARN("stage {}: {}", pp.rank(), w);
    setup->options.mla_form = static_cast<models::MlaForm>(agreed.values[4]);
    setup->options.max_kv_chunk_capacity = agreed.values[5];
    setup->eager_bank = agreed.values[6] != 0;
    return ok_status();
}

void print_stage_stats(const std::vector<parallel::StageStats>& stats, double wall_ms, bool eager) {
    std::printf(
        "pipeline stages (eager bank %s): stage, steps, busy ms, busy %%, bubble %%, boundary stall ms, MB sent (bank MB)\n",
        eager ? "on" : "off");
    for (size_t s = 0; s < stats.size(); ++s) {
        const parallel::StageStats& t = stats[s];
        const double busy = wall_ms > 0 ? 100.0 * t.busy_ms / wall_ms : 0.0;
        std::printf("  stage %zu: %lld steps, busy %.1f ms (%.0f%%), bubble %.0f%%, stall %.1f ms, sent %.2f MB (%.2f MB bank)\n", s,
                    static_cast<long long>(t.steps), t.busy_ms, busy, 100.0 - busy,
                    t.stall_ms, static_cast<double>(t.bytes_sent) / 1e6, static_cast<double>(t.bank_bytes_sent) / 1e6);
    }
}

// Collective over `world`: OK only when `local` is OK on every rank, so that no rank goes on to wait for a peer that
// gave up. A local failure comes back as is, a peer's as FailedPrecondition naming `what`.
Status agree_started(parallel::Communicator& world, const Status& local, const std::string& what) {
    Tensor failed = Tensor::from_i32({1}, std::vector<int32_t>{local.ok() ? 0 : 1});
    PENSTOCK_RETURN_IF_ERROR(world.all_reduce(failed, parallel::ReduceOp::kMax));
    if (!local.ok()) return local;
    if (failed.ptr<int32_t>()[0] != 0) return failed_precondition("another rank's " + what + " failed to start");
    return ok_status();
}

Status run_forward_pipeline(const ForwardArgs& args, const ForwardSetup& setup_in, int* argc, char*** argv) {
    PENSTOCK_ASSIGN_OR_RETURN(std::unique_ptr<parallel::MpiSession> mpi, parallel::MpiSession::init(argc, argv));
    PENSTOCK_ASSIGN_OR_RETURN(parallel::ProcessGroups groups, parallel::make_mpi_groups(*mpi, args.parallel));
    // --backend cuda: GPU = this rank's local rank. Device groups (NCCL) over the same ranks carry the tensors that
    // live there (parallel/comm_factory.h); every rank's backend must have started before any NCCL call.
    Result<std::unique_ptr<kernels::Backend>> made =
        kernels::make_backend(args.backend, args.backend == "cuda" ? mpi->local_rank() : 0);
    PENSTOCK_RETURN_IF_ERROR(agree_started(*groups.world, made.status(), "--backend " + args.backend));
    const std::unique_ptr<kernels::Backend> backend = std::move(*made);
    PENSTOCK_ASSIGN_OR_RETURN(parallel::ProcessGroups device_groups, parallel::make_device_groups(groups, *backend));
    const int stage = groups.coords.pp_rank;
    ForwardSetup setup = setup_in;
    // Tensor/expert parallelism inside each stage; every tp rank of a stage runs the same batch. Context parallelism:
    // each cp rank runs its interleaved rows of every batch. Each (cp, tp) coordinate is its own pipeline lane (the
    // pp group of ranks sharing it); every lane's stage 0 derives the same plan from the same arguments.
    setup.options.tp = models::TensorParallel{.tp = groups.tp.get(), .ep_size = args.parallel.ep};
    if (device_groups.tp != nullptr) setup.options.tp.tp = device_groups.tp.get();  // GPU tensors: NCCL, no staging
    PENSTOCK_RETURN_IF_ERROR(agree_pipeline_settings(*groups.pp, args, &setup));
    const auto t0 = std::chrono::steady_clock::now();
    loader::LoadStats stats;
    Result<std::unique_ptr<runtime::ModelRunner>> runner = failed_precondition("not loaded");
    Result<std::vector<int64_t>> counts = stage_partition(args, setup.config);
    if (counts.ok()) {
        const loader::LayerRange range = parallel::partition_ranges(*counts)[static_cast<size_t>(stage)];
        runner = load_runner(args, setup, range, backend.get(), &stats, groups.cp.get());
    }
    const Status local = counts.ok() ? runner.status() : counts.status();
    Tensor failed = Tensor::from_i32({1}, std::vector<int32_t>{local.ok() ? 0 : 1});
    PENSTOCK_RETURN_IF_ERROR(groups.world->all_reduce(failed, parallel::ReduceOp::kMax));
    if (!local.ok()) return local.with_context("stage " + std::to_string(stage));
    if (failed.ptr<int32_t>()[0] != 0) return failed_precondition("another pipeline stage failed to start");
    // What each rank read (SPEC §4: a stage opens only the shards holding its layers and reads only their tensors).
    Tensor mine = Tensor::empty({1, 3}, DType::kI64);
    mine.ptr<int64_t>()[0] = stats.n_tensors;
    mine.ptr<int64_t>()[1] = static_cast<int64_t>(stats.bytes_read);
    mine.ptr<int64_t>()[2] = static_cast<int64_t>(stats.files_opened.size());
    Tensor all_loads = Tensor::empty({groups.world->size(), 3}, DType::kI64);
    PENSTOCK_RETURN_IF_ERROR(groups.world->all_gather(all_loads, mine));
    if (groups.coords.world_rank == 0) {
        for (int r = 0; r < groups.world->size(); ++r) {
            const parallel::RankCoords c = parallel::coords_of(args.parallel, r);
            const int64_t* l = all_loads.ptr<const int64_t>() + 3 * r;
            std::printf("rank %d (stage %d, cp %d, tp %d): loaded %lld tensors, %.2f MB read from %lld file(s)\n", r,
                        c.pp_rank, c.cp_rank, c.tp_rank, static_cast<long long>(l[0]), static_cast<double>(l[1]) / 1e6,
                        static_cast<long long>(l[2]));
        }
    }
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(args.concurrency), setup.ids);
    if (args.parallel.pp == 1) {  // one stage split over tp ranks: every rank runs the same batches
        PENSTOCK_ASSIGN_OR_RETURN(std::vector<Tensor> logits, (*runner)->prefill_all_logits(prompts, args.chunk_size));
        const auto t2 = std::chrono::steady_clock::now();
        if (groups.coords.world_rank != 0) return ok_status();
        return report(args, setup, logits[0], stats, std::chrono::duration<double, std::milli>(t1 - t0).count(),
                      std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    // Plans, logits and stats on the MPI pp group; activations on the device pp group where there is one.
    parallel::PipelineStage pipe(runner->get(), groups.pp.get(),
                                 parallel::StageOptions{.data = device_groups.pp.get(),
                                                        .eager_bank = setup.eager_bank,
                                                        .hidden_dtype = setup.options.dtype});
    if (stage > 0) {
        PENSTOCK_RETURN_IF_ERROR(pipe.serve());
        return pipe.gather_stats().status();
    }
    // SPEC §4: pp_max_micro_batch_size defaults to max(max_running_requests / pp, 1); slots = pp + async depth.
    const int64_t micro_batch = args.pp_max_micro_batch_size > 0
                                    ? args.pp_max_micro_batch_size
                                    : std::max<int64_t>(args.max_running_requests / args.parallel.pp, 1);
    const parallel::MicroBatchOptions mb{.chunk_size = args.chunk_size,
                                         .micro_batch_size = micro_batch,
                                         .slots = args.parallel.pp + args.pp_async_batch_depth};
    // Every position's logits come back (the --out dump and the report); the last stage also samples (greedy) the
    // token after each prompt, as it does when serving.
    auto out = parallel::pipeline_prefill_sampled(runner->get(), &pipe, prompts, mb);
    const Status stopped = pipe.stop();
    if (!out.ok()) return out.status();
    PENSTOCK_RETURN_IF_ERROR(stopped);
    const std::vector<Tensor>* logits = &out->logits;
    const auto t2 = std::chrono::steady_clock::now();
    PENSTOCK_ASSIGN_OR_RETURN(std::vector<parallel::StageStats> stage_stats, pipe.gather_stats());
    if (groups.coords.world_rank != 0) return ok_status();  // other tp lanes of stage 0 computed the same logits
    print_stage_stats(stage_stats, std::chrono::duration<double, std::milli>(t2 - t1).count(), setup.eager_bank);
    PENSTOCK_RETURN_IF_ERROR(report(args, setup, (*logits)[0], stats,
                                    std::chrono::duration<double, std::milli>(t1 - t0).count(),
                                    std::chrono::duration<double, std::milli>(t2 - t1).count()));
    std::printf("last stage sampled (greedy): token %lld (logprob %.4f)\n", static_cast<long long>(out->next[0].token),
                static_cast<double>(out->next[0].logprob));
    std::printf("pp_max_micro_batch_size %lld (running requests), %lld slots (at most %zu in flight), %lld concurrent "
                "prompts: %.1f input tok/s\n",
                static_cast<long long>(mb.micro_batch_size), static_cast<long long>(mb.slots), pipe.max_in_flight(),
                static_cast<long long>(args.concurrency),
                static_cast<double>(args.concurrency * static_cast<int64_t>(setup.ids.size())) /
                    (std::chrono::duration<double>(t2 - t1).count()));
    return ok_status();
}
#endif

Status run_forward(const ForwardArgs& args, int* argc, char*** argv) {
    PENSTOCK_ASSIGN_OR_RETURN(ForwardSetup setup, check_forward_args(args));
    if (args.parallel.world() == 1) return run_forward_single(args, setup);
#if PENSTOCK_ENABLE_MPI
    return run_forward_pipeline(args, setup, argc, argv);
#else
    return unimplemented("--pp > 1 needs MPI, and this build has none");
#endif
}

int fail(const std::string& message) {
    std::fprintf(stderr, "penstock: error: %s\n", message.c_str());
    return kExitError;
}

}  // namespace
}  // namespace penstock

int main(int argc, char** argv) {
    using namespace penstock;
    set_log_level("warn");
    CLI::App app{"Penstock: a prefill-first engine for giant mixture-of-experts LLMs"};
    app.require_subcommand(1);
    std::string log_level = "warn";
    app.add_option("--log-level", log_level, "debug, info, warn, error or off");

    ForwardArgs fwd;
    CLI::App* forward = app.add_subcommand("forward", "run a prompt through a model and write every position's logits");
    forward->add_option("--model", fwd.model, "Hugging Face checkpoint directory (default: the bundled tiny model)");
    forward->add_option("--input-ids", fwd.input_ids, "comma-separated token ids, e.g. 1,2,3")->required();
    forward->add_option("--chunk-size", fwd.chunk_size,
                        "run the prompt as chunks of N tokens through the KV cache (0: one chunk)");
    forward->add_option("--mla-form", fwd.mla_form, "MLA prefill form: mha or absorbed");
    forward->add_option("--backend", fwd.backend, "cpu or cuda");
    forward->add_option("--dtype", fwd.dtype, "float32 (cpu, cuda) or bfloat16 (cuda): activations, KV cache, weights");
    forward->add_option("--max-kv-chunk-capacity", fwd.max_kv_chunk_capacity,
                        "MHA form: most prefix tokens expanded at once, across the batch");
    forward->add_option("--threads", fwd.threads, "CPU threads (0: all cores)");
    forward->add_option("--kv-pages", fwd.n_pages, "KV pages of 64 tokens (0: just enough for the prompt)");
    forward->add_option("--out", fwd.out, "write logits [n_tokens, vocab] f32 to this .safetensors file");
    forward->add_option("--pp", fwd.parallel.pp, "pipeline stages (run under mpirun -np N)");
    forward->add_option("--tp", fwd.parallel.tp, "tensor-parallel ranks per stage");
    forward->add_option("--ep", fwd.parallel.ep, "expert-parallel ranks (divides --tp)");
    forward->add_option("--cp", fwd.parallel.cp, "context-parallel ranks");
    forward->add_option("--concurrency", fwd.concurrency,
                        "run this many copies of the prompt as concurrent requests (throughput; logits of the first)");
    forward->add_option("--pp-max-micro-batch-size", fwd.pp_max_micro_batch_size,
                        "most requests running at once in the pipeline (0: max(max_running_requests / pp, 1))");
    forward->add_option("--max-running-requests", fwd.max_running_requests,
                        "running-request cap the pipeline's default micro-batch cap derives from");
    forward->add_option("--pp-async-batch-depth", fwd.pp_async_batch_depth,
                        "micro-batches in flight beyond pp (slots = pp + depth)");
    forward->add_flag(
        "--pp-eager-bank-forward", fwd.pp_eager_bank_forward,
        "forward inherited AttnRes bank rows before running the stage's layers (two-ended: stage 0 wins)");
    forward->add_option("--pp-layer-partition", fwd.pp_layer_partition,
                        "layers per stage, e.g. 7,5,... (default: balanced by the cost model)");
    forward->add_option("--record-decisions", fwd.record_decisions,
                        "write every MoE expert and DSA top-k choice, by (layer, request, position), to this file");
    forward->add_option("--compare-decisions", fwd.compare_decisions,
                        "count the choices that differ from this recording (flips); change nothing");
    forward->add_option("--pin-decisions", fwd.pin_decisions,
                        "replace every MoE expert and DSA top-k choice with this recording's (routing weights from "
                        "this run's own scores); counts the flips");

    server::ServeArgs serve_args;
    serve_args.model = PENSTOCK_DEFAULT_MODEL_DIR;
    CLI::App* serve = app.add_subcommand("serve", "run the OpenAI-compatible HTTP server (SIGTERM drains, exit 0)");
    server::add_serve_options(serve, &serve_args);

    bench::BenchArgs bench_args;
    CLI::App* bench_cmd = app.add_subcommand("bench", "load generator for a running server (TTFT, ITL, tok/s)");
    bench::add_bench_options(bench_cmd, &bench_args);

    bench::SweepOptions sweep_opts;
    CLI::App* sweep_cmd = app.add_subcommand("sweep", "run a layout x concurrency x repeat matrix (SWEEP.toml)");
    bench::add_sweep_options(sweep_cmd, &sweep_opts);

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        return fail(e.what());
    }
    set_log_level(log_level);
    if (forward->parsed()) {
        const Status st = run_forward(fwd, &argc, &argv);
        if (!st.ok()) return fail(st.to_string());
    }
    if (bench_cmd->parsed()) return bench::run_bench(bench_args);
    if (sweep_cmd->parsed()) return bench::run_sweep(sweep_opts);
    if (serve->parsed()) {
        const Status st = server::run_serve(serve_args);
        if (!st.ok()) return fail(st.to_string());
    }
    return 0;
}
