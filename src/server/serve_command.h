// `penstock serve`: flags (SGLang names), model + tokenizer loading, engine start, warm-up, signal handling
// (SIGTERM/SIGINT drain, exit 0) and the HTTP server. With --pp N under `mpirun -np N`, global rank 0 runs the HTTP
// server, the engine and pipeline stage 0, and the other ranks serve their stages until rank 0 stops them
// (serve_pipeline.cc). The CLI (apps/penstock.cc) only wires the subcommand.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "server/config.h"

namespace penstock::server {

struct ServeArgs {
    std::string model;
    ServerConfig server;
    int64_t chunked_prefill_size = 8192;
    int64_t max_prefill_tokens = 16384;
    int64_t max_running_requests = 256;
    int64_t max_queue_size = 4096;
    int64_t context_length = 0;  // 0: the model's max_position_embeddings
    int64_t max_total_tokens = 65536;
    bool enable_dynamic_chunking = false;
    int64_t dynamic_chunking_budget_tokens = 0;
    std::string schedule_policy = "fcfs";
    std::string mla_form = "mha";
    std::string fp8_weights = "auto";  // block-FP8 checkpoints: auto | native | dequant (models::Fp8Weights)
    bool fp8_attention = false;        // MLA MHA form: FP8 attention (models::ModelOptions::fp8_attention)
    bool dsa_fp8_indexer = false;      // DSA families: the FP8 indexer (models::ModelOptions::dsa_fp8_indexer)
    bool dsa_fp8_accumulate = false;  // its logits with fp8 tensor-core sums (models::ModelOptions::dsa_fp8_accumulate)
    std::string backend = "cpu";      // cpu | cuda (under mpirun: each rank on GPU local_rank / ranks_per_gpu)
    std::string dtype = "float32";    // float32 | bfloat16 (cuda): activations, KV cache, weights
    // --backend cuda under mpirun: how the ranks' device tensors travel. "nccl" (default where built): NCCL groups
    // for the pipeline's activations and the TP/EP collectives; "host": staged through host memory over MPI (GPUs
    // without peer access, or several ranks sharing one GPU, which NCCL refuses).
    std::string device_links = "nccl";
    // --backend cuda under mpirun: ranks per GPU on a node (rank r uses GPU local_rank / ranks_per_gpu). > 1 needs
    // --device-links host.
    int ranks_per_gpu = 1;
    int threads = 0;
    uint64_t random_seed = 0;
    int pp = 1, tp = 1, ep = 1, cp = 1;
    std::string pp_layer_partition;  // layers per stage ("" = balanced by the cost model)
    bool pp_eager_bank_forward = false;
    int64_t pp_max_micro_batch_size = 0;  // requests per micro-batch (0: max(max_running_requests / pp, 1))
    int64_t pp_async_batch_depth = 0;     // micro-batch slots beyond pp (slots = pp + depth)
    // "auto": read the checkpoint; "dummy": seeded random weights at the config's dimensions, each rank generating
    // its own layers and shard (models::ModelOptions::dummy_weights_seed); --model may then be a config .json file
    // (serve token ids with --skip-tokenizer-init when it has no tokenizer beside it).
    std::string load_format = "auto";
    uint64_t dummy_seed = 20261130;
    // > 0: keep only the first N decoder layers of the config (loader::with_num_layers), for partial-depth runs of a
    // large model's shape on fewer devices; needs --load-format dummy. 0: every layer.
    int64_t num_layers = 0;
    // Start-up warm-up (server/warmup.h): prompt lengths ("" = none), requests at once, overall deadline.
    std::string idle_invariant_check = "warn";  // off | warn | abort (engine::InvariantCheck)
    std::string warmup_lengths;
    int64_t warmup_concurrency = 1;
    double warmup_timeout_s = 600;
    // Test hook (hidden flag --test-step-delay-ms): every engine step sleeps this long first, to wedge the loop in
    // /health tests (RELIABILITY T14). 0 in production.
    int64_t test_step_delay_ms = 0;
    // Test hook (hidden flag --test-pp-slots): > 0 caps the pipeline's micro-batches in flight (1 = one engine step at
    // a time through every stage), for overlap A/B figures. 0 in production: pp + --pp-async-batch-depth.
    int64_t test_pp_slots = 0;
    // Prefill/decode disaggregation (SGLang's flag names; docs/design/disagg.md): null | prefill | decode.
    std::string disaggregation_mode = "null";
    std::string disaggregation_transfer_backend = "ucx";
    int disaggregation_transfer_queues = 4;
    bool disaggregation_lazy_allocation = false;
    int64_t disaggregation_bootstrap_timeout_ms = 30000;
    int64_t disaggregation_waiting_timeout_ms = 300000;
    int64_t disaggregation_transfer_timeout_ms = 60000;
};

// Registers the subcommand's options on `cmd`, writing into `args`.
void add_serve_options(CLI::App* cmd, ServeArgs* args);

// Runs the server until SIGTERM/SIGINT and a completed drain (on rank 0; the other pipeline ranks return when rank 0
// stops them). Start-up failures return a Status (the CLI prints it and exits 2).
[[nodiscard]] Status run_serve(const ServeArgs& args);

}  // namespace penstock::server
