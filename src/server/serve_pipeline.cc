// `penstock serve --pp P --tp T --cp C` under `mpirun -np P*T*C`: every rank checks the arguments alike, agrees on
// the two-ended settings (over its pipeline lane) and loads its stage's share; start-up failures are agreed on
// (all-reduce) so that no rank waits on one that gave up. Global rank 0 then serves HTTP with the engine driving stage
// 0 through a PipelineExecutor (up to pp + async depth micro-batches in flight; the last stage samples); the other
// ranks run PipelineStage::serve() until the engine, stopping at the end of the drain, sends the stop plan. Every rank
// exits 0.
#include <cstdio>
#include <string>

#include "core/check.h"
#include "core/logging.h"
#include "disagg/stage_sender.h"
#include "kernels/backend.h"
#include "kv_cache/paged_cache.h"
#include "parallel/comm_factory.h"
#include "parallel/consensus.h"
#include "parallel/partition.h"
#include "parallel/pipeline.h"
#include "server/serve_internal.h"
#if PENSTOCK_ENABLE_MPI
#include "engine/lane_executor.h"
#include "engine/pipeline_executor.h"
#include "parallel/mpi_communicator.h"
#endif

namespace penstock::server {

#if PENSTOCK_ENABLE_MPI
namespace {

using json = nlohmann::json;

// Settings both ends of a link must agree on. The KV pool size is stage 0's: every stage admits the same requests.
Status agree_serve_settings(parallel::Communicator& pp, const ServeArgs& args, ServeSetup* setup, bool* eager_bank) {
    using parallel::Agreement;
    const loader::ModelConfig& c = setup->config;
    std::vector<parallel::TwoEndedSetting> settings = parallel::pipeline_identity_settings(c);
    settings.insert(
        settings.end(),
        {
            {"--backend", args.backend == "cuda" ? 1 : 0, Agreement::kFatal},
            {"--dtype", static_cast<int64_t>(setup->model_options.dtype), Agreement::kFatal},
            {"--pp-layer-partition", parallel::fingerprint(args.pp_layer_partition), Agreement::kFatal},
            {"--mla-form", static_cast<int64_t>(setup->model_options.mla_form), Agreement::kStage0Wins},
            {"--max-total-tokens", setup->n_pages, Agreement::kStage0Wins},
            {"--pp-eager-bank-forward", args.pp_eager_bank_forward ? 1 : 0, Agreement::kStage0Wins},
            {"--dsa-fp8-indexer", setup->model_options.dsa_fp8_indexer ? 1 : 0, Agreement::kStage0Wins},
            {"--fp8-attention", setup->model_options.fp8_attention ? 1 : 0, Agreement::kStage0Wins},
            {"--dsa-fp8-accumulate", setup->model_options.dsa_fp8_accumulate ? 1 : 0, Agreement::kStage0Wins},
        });
    PENSTOCK_ASSIGN_OR_RETURN(parallel::ConsensusResult agreed, parallel::agree_settings(pp, settings));
    for (const std::string& w : agreed.warnings) PENSTOCK_LOG_WARN("stage {}: {}", pp.rank(), w);
    setup->model_options.mla_form = static_cast<models::MlaForm>(agreed.values[5]);
    setup->n_pages = agreed.values[6];
    *eager_bank = agreed.values[7] != 0;
    setup->model_options.dsa_fp8_indexer = agreed.values[8] != 0;
    setup->model_options.fp8_attention = agreed.values[9] != 0;
    setup->model_options.dsa_fp8_accumulate = agreed.values[10] != 0;
    return ok_status();
}

// Length-prefixed byte strings between two ranks of the pipeline group (start-up only, before any step).
constexpr int kTagKvBytesLen = 9101, kTagKvBytes = 9102;

Status send_bytes(parallel::Communicator& c, std::vector<uint8_t> bytes, int peer) {
    int64_t n = static_cast<int64_t>(bytes.size());
    const int64_t one = 1;
    PENSTOCK_RETURN_IF_ERROR(
        c.send(TensorView::contiguous(&n, DType::kI64, std::span<const int64_t>(&one, 1)), peer, kTagKvBytesLen));
    return c.send(TensorView::contiguous(bytes.data(), DType::kU8, std::span<const int64_t>(&n, 1)), peer, kTagKvBytes);
}

Result<std::vector<uint8_t>> recv_bytes(parallel::Communicator& c, int peer) {
    int64_t n = 0;
    const int64_t one = 1;
    PENSTOCK_RETURN_IF_ERROR(
        c.recv(TensorView::contiguous(&n, DType::kI64, std::span<const int64_t>(&one, 1)), peer, kTagKvBytesLen));
    if (n < 0 || n > (int64_t{1} << 26)) return data_loss("start-up message of " + std::to_string(n) + " bytes");
    std::vector<uint8_t> bytes(static_cast<size_t>(n));
    PENSTOCK_RETURN_IF_ERROR(
        c.recv(TensorView::contiguous(bytes.data(), DType::kU8, std::span<const int64_t>(&n, 1)), peer, kTagKvBytes));
    return bytes;
}

// A disaggregated prefill under PP, at start-up: every stage's KV buffer shapes go to stage 0 (which checks the whole
// deployment's layout against each decode end's), and stage 0's transfer queue addresses go to every other stage
// (where they report). Stage 0 learns the shapes here and sends the addresses once its engine exists.
Result<disagg::KvLayout> gather_stage_layouts(parallel::Communicator& pp, const disagg::KvLayout& mine) {
    if (pp.rank() != 0) {
        PENSTOCK_RETURN_IF_ERROR(send_bytes(pp, mine.encode_shape(), 0));
        return disagg::KvLayout{};
    }
    disagg::KvLayout others;
    for (int s = 1; s < pp.size(); ++s) {
        PENSTOCK_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, recv_bytes(pp, s));
        PENSTOCK_ASSIGN_OR_RETURN(disagg::KvLayout shape, disagg::KvLayout::decode_shape(bytes));
        for (const disagg::KvBuffer& b : shape.buffers) others.buffers.push_back(b);
    }
    return others;
}

Result<std::vector<std::vector<uint8_t>>> recv_queue_addresses(parallel::Communicator& pp) {
    PENSTOCK_ASSIGN_OR_RETURN(std::vector<uint8_t> count, recv_bytes(pp, 0));
    if (count.size() != 1 || count[0] < 1 || count[0] > 64) return data_loss("stage 0's transfer queue count");
    std::vector<std::vector<uint8_t>> out;
    for (uint8_t q = 0; q < count[0]; ++q) {
        PENSTOCK_ASSIGN_OR_RETURN(std::vector<uint8_t> address, recv_bytes(pp, 0));
        out.push_back(std::move(address));
    }
    return out;
}

Status send_queue_addresses(parallel::Communicator& pp, const std::vector<std::vector<uint8_t>>& addresses) {
    for (int s = 1; s < pp.size(); ++s) {
        PENSTOCK_RETURN_IF_ERROR(send_bytes(pp, {static_cast<uint8_t>(addresses.size())}, s));
        for (const std::vector<uint8_t>& a : addresses) PENSTOCK_RETURN_IF_ERROR(send_bytes(pp, a, s));
    }
    return ok_status();
}

Result<std::vector<int64_t>> stage_partition(const ServeArgs& args, const loader::ModelConfig& config) {
    if (!args.pp_layer_partition.empty()) {
        return parallel::parse_partition(args.pp_layer_partition, args.pp, config.num_hidden_layers);
    }
    const int64_t chunk = args.chunked_prefill_size > 0 ? args.chunked_prefill_size : 8192;
    return parallel::balance_partition(config, args.pp, /*chunk_tokens=*/chunk, /*prefix_tokens=*/0);
}

}  // namespace

Status run_serve_pipeline(const ServeArgs& args, const ServeSetup& setup_in) {
    ServeSetup setup = setup_in;
    PENSTOCK_ASSIGN_OR_RETURN(std::unique_ptr<parallel::MpiSession> mpi,
                              parallel::MpiSession::init(/*argc=*/nullptr, /*argv=*/nullptr));
    PENSTOCK_ASSIGN_OR_RETURN(parallel::ProcessGroups groups, parallel::make_mpi_groups(*mpi, setup.sizes));
    const int stage = groups.coords.pp_rank;
    // --backend cuda: GPU local_rank / --ranks-per-gpu. Device groups (NCCL, unless --device-links host) over the same
    // ranks carry the tensors that live there; every rank's backend must have started before any NCCL call.
    Result<std::unique_ptr<kernels::Backend>> made = std::unique_ptr<kernels::Backend>();
    if (args.backend == "cuda") made = kernels::make_backend(args.backend, mpi->local_rank() / args.ranks_per_gpu);
    PENSTOCK_RETURN_IF_ERROR(parallel::agree_started(*groups.world, made.status(), "--backend " + args.backend));
    const std::unique_ptr<kernels::Backend> backend = std::move(made).value();
    parallel::ProcessGroups device_groups;
    if (backend != nullptr && args.device_links == "nccl") {
        PENSTOCK_ASSIGN_OR_RETURN(device_groups, parallel::make_device_groups(groups, *backend));
    }
    // Tensor/expert parallelism inside every stage; context parallelism splits every chunk's rows over cp ranks.
    // Each (cp, tp) coordinate is a pipeline lane: its own pp group, its own stage messages. GPU tensors reduce over
    // the device tp group where there is one (no staging), else over MPI through host memory.
    setup.model_options.tp = models::TensorParallel{.tp = groups.tp.get(), .ep_size = groups.sizes.ep};
    if (device_groups.tp != nullptr) setup.model_options.tp.tp = device_groups.tp.get();
    bool eager_bank = false;
    PENSTOCK_RETURN_IF_ERROR(agree_serve_settings(*groups.pp, args, &setup, &eager_bank));
    // The pipeline's hidden and bank rows: on the device pp group where there is one (plans, tokens, logits and stats
    // stay on the MPI pp group).
    const parallel::StageOptions stage_options{
        .data = device_groups.pp.get(), .eager_bank = eager_bank, .hidden_dtype = setup.model_options.dtype};

    // Load this stage (and, on stage 0, the tokenizer), then agree that every rank is ready.
    Result<std::vector<int64_t>> counts = stage_partition(args, setup.config);
    Result<std::unique_ptr<runtime::ModelRunner>> runner = failed_precondition("not loaded");
    Result<std::unique_ptr<engine::Tokenizer>> tok = std::unique_ptr<engine::Tokenizer>();
    if (counts.ok()) {
        runner = load_serve_runner(args, setup, parallel::partition_ranges(*counts)[static_cast<size_t>(stage)],
                                   groups.cp.get(), backend.get());
        if (groups.coords.world_rank == 0) tok = load_serve_tokenizer(args);
    }
    const Status local = !counts.ok() ? counts.status() : !runner.ok() ? runner.status() : tok.status();
    Tensor failed = Tensor::from_i32({1}, std::vector<int32_t>{local.ok() ? 0 : 1});
    PENSTOCK_RETURN_IF_ERROR(groups.world->all_reduce(failed, parallel::ReduceOp::kMax));
    if (!local.ok()) return local.with_context("stage " + std::to_string(stage));
    if (failed.ptr<int32_t>()[0] != 0) return failed_precondition("another pipeline stage failed to start");

    // A disaggregated prefill on tp / cp lanes: lane 0's runner caches its layers' whole latent and index keys (tp
    // replicates them, cp all-gathers every chunk's rows), so rank 0 sends the room alone (with --pp, lane 0 of each
    // stage sends that stage's layers). KDA states are split by head over tp ranks: lane 0 holds only its heads', so
    // that is refused rather than sent in part, at any --pp.
    if (setup.disagg.mode == engine::DisaggOptions::Mode::kPrefill && groups.sizes.tp > 1) {
        Status whole = ok_status();
        if (Result<disagg::KvLayout> l = engine::disagg_kv_layout(**runner, "--disaggregation-mode prefill: ");
            !l.ok()) {
            whole = l.status();
        } else {
            for (const disagg::KvBuffer& b : l->buffers) {
                const auto kind = static_cast<kv_cache::BufferKind>(b.key % 8);
                if (kind == kv_cache::BufferKind::kKdaRecurrent || kind == kv_cache::BufferKind::kKdaConv) {
                    whole = unimplemented(
                        "--disaggregation-mode prefill with --tp ranks: this model's KDA states are split by head "
                        "over the tp ranks and each would send its share (not built yet); --pp and --cp are, without "
                        "--tp");
                    break;
                }
            }
        }
        PENSTOCK_RETURN_IF_ERROR(parallel::agree_started(*groups.world, whole, "the KV layout"));
    }

    // A disaggregated prefill: every stage sends its own layers' KV (docs/design/disagg.md "Pipeline stages"). With tp
    // / cp lanes, lane 0 (cp 0, tp 0) of each stage sends for the stage: its cache holds the stage's layers whole, as
    // above. Every rank makes its layout and joins the agreement (a world collective, so all of them, in this order);
    // the shapes and the queue addresses then travel on lane 0's pipeline group only (point to point). The stage
    // commands go down lane 0's pipeline only too (LaneLeaderExecutor forwards them to its own lane).
    const bool staged_kv = setup.disagg.mode == engine::DisaggOptions::Mode::kPrefill && groups.sizes.pp > 1;
    const bool kv_lane = groups.coords.tp_rank == 0 && groups.coords.cp_rank == 0;
    disagg::KvLayout my_layout;
    if (staged_kv) {
        Result<disagg::KvLayout> made_layout =
            engine::disagg_kv_layout(**runner, "--disaggregation-mode prefill, stage " + std::to_string(stage) + ": ");
        PENSTOCK_RETURN_IF_ERROR(parallel::agree_started(*groups.world, made_layout.status(), "the KV layout"));
        my_layout = std::move(made_layout).value();
        if (kv_lane) {
            PENSTOCK_ASSIGN_OR_RETURN(setup.disagg.other_stages, gather_stage_layouts(*groups.pp, my_layout));
        }
    }

    if (stage > 0) {
        std::unique_ptr<disagg::StageKvSender> kv_sender;
        parallel::StageOptions options = stage_options;
        if (staged_kv && kv_lane) {
            PENSTOCK_ASSIGN_OR_RETURN(std::vector<std::vector<uint8_t>> queues, recv_queue_addresses(*groups.pp));
            PENSTOCK_ASSIGN_OR_RETURN(kv_sender,
                                      disagg::StageKvSender::create(setup.disagg.transfer_backend, std::move(my_layout),
                                                                    static_cast<uint32_t>(stage), std::move(queues)));
            runtime::ModelRunner* r = runner->get();
            disagg::StageKvSender* sender = kv_sender.get();
            options.on_command = [r, sender](const parallel::StageCommand& c) {
                // A request this stage does not hold gets no pages: its send fails and says so to stage 0.
                disagg::StageSendJob job{.request_id = c.request_id,
                                         .room = c.room,
                                         .destination = c.payload,
                                         .pages = {},
                                         .slot = r->cache().state_slot(c.request_id).value_or(-1),
                                         .timeout = std::chrono::milliseconds(c.timeout_ms)};
                if (r->tables().contains(c.request_id)) job.pages = r->tables().table(c.request_id).pages;
                sender->submit(std::move(job));
                return ok_status();
            };
            options.before_free = [sender](std::span<const int64_t> ids) { sender->wait_idle(ids); };
        }
        parallel::PipelineStage pipe(runner->get(), groups.pp.get(), options);
        // A stage that cannot run a step stage 0 planned (a failed link, an admission stage 0 made that this stage
        // cannot) leaves the pipeline out of step: abort the whole job rather than leave stage 0 waiting.
        const Status served = pipe.serve();
        PENSTOCK_CHECK(served.ok()) << "pipeline stage " << stage << " failed: " << served.to_string();
        const parallel::StageStats& st = pipe.stats();
        const std::string lane =
            groups.sizes.tp * groups.sizes.cp == 1
                ? std::string()
                : " lane cp " + std::to_string(groups.coords.cp_rank) + " tp " + std::to_string(groups.coords.tp_rank);
        std::printf(
            "penstock serve: stage %d%s stopped after %lld steps (busy %.1f ms, sent %.2f MB); KV pages in use: "
            "%lld of %lld%s\n",
            stage, lane.c_str(), static_cast<long long>(st.steps), st.busy_ms, static_cast<double>(st.bytes_sent) / 1e6,
            static_cast<long long>((*runner)->page_pool().n_used()), static_cast<long long>(setup.n_pages),
            kv_sender == nullptr ? ""
                                 : ("; KV sends " + std::to_string(kv_sender->n_sent()) + " done, " +
                                    std::to_string(kv_sender->n_failed()) + " failed")
                                       .c_str());
        std::fflush(stdout);
        return ok_status();
    }
    // Stage 0's ranks: the engine's executor runs each step through this rank's lane (the pipeline when pp > 1, else
    // the whole model); rank 0 broadcasts every command to the other stage-0 ranks, which follow.
    const bool lanes = groups.sizes.tp * groups.sizes.cp > 1;
    auto lane_inner = [&]() -> std::unique_ptr<engine::StepExecutor> {
        if (groups.sizes.pp > 1) {
            return std::make_unique<engine::PipelineExecutor>(
                runner->get(), groups.pp.get(),
                engine::PipelineExecutorOptions{.eager_bank = eager_bank,
                                                .async_depth = args.pp_async_batch_depth,
                                                .slots_override = args.test_pp_slots,
                                                .data = stage_options.data,
                                                .hidden_dtype = stage_options.hidden_dtype});
        }
        return std::make_unique<engine::LocalExecutor>(runner->get());
    };
    if (groups.coords.world_rank != 0) {
        std::unique_ptr<engine::StepExecutor> inner = lane_inner();
        const Status followed = engine::run_lane_follower(runner->get(), inner.get(), groups.cp.get(), groups.tp.get());
        PENSTOCK_CHECK(followed.ok()) << "stage-0 lane (cp " << groups.coords.cp_rank << ", tp "
                                      << groups.coords.tp_rank << ") failed: " << followed.to_string();
        std::printf("penstock serve: stage 0 lane cp %d tp %d stopped; KV pages in use: %lld of %lld\n",
                    groups.coords.cp_rank, groups.coords.tp_rank,
                    static_cast<long long>((*runner)->page_pool().n_used()), static_cast<long long>(setup.n_pages));
        std::fflush(stdout);
        return ok_status();
    }
    json partition = json::array(), layers = json::array();
    for (const loader::LayerRange& r : parallel::partition_ranges(*counts)) {
        partition.push_back(r.end - r.begin);
        layers.push_back({r.begin, r.end});
    }
    // Sizes from the parsed layout (every rank's communicators were built from it).
    const json parallel_info = {
        {"pp_size", groups.sizes.pp},
        {"tp_size", groups.sizes.tp},
        {"ep_size", groups.sizes.ep},
        {"cp_size", groups.sizes.cp},
        {"pp_layer_partition", partition},
        {"pp_stage_layers", layers},
        {"pp_eager_bank_forward", eager_bank},
        {"pp_async_batch_depth", args.pp_async_batch_depth},
        {"pp_micro_batch_slots",
         args.test_pp_slots > 0 ? args.test_pp_slots : groups.sizes.pp + args.pp_async_batch_depth}};
    std::unique_ptr<engine::StepExecutor> executor = lane_inner();
    if (lanes) {
        executor = std::make_unique<engine::LaneLeaderExecutor>(std::move(executor), groups.cp.get(), groups.tp.get());
    }
    // Every other rank is in its loop by now, waiting for this one's commands or plans. Once the engine exists (and
    // has told lane 0's stages its queues) it starts, and however serving ends, its thread's end stops every other
    // rank (the executor's stop). A failure before that (the engine refused its options, the addresses not sent)
    // cannot be agreed on any more, and returning would leave the others waiting (and this rank in MPI_Finalize, its
    // message unprinted): it ends the whole job instead, naming why.
    bool engine_made = false;
    const auto engine_created = [&](engine::Engine& e) -> Status {
        if (staged_kv) PENSTOCK_RETURN_IF_ERROR(send_queue_addresses(*groups.pp, e.transfer_queue_addresses()));
        engine_made = true;
        return ok_status();
    };
    const Status served = serve_http(args, setup, std::move(runner).value(), std::move(executor),
                                     std::move(tok).value(), parallel_info, engine_created);
    PENSTOCK_CHECK(served.ok() || engine_made)
        << "penstock serve (rank 0, after every other rank started): " << served.to_string();
    return served;
}
#else
Status run_serve_pipeline(const ServeArgs&, const ServeSetup&) {
    return unimplemented("--pp > 1 needs MPI, and this build has none");
}
#endif

}  // namespace penstock::server
