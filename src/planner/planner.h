// The layout planner (SPEC §8): from a model config, a cluster and a workload, predict for each PP x TP x EP x CP
// layout the per-rank memory, the communication per layer and per chunk, the micro-batch period (slowest stage,
// slowest link), TTFT and input tokens/s, and rank the layouts. An analytical model, calibrated by the cluster's
// measured layer rates and collectives; docs/design/planner.md states every formula and assumption.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "loader/model_config.h"
#include "planner/cluster.h"

namespace penstock::planner {

struct Workload {
    int64_t input_len = 16384;   // prompt tokens per request (output 1: a prefill study)
    int64_t chunk = 8192;        // --chunked-prefill-size
    int concurrency = 8;         // requests in flight (closed loop)
    bool fp8_weights = false;    // block-FP8 linear weights (the cluster's fp8 rate, 1 byte per weight)
    bool fp8_kv = false;         // the latent cache in DeepSeek's FP8 format: kv_lora e4m3 + kv_lora / 128 f32 scales
                                 // + rope bf16 (656 bytes for 512 / 64); else (kv_lora + rope) bf16
    bool fp8_index_k = false;    // DSA index keys e4m3 + one f32 scale (132 bytes for 128); else f32
    bool fp8_attention = false;  // the MHA form's attention in e4m3 (serve --fp8-attention): the class rate only
    bool dsa_fp8_accumulate = false;  // FP8 index keys with e4m3-accumulated logits (serve --dsa-fp8-accumulate)
    double mem_fraction = 0.88;  // of each GPU for weights, KV and activations
    int64_t max_kv_chunk_capacity = 131072;  // the MHA form's prefix expansion piece (tokens)
    int async_depth = 0;                     // --pp-async-batch-depth
};

struct Layout {
    int pp = 1, tp = 1, ep = 1, cp = 1;
    std::string str() const;  // "pp4 tp8 ep8 cp1"
};

struct StagePrediction {
    int64_t layer_begin = 0, layer_end = 0;
    double weights_gib = 0, kv_gib = 0, activations_gib = 0;
    double compute_ms = 0;   // one chunk, the mean over a prompt's chunks
    double tp_comm_ms = 0;   // 2 all-reduces of the chunk's hidden per layer over the TP group
    double cp_comm_ms = 0;   // all-gather of the chunk's latent rows per attention layer (KDA: the state hand-off)
    double boundary_ms = 0;  // sending the chunk's hidden (and bank rows, top-k columns) to the next stage
    double total_gib() const { return weights_gib + kv_gib + activations_gib; }
    double busy_ms() const { return compute_ms + tp_comm_ms + cp_comm_ms + boundary_ms; }
};

struct Prediction {
    Layout layout;
    std::vector<StagePrediction> stages;
    double max_rank_gib = 0;
    bool fits = false;
    double period_ms = 0;  // the slowest stage's time per micro-batch
    int slowest_stage = 0;
    std::string bottleneck;  // what dominates the slowest stage: compute, TP all-reduce, CP all-gather, PP boundary
    double comm_share = 0;   // communication / busy time of the slowest stage
    double fill = 0;         // micro-batches in flight / pp (1: no bubble)
    double input_tok_s = 0;
    double ttft_s = 0;
};

// Layouts with pp * tp * cp = world, pp <= num_hidden_layers, cp <= max_cp; ep = tp for MoE models when ep_auto
// (whole experts per rank), else `ep` where it divides tp (1 otherwise).
std::vector<Layout> enumerate_layouts(const loader::ModelConfig& m, int world, int max_cp, bool ep_auto, int ep);

[[nodiscard]] Result<Prediction> predict(const loader::ModelConfig& m, const Cluster& c, const Workload& w,
                                         const Layout& layout);

// The time of one chunk of `tokens` new tokens after `prefix` cached ones through layers [layer_begin, layer_end) on
// one rank of a tp x cp group (ms): each OpClass's FLOPs (scheduler::count_layer_cost_breakdown) at the cluster's
// rate for it, the DSA top-k's pairs and the memory-bound bytes (planner.md "Compute"); without class rates, every FLOP
// at the layer rate. Work is divided evenly over the tp x cp ranks.
[[nodiscard]] Result<double> compute_ms(const loader::ModelConfig& m, const Cluster& c, const Workload& w,
                                        int64_t layer_begin, int64_t layer_end, int64_t prefix, int64_t tokens,
                                        int tp = 1, int cp = 1);

// The memory-bound bytes per token of layers [layer_begin, layer_end) that the class rates do not carry (norms and
// residual adds, RoPE, cache writes, the MoE permute / unpermute and activations; planner.md "Compute").
[[nodiscard]] Result<double> elementwise_bytes_per_token(const loader::ModelConfig& m, int64_t layer_begin,
                                                         int64_t layer_end);

// Every layout's prediction, the ones that fit first, then by input tokens/s.
[[nodiscard]] Result<std::vector<Prediction>> plan(const loader::ModelConfig& m, const Cluster& c, const Workload& w,
                                                   const std::vector<Layout>& layouts);

// SPEC §8's TP reasoning, per token and layer in bytes of bf16 activations: all-reduce of the hidden (2 H, in units of
// H elements moved per rank) against reduce-scatter of the hidden + all-gather of the latent (H + L, L = q_lora +
// kv_lora + rope); a model whose MLA output gate or KDA layers need the full hidden pays 2 H + L.
struct TpCommPatterns {
    double hidden = 0, latent = 0;
    double all_reduce = 0, rs_ag = 0, rs_ag_full_hidden = 0;  // elements per token and layer
    bool needs_full_hidden = false;                           // output gate or KDA layers
    double chosen() const { return needs_full_hidden ? rs_ag_full_hidden : rs_ag; }
};
[[nodiscard]] Result<TpCommPatterns> tp_comm_patterns(const loader::ModelConfig& m);

// SPEC §8's long-context reasoning for one prompt of `len` tokens: FLOPs of the DSA indexer (full layers x len² / 2
// pairs x 2 index_heads index_dim) and of the rest (this cost model), the KV bytes per token, and per chunk size the
// index-K re-reads (each chunk reads its whole prefix of index keys: full layers x bytes x len² / (2 chunk)) and the
// logits peak (chunk x len x 4 bytes before slicing).
struct ChunkTradeoff {
    int64_t chunk = 0;
    double index_k_reread_gb = 0;
    double logits_peak_gb = 0;
    double activation_peak_gb = 0;  // chunk x hidden x 4 bytes x 6 buffers
};
struct LongContext {
    int64_t len = 0;
    int64_t full_indexer_layers = 0;
    double indexer_pflop = 0, backbone_pflop = 0;
    double kv_bytes_per_token = 0, kv_gb = 0;
    std::vector<ChunkTradeoff> chunks;
};
[[nodiscard]] Result<LongContext> long_context(const loader::ModelConfig& m, const Workload& w, int64_t len,
                                               const std::vector<int64_t>& chunks);

}  // namespace penstock::planner
