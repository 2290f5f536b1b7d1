// `penstock serve` start-up and shutdown.
#include "server/serve_command.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/logging.h"
#include "engine/engine.h"
#include "engine/tokenizer.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "models/model.h"
#include "runtime/model_runner.h"
#include "scheduler/cost_model.h"
#include "server/reasoning_parser.h"
#include "server/serve_internal.h"
#include "server/server.h"
#include "server/tool_parser.h"
#include "server/warmup.h"

namespace penstock::server {

namespace fs = std::filesystem;
using json = nlohmann::json;

void add_serve_options(CLI::App* cmd, ServeArgs* a) {
    ServerConfig& s = a->server;
    cmd->add_option("--model,--model-path", a->model, "Hugging Face checkpoint directory (default: the bundled model)");
    cmd->add_option(
        "--load-format", a->load_format,
        "auto (read the checkpoint) or dummy (seeded random weights at the config's dimensions; --model may "
        "be a config .json file)");
    cmd->add_option("--dummy-seed", a->dummy_seed, "seed of --load-format dummy weights (non-zero)");
    cmd->add_option("--num-layers", a->num_layers,
                    "keep the first N decoder layers of the config (partial depth; needs --load-format dummy)");
    cmd->add_option("--host", s.host, "address to bind (default 127.0.0.1)");
    cmd->add_option("--port", s.port, "port (0: ephemeral, printed at start)");
    cmd->add_option("--served-model-name", s.served_model_name, "model id reported by /v1/models");
    cmd->add_option("--chunked-prefill-size", a->chunked_prefill_size, "prefill tokens per step (<= 0: no chunking)");
    cmd->add_option("--max-prefill-tokens", a->max_prefill_tokens, "tokens per step (prefill + decode)");
    cmd->add_option("--max-running-requests", a->max_running_requests, "admitted requests at once");
    cmd->add_option("--max-queue-size", a->max_queue_size, "waiting requests before 429");
    cmd->add_option("--context-length", a->context_length, "prompt + max_new_tokens limit (0: the model's)");
    cmd->add_option("--max-total-tokens", a->max_total_tokens, "KV cache size in tokens (64-token pages)");
    cmd->add_flag("--enable-dynamic-chunking", a->enable_dynamic_chunking, "chunk sizes from the cost model");
    cmd->add_option("--dynamic-chunking-budget-tokens", a->dynamic_chunking_budget_tokens,
                    "cost budget as a chunk length at prefix 0 (0: chunked-prefill-size)");
    cmd->add_option("--schedule-policy", a->schedule_policy, "fcfs or lpm");
    cmd->add_option("--mla-form", a->mla_form, "mha or absorbed");
    cmd->add_flag("--fp8-attention", a->fp8_attention,
                  "MLA MHA form (DeepSeek-V3, Kimi K3's MLA layers): FP8 attention (e4m3 q per row, k per 128-key "
                  "block, v per tensor, dynamic scales; on Hopper Penstock's FP8 wgmma kernel); lossy: a few percent "
                  "relative error on the attention output (two-ended: stage 0 wins)");
    cmd->add_flag("--dsa-fp8-indexer", a->dsa_fp8_indexer,
                  "DSA families (GLM-5.3, DeepSeek-V3.2): the FP8 indexer (Hadamard-rotated e4m3 q and keys, 132-byte "
                  "index-K rows, as DeepSeek-V3.2's inference) instead of f32 keys as transformers computes "
                  "(two-ended: stage 0 wins)");
    cmd->add_flag("--dsa-fp8-accumulate", a->dsa_fp8_accumulate,
                  "with --dsa-fp8-indexer: the indexer logits may sum each head's q.k inside the fp8 tensor-core "
                  "instruction (Hopper's reduced-precision fp8 accumulation, as DeepSeek-V3.2's fp8 indexer kernels; "
                  "about twice the exact path's rate on the GPU; no effect on the CPU) (two-ended: stage 0 wins)");
    cmd->add_option(
        "--fp8-weights", a->fp8_weights,
        "block-FP8 checkpoints: native (e4m3 + block scales, FP8 GEMMs), dequant (dequantised on load) or "
        "auto (native on cuda, dequant on cpu); with --load-format dummy, native generates block-FP8 weights for any "
        "config");
    cmd->add_option("--backend", a->backend,
                    "cpu or cuda (cuda: GPU 0; under mpirun GPU local_rank / --ranks-per-gpu)");
    cmd->add_option("--device-links", a->device_links,
                    "--backend cuda under mpirun: nccl (device-to-device) or host (staged through MPI)");
    cmd->add_option("--ranks-per-gpu", a->ranks_per_gpu,
                    "--backend cuda under mpirun: ranks sharing one GPU (> 1 needs --device-links host)");
    cmd->add_option("--dtype", a->dtype, "float32 (cpu, cuda) or bfloat16 (cuda): activations, KV cache, weights");
    cmd->add_option("--threads", a->threads, "CPU threads for the reference kernels (0: all cores)");
    cmd->add_option("--random-seed", a->random_seed, "seed for requests that bring none");
    cmd->add_option("--idle-invariant-check", a->idle_invariant_check,
                    "when the engine becomes idle, check the KV page accounting: off | warn | abort")
        ->check(CLI::IsMember({"off", "warn", "abort"}));
    cmd->add_option("--warmup-lengths", a->warmup_lengths,
                    "before reporting ready, one prefill of each length, e.g. 512,2048,8192 (default: none)");
    cmd->add_option("--warmup-concurrency", a->warmup_concurrency, "warm-up requests at once")
        ->check(CLI::Range(int64_t{1}, int64_t{1024}));
    cmd->add_option("--warmup-timeout-s", a->warmup_timeout_s, "the warm-up must finish within (else start fails)")
        ->check(CLI::PositiveNumber);
    cmd->add_flag("--skip-tokenizer-init", s.skip_tokenizer_init, "serve token ids only (no tokenizer)");
    cmd->add_option("--api-key", s.api_key, "require 'Authorization: Bearer KEY' on inference and admin routes");
    cmd->add_option("--request-timeout-s", s.request_timeout_s, "per-request deadline (0: none)");
    cmd->add_option("--max-body-bytes", s.max_body_bytes, "request body limit (413 beyond)");
    cmd->add_option("--max-header-bytes", s.max_header_bytes, "request header limit (431 beyond)");
    cmd->add_option("--header-timeout-s", s.header_timeout_s, "request line + headers deadline (408)");
    cmd->add_option("--body-timeout-s", s.body_timeout_s, "request body deadline (408)");
    cmd->add_option("--write-timeout-s", s.write_timeout_s, "response write deadline");
    cmd->add_option("--keep-alive-timeout-s", s.keep_alive_timeout_s, "idle keep-alive connection lifetime");
    cmd->add_option("--max-connections", s.max_connections, "open connections (503 beyond)");
    cmd->add_option("--max-new-tokens-limit", s.max_new_tokens_limit, "largest max_new_tokens (0: context length)");
    cmd->add_option("--max-stop-strings", s.max_stop_strings, "stop strings per request");
    cmd->add_option("--max-stop-string-bytes", s.max_stop_string_bytes, "bytes per stop string");
    cmd->add_option("--max-tools", s.max_tools, "chat: function tools per request (400 beyond)")
        ->check(CLI::Range(int64_t{1}, int64_t{4096}));
    cmd->add_option("--tool-call-parser", s.tool_call_parser,
                    "chat tool calls: auto (the chat template's format), deepseekv3, deepseekv31, kimi_k2, glm45, "
                    "qwen25, none")
        ->check([](const std::string& v) {
            if (v == "auto") return std::string();
            Result<ToolCallFormat> f = tool_call_format_from_name(v);
            return f.ok() ? std::string() : f.status().message();
        });
    cmd->add_option("--reasoning-parser", s.reasoning_parser,
                    "chat: reasoning_content from deepseek-r1, deepseek-v3, qwen3, qwen3-thinking, glm45, kimi, "
                    "kimi_k2 outputs (none: off)")
        ->check([](const std::string& v) {
            Result<ReasoningFormat> f = reasoning_format_from_name(v);
            return f.ok() ? std::string() : f.status().message();
        });
    cmd->add_option("--max-choices", s.max_choices, "OpenAI routes: prompts x n per request (400 beyond)")
        ->check(CLI::Range(int64_t{1}, int64_t{4096}));
    cmd->add_option("--drain-timeout-s", s.drain_timeout_s, "SIGTERM: wait this long for in-flight requests");
    cmd->add_option("--watchdog-timeout", s.watchdog_timeout_s, "/health is 503 when the engine loop stalls longer");
    cmd->add_option("--retry-after-s", s.retry_after_s, "Retry-After of a 429");
    cmd->add_option("--test-step-delay-ms", a->test_step_delay_ms)->group("");
    cmd->add_option("--test-pp-slots", a->test_pp_slots)->group("");
    cmd->add_option("--pp-size,--pp", a->pp, "pipeline stages (run under mpirun -np N)");
    cmd->add_option("--pp-layer-partition", a->pp_layer_partition,
                    "layers per stage, e.g. 2,1,1 (default: balanced by the cost model)");
    cmd->add_flag("--pp-eager-bank-forward", a->pp_eager_bank_forward,
                  "forward inherited AttnRes bank rows before a stage's layers (two-ended: stage 0 wins)");
    cmd->add_option("--pp-max-micro-batch-size", a->pp_max_micro_batch_size,
                    "requests per pipeline micro-batch (0: max(max-running-requests / pp, 1))");
    cmd->add_option("--pp-async-batch-depth", a->pp_async_batch_depth,
                    "pipeline micro-batches in flight beyond pp (slots = pp + depth)");
    cmd->add_option("--tp-size,--tp", a->tp, "tensor-parallel ranks per stage");
    cmd->add_option("--ep-size,--ep", a->ep, "expert-parallel ranks (1 in serve for now)");
    cmd->add_option("--cp-size,--cp", a->cp, "context-parallel ranks (interleave split of every chunk)");
    cmd->add_option("--disaggregation-mode", a->disaggregation_mode,
                    "null | prefill | decode: this server's end of a prefill/decode pair (bootstrap_room requests)")
        ->capture_default_str();
    cmd->add_option("--disaggregation-transfer-backend", a->disaggregation_transfer_backend,
                    "the KV transfer engine (ucx)")
        ->capture_default_str();
    cmd->add_option("--disaggregation-transfer-queues", a->disaggregation_transfer_queues,
                    "prefill: KV transfer queues (threads, each with its own engine); a room goes to hash(room) % n")
        ->capture_default_str();
    cmd->add_flag("--disaggregation-lazy-allocation", a->disaggregation_lazy_allocation,
                  "decode: reserve a room's pages only when the prefill server asks for them (both ends must agree)");
    cmd->add_option("--disaggregation-bootstrap-timeout-ms", a->disaggregation_bootstrap_timeout_ms,
                    "a room's bootstrap deadline (prefill: waiting for the decode server's destination)")
        ->capture_default_str();
    cmd->add_option("--disaggregation-waiting-timeout-ms", a->disaggregation_waiting_timeout_ms,
                    "decode: how long a room's reserved pages wait for the prefill server's KV")
        ->capture_default_str();
    cmd->add_option("--disaggregation-transfer-timeout-ms", a->disaggregation_transfer_timeout_ms,
                    "the deadline of one room's page transfer")
        ->capture_default_str();
}

namespace {

// The one piece of global mutable state: a POSIX signal handler can only reach a sig_atomic_t flag.
volatile std::sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int) { g_stop_signal = 1; }

// EOS ids: generation_config.json, else config.json, else the tokenizer's eos token.
std::vector<int32_t> eos_ids(const fs::path& dir, const engine::Tokenizer* tok) {
    for (const char* file : {"generation_config.json", "config.json"}) {
        Result<std::string> text = loader::read_text_file(dir / file);
        if (!text.ok()) continue;
        const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
        if (!j.is_object() || !j.contains("eos_token_id")) continue;
        const json& e = j["eos_token_id"];
        std::vector<int32_t> ids;
        if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
        if (e.is_array()) {
            for (const json& x : e) {
                if (x.is_number_integer()) ids.push_back(x.get<int32_t>());
            }
        }
        if (!ids.empty()) return ids;
    }
    if (tok != nullptr && tok->config().eos_id) return {*tok->config().eos_id};
    return {};
}

Result<scheduler::SchedulerConfig> scheduler_config(const ServeArgs& a) {
    scheduler::SchedulerConfig c;
    c.chunked_prefill_size = a.chunked_prefill_size;
    c.max_prefill_tokens = a.max_prefill_tokens;
    c.max_running_requests = a.max_running_requests;
    c.max_queue_size = a.max_queue_size;
    c.max_context_len = a.context_length;
    c.enable_dynamic_chunking = a.enable_dynamic_chunking;
    c.pp_size = a.pp;
    if (a.pp_max_micro_batch_size < 0) return invalid_argument("--pp-max-micro-batch-size must be >= 0");
    if (a.pp_max_micro_batch_size > 0) c.pp_max_micro_batch_size = a.pp_max_micro_batch_size;
    if (a.pp_async_batch_depth < 0 || a.pp_async_batch_depth > 64) {
        return invalid_argument("--pp-async-batch-depth must be in [0, 64]");
    }
    if (a.dynamic_chunking_budget_tokens > 0) c.dynamic_chunking_budget_tokens = a.dynamic_chunking_budget_tokens;
    if (a.schedule_policy == "fcfs") {
        c.policy = scheduler::Policy::kFcfs;
    } else if (a.schedule_policy == "lpm") {
        c.policy = scheduler::Policy::kLongestPrefix;
    } else {
        return invalid_argument("--schedule-policy must be fcfs or lpm");
    }
    PENSTOCK_RETURN_IF_ERROR(scheduler::validate(c));
    return c;
}

}  // namespace

Result<ServeSetup> check_serve_args(const ServeArgs& args) {
    ServeSetup setup;
    setup.sizes = parallel::ParallelSizes{.pp = args.pp, .tp = args.tp, .ep = args.ep, .cp = args.cp};
    PENSTOCK_RETURN_IF_ERROR(parallel::validate_sizes(setup.sizes, 0));
    if (!args.pp_layer_partition.empty() && args.pp == 1) {
        return invalid_argument("--pp-layer-partition needs --pp > 1");
    }
    if (args.max_total_tokens < kv_cache::kPageSize) return invalid_argument("--max-total-tokens must be >= 64");
    if (args.backend != "cpu" && args.backend != "cuda") {
        return invalid_argument("--backend must be cpu or cuda, got '" + args.backend + "'");
    }
    if (args.device_links != "nccl" && args.device_links != "host") {
        return invalid_argument("--device-links must be nccl or host, got '" + args.device_links + "'");
    }
    if (args.ranks_per_gpu < 1) return invalid_argument("--ranks-per-gpu must be >= 1");
    if (args.ranks_per_gpu > 1 && args.device_links != "host") {
        return invalid_argument("--ranks-per-gpu > 1 needs --device-links host (NCCL refuses two ranks on one GPU)");
    }
    if (args.dtype == "float32") {
        setup.model_options.dtype = DType::kF32;
    } else if (args.dtype == "bfloat16") {
        if (args.backend != "cuda") return invalid_argument("--dtype bfloat16 needs --backend cuda");
        setup.model_options.dtype = DType::kBF16;
    } else {
        return invalid_argument("--dtype must be float32 or bfloat16, got '" + args.dtype + "'");
    }
    PENSTOCK_ASSIGN_OR_RETURN(setup.scheduler, scheduler_config(args));
    PENSTOCK_ASSIGN_OR_RETURN(setup.warmup.lengths, parse_warmup_lengths(args.warmup_lengths));
    setup.warmup.concurrency = args.warmup_concurrency;
    setup.warmup.timeout_s = args.warmup_timeout_s;
    if (args.load_format != "auto" && args.load_format != "dummy") {
        return invalid_argument("--load-format must be auto or dummy, got '" + args.load_format + "'");
    }
    const bool dummy = args.load_format == "dummy";
    if (dummy && args.dummy_seed == 0) return invalid_argument("--dummy-seed must be non-zero");
    if (dummy) setup.model_options.dummy_weights_seed = args.dummy_seed;
    PENSTOCK_ASSIGN_OR_RETURN(setup.config, dummy ? loader::load_model_config_dir_or_file(fs::path(args.model))
                                                  : loader::load_model_config(fs::path(args.model)));
    if (!models::is_supported_model_type(setup.config.model_type)) {
        return unimplemented("model_type '" + setup.config.model_type + "' is not supported yet");
    }
    if (args.num_layers != 0) {
        if (!dummy) return invalid_argument("--num-layers needs --load-format dummy");
        PENSTOCK_ASSIGN_OR_RETURN(setup.config, loader::with_num_layers(setup.config, args.num_layers));
    }
    PENSTOCK_ASSIGN_OR_RETURN(setup.model_options.fp8_weights, models::parse_fp8_weights(args.fp8_weights));
    PENSTOCK_RETURN_IF_ERROR(models::resolve_fp8_weights(setup.config, setup.model_options).status());
    if (args.mla_form == "absorbed") {
        setup.model_options.mla_form = models::MlaForm::kAbsorbed;
    } else if (args.mla_form != "mha") {
        return invalid_argument("--mla-form must be mha or absorbed");
    }
    setup.model_options.dsa_fp8_indexer = args.dsa_fp8_indexer;
    setup.model_options.dsa_fp8_accumulate = args.dsa_fp8_accumulate;
    PENSTOCK_RETURN_IF_ERROR(models::check_option_combinations(setup.model_options));
    setup.model_options.fp8_attention = args.fp8_attention;
    if (args.backend == "cuda" && !args.dsa_fp8_indexer && setup.config.raw.contains("index_topk")) {
        std::fprintf(stderr,
                     "penstock serve: note: DSA indexer with f32 keys (transformers' computation, three f16 "
                     "products per dot: ~8 ms of logits per full-indexer GLM-5.3 layer at a 16K chunk on an H200); "
                     "--dsa-fp8-indexer runs FP8 keys (~2 ms; docs/perf/2026-12-05-s36.md)\n");
    }
    setup.n_pages = kv_cache::pages_for_tokens(args.max_total_tokens);
    if (args.disaggregation_mode == "prefill") {
        setup.disagg.mode = engine::DisaggOptions::Mode::kPrefill;
    } else if (args.disaggregation_mode == "decode") {
        setup.disagg.mode = engine::DisaggOptions::Mode::kDecode;
    } else if (args.disaggregation_mode != "null") {
        return invalid_argument("--disaggregation-mode must be null, prefill or decode, got '" +
                                args.disaggregation_mode + "'");
    }
    setup.disagg.transfer_backend = args.disaggregation_transfer_backend;
    setup.disagg.transfer_queues = args.disaggregation_transfer_queues;
    // Checked here too (the engine checks it), so that every rank of a multi-rank server refuses it alike at start.
    if (setup.disagg.mode != engine::DisaggOptions::Mode::kNone &&
        (setup.disagg.transfer_queues < 1 || setup.disagg.transfer_queues > 64)) {
        return invalid_argument("--disaggregation-transfer-queues must be in [1, 64]");
    }
    setup.disagg.lazy_allocation = args.disaggregation_lazy_allocation;
    setup.disagg.timeouts = {.bootstrap = std::chrono::milliseconds(args.disaggregation_bootstrap_timeout_ms),
                             .waiting = std::chrono::milliseconds(args.disaggregation_waiting_timeout_ms),
                             .transfer = std::chrono::milliseconds(args.disaggregation_transfer_timeout_ms)};
    PENSTOCK_RETURN_IF_ERROR(disagg::validate(setup.disagg.timeouts));
    setup.disagg.pipeline_stages = setup.sizes.pp;
    if (setup.disagg.mode == engine::DisaggOptions::Mode::kDecode && setup.sizes.world() > 1) {
        return unimplemented(
            "--disaggregation-mode decode runs as one rank (a prefill server may run --pp stages; "
            "docs/design/disagg.md)");
    }
    return setup;
}

Result<std::unique_ptr<runtime::ModelRunner>> load_serve_runner(const ServeArgs& args, const ServeSetup& setup,
                                                                const loader::LayerRange& range,
                                                                parallel::Communicator* cp,
                                                                const kernels::Backend* backend) {
    loader::Checkpoint ckpt = loader::Checkpoint::none();  // --load-format dummy: the model generates its weights
    if (args.load_format != "dummy") {
        PENSTOCK_ASSIGN_OR_RETURN(ckpt, loader::Checkpoint::open(fs::path(args.model)));
    }
    loader::LoadStats stats;
    models::ModelOptions options = setup.model_options;
    if (backend != nullptr) options.placement = backend->context(nullptr);
    PENSTOCK_ASSIGN_OR_RETURN(std::unique_ptr<models::Model> model,
                              models::load_model(setup.config, ckpt, range, options, &stats));
    if (stats.n_fp8_block + stats.n_fp8_scaled + stats.n_mxfp4 > 0) {
        std::fprintf(stderr,
                     "penstock serve: note: layers [%lld, %lld): %lld of %lld weight tensors dequantised on load "
                     "(block FP8 %lld, compressed-tensors FP8 %lld, MXFP4 %lld)\n",
                     static_cast<long long>(range.begin), static_cast<long long>(range.end),
                     static_cast<long long>(stats.n_fp8_block + stats.n_fp8_scaled + stats.n_mxfp4),
                     static_cast<long long>(stats.n_tensors), static_cast<long long>(stats.n_fp8_block),
                     static_cast<long long>(stats.n_fp8_scaled), static_cast<long long>(stats.n_mxfp4));
    }
    if (stats.n_mxfp4_fp8 > 0) {
        std::fprintf(stderr,
                     "penstock serve: note: layers [%lld, %lld): %lld MXFP4 weight tensors re-encoded as block FP8 "
                     "for the FP8 kernels (%lld elements rounded)\n",
                     static_cast<long long>(range.begin), static_cast<long long>(range.end),
                     static_cast<long long>(stats.n_mxfp4_fp8), static_cast<long long>(stats.n_mxfp4_fp8_inexact));
    }
    return std::make_unique<runtime::ModelRunner>(
        std::move(model),
        runtime::RunnerOptions{.n_pages = setup.n_pages, .n_threads = args.threads, .backend = backend, .cp = cp});
}

Result<std::unique_ptr<engine::Tokenizer>> load_serve_tokenizer(const ServeArgs& args) {
    if (args.server.skip_tokenizer_init) return std::unique_ptr<engine::Tokenizer>();
    Result<std::unique_ptr<engine::Tokenizer>> t = engine::Tokenizer::from_dir(fs::path(args.model));
    if (!t.ok()) return t.status().with_context("loading the tokenizer (serve ids only with --skip-tokenizer-init)");
    return t;
}

bool stop_requested() { return g_stop_signal != 0; }

void install_stop_signal_handlers() {
    // SIGTERM/SIGINT set a flag that a watcher thread turns into a drain (threads that existed before this point,
    // such as OpenBLAS's pool, may take the signal, so a handler is installed rather than a blocked mask).
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
}

Status serve_http(const ServeArgs& args, const ServeSetup& setup, std::unique_ptr<runtime::ModelRunner> runner,
                  std::unique_ptr<engine::StepExecutor> executor, std::unique_ptr<engine::Tokenizer> tok,
                  const json& parallel_info, const std::function<Status(engine::Engine&)>& engine_created) {
    const fs::path dir(args.model);
    const loader::ModelConfig& mc = setup.config;
    const scheduler::SchedulerConfig& sc = setup.scheduler;
    engine::EngineOptions eo;
    eo.scheduler = sc;
    eo.eos_token_ids = eos_ids(dir, tok.get());
    eo.seed = args.random_seed;
    eo.idle_invariant_check = args.idle_invariant_check == "off"     ? engine::InvariantCheck::kOff
                              : args.idle_invariant_check == "abort" ? engine::InvariantCheck::kAbort
                                                                     : engine::InvariantCheck::kWarn;
    eo.max_stop_strings = args.server.max_stop_strings;
    eo.max_stop_string_bytes = args.server.max_stop_string_bytes;
    if (sc.enable_dynamic_chunking) {
        PENSTOCK_ASSIGN_OR_RETURN(scheduler::ChunkCostModel cm, scheduler::ChunkCostModel::from_model(mc, {}));
        eo.cost_model = cm;
    }
    eo.disagg = setup.disagg;
    std::shared_ptr<DisaggBootstrap> bootstrap;
    if (eo.disagg.mode == engine::DisaggOptions::Mode::kPrefill) {
        bootstrap = std::make_shared<DisaggBootstrap>(eo.disagg.timeouts.bootstrap + eo.disagg.timeouts.waiting);
        eo.disagg.resolve_destination = [bootstrap, lazy = eo.disagg.lazy_allocation](
                                            uint64_t room, engine::Clock::time_point deadline) {
            return bootstrap->resolve(room, deadline, lazy);
        };
    }
    if (args.test_step_delay_ms > 0) {
        const int64_t ms = args.test_step_delay_ms;
        eo.step_fault = [ms](const scheduler::BatchPlan&) {
            std::this_thread::sleep_for(std::chrono::milliseconds(ms));
            return ok_status();
        };
    }
    for (const std::string& msg : scheduler::describe_ineffective_options(sc)) {
        std::fprintf(stderr, "penstock serve: note: %s\n", msg.c_str());
    }
    if (args.pp_async_batch_depth > 0 && args.pp == 1) {
        std::fprintf(stderr,
                     "penstock serve: note: --pp-async-batch-depth has no effect with --pp 1 (one step at a "
                     "time)\n");
    }
    PENSTOCK_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                              engine::Engine::create(std::move(runner), std::move(executor), tok.get(), std::move(eo)));
    if (engine_created) PENSTOCK_RETURN_IF_ERROR(engine_created(*eng));
    eng->start();

    ServerConfig cfg = args.server;
    if (cfg.served_model_name.empty()) cfg.served_model_name = fs::absolute(dir).lexically_normal().filename().string();
    if (cfg.served_model_name.empty()) cfg.served_model_name = "penstock";
    const Result<models::Fp8Weights> fp8_mode = models::resolve_fp8_weights(mc, setup.model_options);
    const std::string fp8_weights_info = fp8_mode.ok() ? models::fp8_weights_name(*fp8_mode) : "?";
    json info = {{"model_path", args.model},
                 {"model_type", mc.model_type},
                 {"vocab_size", mc.vocab_size},
                 {"num_hidden_layers", mc.num_hidden_layers},
                 {"mla_form", args.mla_form},
                 {"dsa_fp8_indexer", args.dsa_fp8_indexer},
                 {"dsa_fp8_accumulate", args.dsa_fp8_accumulate},
                 {"fp8_attention", args.fp8_attention},
                 {"fp8_weights", fp8_weights_info},
                 {"load_format", args.load_format},
                 {"num_layers_override", args.num_layers > 0 ? json(args.num_layers) : json(nullptr)},
                 {"backend", args.backend},
                 {"dtype", args.dtype},
                 {"threads", args.threads},
                 {"max_total_tokens", setup.n_pages * kv_cache::kPageSize},
                 {"random_seed", args.random_seed},
                 {"idle_invariant_check", args.idle_invariant_check},
                 {"eos_token_ids", eng->options().eos_token_ids},
                 {"disaggregation_mode", args.disaggregation_mode},
                 {"disaggregation_transfer_backend", args.disaggregation_transfer_backend},
                 {"disaggregation_transfer_queues", args.disaggregation_transfer_queues},
                 {"disaggregation_lazy_allocation", args.disaggregation_lazy_allocation},
                 {"disaggregation_timeouts_ms",
                  {{"bootstrap", args.disaggregation_bootstrap_timeout_ms},
                   {"waiting", args.disaggregation_waiting_timeout_ms},
                   {"transfer", args.disaggregation_transfer_timeout_ms}}}};
    info.update(parallel_info);
    // Warm-up before the port opens: until it is done no client can connect, so none meets a cold start.
    PENSTOCK_ASSIGN_OR_RETURN(const WarmupResult warm, run_warmup(*eng, setup.warmup, mc.vocab_size));
    info["warmup"] = {{"lengths", setup.warmup.lengths},
                      {"concurrency", setup.warmup.concurrency},
                      {"timeout_s", setup.warmup.timeout_s},
                      {"seconds", warm.seconds},
                      {"total_s", warm.total_s}};
    if (!setup.warmup.lengths.empty()) {
        std::string each;
        for (size_t i = 0; i < warm.seconds.size(); ++i) {
            each += (i ? ", " : "") + std::to_string(setup.warmup.lengths[i]) + " tokens " +
                    std::to_string(warm.seconds[i]).substr(0, 6) + " s";
        }
        std::printf("penstock serve: warm-up done in %.3f s (%s)\n", warm.total_s, each.c_str());
        std::fflush(stdout);
    }
    Server server(eng.get(), cfg, info.dump(), bootstrap);
    PENSTOCK_ASSIGN_OR_RETURN(const int port, server.listen());
    std::atomic<bool> done{false};
    std::thread signals([&] {
        while (!done) {
            if (g_stop_signal != 0) server.request_drain();
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    });
    std::printf("penstock serve: listening on http://%s:%d (model %s, %lld KV pages, tokenizer %s, %s, pid %d)\n",
                cfg.host.c_str(), port, cfg.served_model_name.c_str(), static_cast<long long>(setup.n_pages),
                tok ? "loaded" : "skipped", setup.sizes.to_string().c_str(), static_cast<int>(getpid()));
    std::fflush(stdout);
    server.run();
    done = true;
    signals.join();
    eng->stop();
    std::printf("penstock serve: drained, exiting (stage 0: KV pages in use: %lld of %lld)\n",
                static_cast<long long>(eng->metrics().kv_pages_used), static_cast<long long>(setup.n_pages));
    std::fflush(stdout);
    return ok_status();
}

Status run_serve(const ServeArgs& args) {
    install_stop_signal_handlers();
    PENSTOCK_ASSIGN_OR_RETURN(ServeSetup setup, check_serve_args(args));
    if (setup.sizes.world() > 1) return run_serve_pipeline(args, setup);
    // Several ranks launched for one: each would serve on its own. (Open MPI and PMI launchers set these.)
    for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
        const char* n = std::getenv(var);
        if (n != nullptr && std::atoi(n) > 1) {
            return invalid_argument(std::string("launched as one of ") + n + " ranks (" + var +
                                    "), but --pp/--tp/--cp describe one: pass --pp " + n);
        }
    }
    // --backend cuda: GPU 0 holds the model and the KV cache; the backend outlives the engine and the runner (both end
    // inside serve_http). The CPU backend is the host (no backend object), as before.
    std::unique_ptr<kernels::Backend> backend;
    if (args.backend == "cuda") {
        PENSTOCK_ASSIGN_OR_RETURN(backend, kernels::make_backend(args.backend, 0));
    }
    PENSTOCK_ASSIGN_OR_RETURN(
        std::unique_ptr<runtime::ModelRunner> runner,
        load_serve_runner(args, setup, {0, setup.config.num_hidden_layers}, nullptr, backend.get()));
    PENSTOCK_ASSIGN_OR_RETURN(std::unique_ptr<engine::Tokenizer> tok, load_serve_tokenizer(args));
    auto executor = std::make_unique<engine::LocalExecutor>(runner.get());
    const json parallel_info = {{"pp_size", setup.sizes.pp},
                                {"tp_size", setup.sizes.tp},
                                {"ep_size", setup.sizes.ep},
                                {"cp_size", setup.sizes.cp},
                                {"pp_layer_partition", {setup.config.num_hidden_layers}}};
    return serve_http(args, setup, std::move(runner), std::move(executor), std::move(tok), parallel_info);
}

}  // namespace penstock::server
