// The planner's analytical model (planner.h; the formulas and assumptions are docs/design/planner.md's).
#include "planner/planner.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "models/layer_kinds.h"
#include "parallel/partition.h"
#include "scheduler/cost_model.h"

namespace penstock::planner {

std::string Layout::str() const {
    std::ostringstream os;
    os << "pp" << pp << " tp" << tp << " ep" << ep << " cp" << cp;
    return os.str();
}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kBf16 = 2.0;

using models::AttentionKind;

// One layer as the planner sees it: parameter counts (split = divided over the TP group; replicated = on every TP
// rank), cache bytes and what its attention needs.
struct LayerModel {
    models::LayerKind kind;
    double split = 0, replicated = 0;  // linear weights
    double kv_per_token = 0;           // bytes per cached token (latent rows, index keys)
    double index_k_per_token = 0;      // of which index keys (DSA full layers)
    double state_per_request = 0;      // KDA recurrent + conv state bytes (split over TP)
    double kda_state_bytes = 0;        // one KDA layer's recurrent state per request (the CP hand-off)
    double elementwise_bytes = 0;      // memory-bound bytes per token outside the class rates (planner.md "Compute")
};

struct ModelShape {
    std::vector<LayerModel> layers;
    int64_t index_topk = 0;
    std::vector<int64_t> bank_rows_at;  // Kimi AttnRes: bank rows a stage boundary before layer l carries
};

Result<ModelShape> model_shape(const loader::ModelConfig& m, const Workload& w) {
    const double h = static_cast<double>(m.hidden_size), heads = static_cast<double>(m.num_attention_heads);
    const double qk = static_cast<double>(m.qk_head_dim()), v = static_cast<double>(m.v_head_dim);
    const double nope = static_cast<double>(m.qk_nope_head_dim), rope = static_cast<double>(m.qk_rope_head_dim);
    const double kv_lora = static_cast<double>(m.kv_lora_rank), q_lora = static_cast<double>(m.q_lora_rank);
    const double latent_row = w.fp8_kv ? kv_lora + kv_lora / 128.0 * 4.0 + rope * kBf16 : (kv_lora + rope) * kBf16;
    ModelShape s;
    const auto mla = [&](LayerModel& l, bool gate) {
        if (m.q_lora_rank > 0) {
            l.replicated += h * q_lora;
            l.split += q_lora * heads * qk;
        } else {
            l.split += h * heads * qk;
        }
        l.replicated += h * (kv_lora + rope);
        l.split += kv_lora * heads * (nope + v) + heads * v * h + (gate ? h * heads * v : 0.0);
        l.kv_per_token += latent_row;
        // RoPE on q's and k's rope columns (read and written) and the latent row's cache write.
        l.elementwise_bytes += 2.0 * (heads + 1.0) * rope * kBf16 + (kv_lora + rope) * kBf16;
    };
    const double inter = static_cast<double>(m.moe_intermediate_size);
    const double experts = static_cast<double>(m.n_routed_experts);
    const auto ffn = [&](LayerModel& l, bool moe, int64_t latent_dim) {
        if (!moe) {
            l.split += 3.0 * h * static_cast<double>(m.intermediate_size);
            l.elementwise_bytes += 3.0 * static_cast<double>(m.intermediate_size) * kBf16;  // the activation
            return;
        }
        // The permute reads and writes top_k rows of the routed width, the unpermute reads them and writes a hidden
        // row, the shared experts' activation reads two rows and writes one.
        const double routed = static_cast<double>(latent_dim > 0 ? latent_dim : m.hidden_size);
        const double top_k = static_cast<double>(m.num_experts_per_tok);
        l.elementwise_bytes +=
            (3.0 * top_k * routed + h) * kBf16 + 3.0 * inter * static_cast<double>(m.n_shared_experts) * kBf16;
        l.replicated += h * experts;  // router
        l.split += 3.0 * h * inter * static_cast<double>(m.n_shared_experts);
        if (latent_dim > 0) {
            const double latent = static_cast<double>(latent_dim);
            l.split += 3.0 * latent * inter * experts;
            l.replicated += 2.0 * h * latent;
        } else {
            l.split += 3.0 * h * inter * experts;
        }
    };
    PENSTOCK_ASSIGN_OR_RETURN(const models::LayerKinds kinds, models::layer_kinds(m));
    s.index_topk = kinds.index_topk;
    s.bank_rows_at = kinds.bank_rows_at;
    const double ih = static_cast<double>(kinds.index_n_heads), id = static_cast<double>(kinds.index_head_dim);
    const models::KdaDims& kd = kinds.kda.dims;
    const double d = static_cast<double>(kd.head_dim), nh = static_cast<double>(kd.n_heads);
    const double qkv = nh * d, conv = static_cast<double>(kd.conv_kernel);
    for (const models::LayerKind& kind : kinds.layers) {
        // Two residual adds + RMSNorms (x and the residual read, both written) and the last residual add.
        LayerModel l{.kind = kind, .elementwise_bytes = 11.0 * h * kBf16};
        switch (kind.attention) {
            case AttentionKind::kMla:
                mla(l, kinds.mla_output_gate);
                break;
            case AttentionKind::kDsa:
                mla(l, false);
                if (kind.full_indexer) {
                    l.replicated += q_lora * ih * id + h * id + h * ih;
                    l.index_k_per_token = w.fp8_index_k ? id + 4.0 : id * 4.0;
                    l.kv_per_token += l.index_k_per_token;
                    l.elementwise_bytes += 2.0 * ih * id * kBf16;  // the index q's RoPE and quantisation, k's write
                }
                break;
            case AttentionKind::kKda:
                l.split += 4.0 * h * qkv + d * qkv + h * nh + 3.0 * qkv * conv;
                l.replicated += h * d;
                if (kinds.kda.full_rank_output_gate) {
                    l.split += h * qkv;
                } else {
                    l.replicated += h * d;
                    l.split += d * qkv;
                }
                l.kda_state_bytes = nh * d * d * 4.0;
                l.state_per_request = l.kda_state_bytes + (conv - 1.0) * 3.0 * qkv * 4.0;
                break;
        }
        ffn(l, kind.moe, kinds.latent_dim);
        // Kimi's AttnRes: before the attention and before the MLP, the bank's rows and the current hidden are read
        // and one mixed row written.
        const double bank = static_cast<double>(kinds.bank_rows_at[s.layers.size()]);
        if (bank > 0) l.elementwise_bytes += 2.0 * (bank + 2.0) * h * kBf16;
        s.layers.push_back(l);
    }
    return s;
}

// The chunks a prompt is cut into: (prefix, tokens).
std::vector<std::pair<int64_t, int64_t>> prompt_chunks(const Workload& w) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t done = 0; done < w.input_len; done += w.chunk)
        out.emplace_back(done, std::min(w.chunk, w.input_len - done));
    return out;
}

// The cluster's rate for a class of work (TFLOP/s): its measured rate where there is one, else the layer rate of the
// weights' format.
double class_rate(const Cluster& c, const Workload& w, scheduler::OpClass k, double rows_per_expert) {
    const ClassRates& r = c.rates;
    const double layer = w.fp8_weights ? c.fp8_tflops : c.bf16_tflops;
    const auto pick = [layer](double v) { return v > 0 ? v : layer; };
    switch (k) {
        case scheduler::OpClass::kGemm:
            return pick(w.fp8_weights ? r.gemm_fp8 : r.gemm);
        case scheduler::OpClass::kExperts: {
            const double base = w.fp8_weights ? r.experts_fp8 : r.experts;
            const double half = w.fp8_weights ? r.experts_fp8_half_rows : r.experts_half_rows;
            if (base <= 0) return layer;
            return half > 0 && rows_per_expert > 0 ? base * rows_per_expert / (rows_per_expert + half) : base;
        }
        case scheduler::OpClass::kAttention:
            return pick(w.fp8_attention ? r.attention_fp8 : r.attention);
        case scheduler::OpClass::kSparseAttention:
            return pick(r.sparse_attention);
        case scheduler::OpClass::kIndexer:
            if (!w.fp8_index_k) return pick(r.indexer_f32);
            return pick(w.dsa_fp8_accumulate ? r.indexer_fp8_accumulate : r.indexer_fp8);
        case scheduler::OpClass::kKda:
            return pick(r.kda);
    }
    return layer;
}

}  // namespace

Result<double> elementwise_bytes_per_token(const loader::ModelConfig& m, int64_t layer_begin, int64_t layer_end) {
    if (layer_begin < 0 || layer_end > m.num_hidden_layers || layer_begin >= layer_end) {
        return invalid_argument("layer range [" + std::to_string(layer_begin) + ", " + std::to_string(layer_end) +
                                ") is empty or outside the model's " + std::to_string(m.num_hidden_layers) + " layers");
    }
    PENSTOCK_ASSIGN_OR_RETURN(const ModelShape shape, model_shape(m, Workload{}));
    double bytes = 0;
    for (int64_t l = layer_begin; l < layer_end; ++l) bytes += shape.layers[static_cast<size_t>(l)].elementwise_bytes;
    return bytes;
}

Result<double> compute_ms(const loader::ModelConfig& m, const Cluster& c, const Workload& w, int64_t layer_begin,
                          int64_t layer_end, int64_t prefix, int64_t tokens, int tp, int cp) {
    PENSTOCK_ASSIGN_OR_RETURN(const scheduler::CostBreakdown cost,
                              scheduler::count_layer_cost_breakdown(m, layer_begin, layer_end));
    const double ranks = static_cast<double>(tp) * static_cast<double>(cp);
    if (!c.rates.any()) {
        const double rate = (w.fp8_weights ? c.fp8_tflops : c.bf16_tflops) * 1e12;
        return scheduler::chunk_cost(cost.total(), prefix, tokens) / ranks / rate * 1e3;
    }
    const double x = static_cast<double>(tokens), l = static_cast<double>(prefix);
    const double rows_per_expert = m.n_routed_experts > 0 ? x / cp * static_cast<double>(m.num_experts_per_tok) /
                                                                static_cast<double>(m.n_routed_experts)
                                                          : 0.0;
    double seconds = 0;
    for (size_t k = 0; k < scheduler::kNumOpClasses; ++k) {
        const double flops = scheduler::chunk_cost(cost.by_class[k], prefix, tokens);
        if (flops > 0)
            seconds += flops / (class_rate(c, w, static_cast<scheduler::OpClass>(k), rows_per_expert) * 1e12);
    }
    if (c.rates.topk_ps_per_pair > 0 && cost[scheduler::OpClass::kIndexer].k_a > 0) {
        PENSTOCK_ASSIGN_OR_RETURN(const models::LayerKinds kinds, models::layer_kinds(m));
        double full = 0;
        for (int64_t i = layer_begin; i < layer_end; ++i) full += kinds.layers[static_cast<size_t>(i)].full_indexer;
        seconds += full * x * (l + 0.5 * x) * c.rates.topk_ps_per_pair * 1e-12;
    }
    if (c.rates.copy_gbps > 0) {
        PENSTOCK_ASSIGN_OR_RETURN(const double bytes, elementwise_bytes_per_token(m, layer_begin, layer_end));
        seconds += bytes * x / (c.rates.copy_gbps * 1e9);
    }
    return seconds / ranks * 1e3;
}

std::vector<Layout> enumerate_layouts(const loader::ModelConfig& m, int world, int max_cp, bool ep_auto, int ep) {
    std::vector<Layout> out;
    const bool moe = m.n_routed_experts > 0;
    for (int cp = 1; cp <= std::max(1, max_cp); ++cp) {
        if (world % cp != 0) continue;
        for (int pp = 1; pp <= world / cp; ++pp) {
            if ((world / cp) % pp != 0 || pp > m.num_hidden_layers) continue;
            const int tp = world / cp / pp;
            int e = 1;
            if (moe) e = ep_auto ? tp : (ep >= 1 && tp % ep == 0 ? ep : 1);
            out.push_back(Layout{.pp = pp, .tp = tp, .ep = e, .cp = cp});
        }
    }
    return out;
}

Result<Prediction> predict(const loader::ModelConfig& m, const Cluster& c, const Workload& w, const Layout& lay) {
    if (lay.pp < 1 || lay.tp < 1 || lay.cp < 1 || lay.ep < 1 || lay.tp % lay.ep != 0) {
        return invalid_argument("layout " + lay.str() + ": sizes must be >= 1 and ep must divide tp");
    }
    if (lay.pp * lay.tp * lay.cp > c.world()) {
        return invalid_argument("layout " + lay.str() + " needs " + std::to_string(lay.pp * lay.tp * lay.cp) +
                                " GPUs; the cluster has " + std::to_string(c.world()));
    }
    if (w.input_len < 1 || w.chunk < 1 || w.concurrency < 1) {
        return invalid_argument("workload: input length, chunk and concurrency must be >= 1");
    }
    if (!(w.mem_fraction > 0.0 && w.mem_fraction <= 1.0) || w.max_kv_chunk_capacity < 1 || w.async_depth < 0) {
        return invalid_argument(
            "workload: --mem-fraction-static must be in (0, 1], --max-kv-chunk-capacity >= 1 and "
            "--pp-async-batch-depth >= 0");
    }
    PENSTOCK_ASSIGN_OR_RETURN(const ModelShape shape, model_shape(m, w));
    PENSTOCK_ASSIGN_OR_RETURN(const std::vector<int64_t> counts,
                              parallel::balance_partition(m, lay.pp, w.chunk, w.input_len / 2));
    const auto chunks = prompt_chunks(w);
    const double n_c = static_cast<double>(chunks.size());
    const double h = static_cast<double>(m.hidden_size);
    const double heads = static_cast<double>(m.num_attention_heads);
    const double weight_bytes = w.fp8_weights ? 1.0 + 4.0 / (128.0 * 128.0) : kBf16;
    const double tp = lay.tp, cp = lay.cp;
    const double tokens_per_rank = static_cast<double>(w.chunk) / cp;
    const double kv_tokens = static_cast<double>(w.concurrency) * static_cast<double>(w.input_len) / cp;
    const double embed = static_cast<double>(m.vocab_size) * h * kBf16;

    Prediction p;
    p.layout = lay;
    int64_t begin = 0;
    for (int s = 0; s < lay.pp; ++s) {
        StagePrediction st;
        st.layer_begin = begin;
        st.layer_end = begin + counts[static_cast<size_t>(s)];
        begin = st.layer_end;
        const int first_rank = s * lay.cp * lay.tp;  // ranks: tp innermost, then cp, then pp
        double weights = (s == 0 ? embed : 0.0) + (s == lay.pp - 1 ? embed : 0.0);
        double kv = 0, state = 0;
        int64_t attn_layers = 0, kda_layers = 0, dense_mla_layers = 0;
        double kda_state = 0;
        for (int64_t l = st.layer_begin; l < st.layer_end; ++l) {
            const LayerModel& lm = shape.layers[static_cast<size_t>(l)];
            weights += (lm.split / tp + lm.replicated) * weight_bytes;
            kv += lm.kv_per_token * kv_tokens;
            state += lm.state_per_request / tp * static_cast<double>(w.concurrency);
            if (lm.kind.attention == AttentionKind::kKda) {
                ++kda_layers;
                kda_state = lm.kda_state_bytes / tp;
            } else {
                ++attn_layers;
                if (lm.kind.attention == AttentionKind::kMla) ++dense_mla_layers;
            }
        }
        st.weights_gib = weights / kGiB;
        st.kv_gib = (kv + state) / kGiB;
        // Activations: ~6 f32 hidden-sized buffers, the routed rows of this rank's experts (gate / up and down
        // operands), the chunk's q / k / v, and the MHA form's expanded prefix piece.
        double act = tokens_per_rank * h * 4.0 * 6.0;
        if (m.n_routed_experts > 0) {
            const double rows = tokens_per_rank * static_cast<double>(m.num_experts_per_tok) / lay.ep;
            act += rows * (h + 2.0 * static_cast<double>(m.moe_intermediate_size) * lay.ep / tp) * kBf16;
        }
        act += tokens_per_rank * heads / tp * (2.0 * static_cast<double>(m.qk_head_dim()) + m.v_head_dim) * kBf16;
        if (dense_mla_layers > 0) {
            const double piece = std::min<double>(static_cast<double>(w.input_len), w.max_kv_chunk_capacity);
            act += piece * heads / tp * (static_cast<double>(m.qk_nope_head_dim) + m.v_head_dim) * kBf16;
        }
        st.activations_gib = act / kGiB;

        double ms = 0;
        for (const auto& [prefix, x] : chunks) {
            PENSTOCK_ASSIGN_OR_RETURN(const double one,
                                      compute_ms(m, c, w, st.layer_begin, st.layer_end, prefix, x, lay.tp, lay.cp));
            ms += one;
        }
        st.compute_ms = ms / n_c;
        const double hidden_bytes = tokens_per_rank * h * kBf16;
        const double layers = static_cast<double>(st.layer_end - st.layer_begin);
        st.tp_comm_ms = layers * 2.0 * c.all_reduce_ms(hidden_bytes, lay.tp, first_rank);
        if (lay.cp > 1) {
            const double latent =
                static_cast<double>(w.chunk) * static_cast<double>(m.kv_lora_rank + m.qk_rope_head_dim) * kBf16;
            st.cp_comm_ms =
                static_cast<double>(attn_layers) * c.all_gather_ms(latent, lay.cp, first_rank, lay.tp) +
                static_cast<double>(kda_layers) * (cp - 1.0) * c.send_ms(kda_state, first_rank, first_rank + lay.tp);
        }
        if (s + 1 < lay.pp) {
            double bytes = hidden_bytes;
            bytes += static_cast<double>(shape.bank_rows_at[static_cast<size_t>(st.layer_end)]) * hidden_bytes;
            if (shape.index_topk > 0 && !shape.layers[static_cast<size_t>(st.layer_end)].kind.full_indexer) {
                bytes += tokens_per_rank * static_cast<double>(shape.index_topk) * 4.0;  // the top-k columns
            }
            const int next_first = (s + 1) * lay.cp * lay.tp;
            st.boundary_ms = c.send_ms(bytes, first_rank, next_first);
        }
        p.stages.push_back(st);
    }
    // The period: the slowest stage (its sends are not overlapped with its next micro-batch).
    for (int s = 0; s < lay.pp; ++s) {
        const StagePrediction& st = p.stages[static_cast<size_t>(s)];
        p.max_rank_gib = std::max(p.max_rank_gib, st.total_gib());
        if (st.busy_ms() > p.period_ms) {
            p.period_ms = st.busy_ms();
            p.slowest_stage = s;
        }
    }
    const StagePrediction& slow = p.stages[static_cast<size_t>(p.slowest_stage)];
    const std::pair<double, const char*> parts[] = {{slow.compute_ms, "compute"},
                                                    {slow.tp_comm_ms, "TP all-reduce"},
                                                    {slow.cp_comm_ms, "CP all-gather"},
                                                    {slow.boundary_ms, "PP boundary"}};
    p.bottleneck = std::max_element(std::begin(parts), std::end(parts))->second;
    p.comm_share = p.period_ms > 0 ? 1.0 - slow.compute_ms / p.period_ms : 0.0;
    p.fits = p.max_rank_gib <= c.memory_gib * w.mem_fraction;
    // Micro-batches in flight: every chunk of every request in flight can be one (consecutive chunks of a request
    // pipeline through the stages), up to pp + async_depth slots; fewer than pp leave bubbles.
    const double in_flight =
        std::min(static_cast<double>(w.concurrency) * n_c, static_cast<double>(lay.pp + w.async_depth));
    p.fill = std::min(1.0, in_flight / lay.pp);
    const double tokens_per_chunk = static_cast<double>(w.input_len) / n_c;
    p.input_tok_s = p.fill * tokens_per_chunk / (p.period_ms * 1e-3);
    // TTFT: a lone request's chunks through every stage, or Little's law over the closed loop's requests.
    const double alone_s = (n_c + lay.pp - 1.0) * p.period_ms * 1e-3;
    const double loop_s = static_cast<double>(w.concurrency) * static_cast<double>(w.input_len) / p.input_tok_s;
    p.ttft_s = std::max(alone_s, loop_s);
    return p;
}

Result<std::vector<Prediction>> plan(const loader::ModelConfig& m, const Cluster& c, const Workload& w,
                                     const std::vector<Layout>& layouts) {
    std::vector<Prediction> out;
    for (const Layout& l : layouts) {
        PENSTOCK_ASSIGN_OR_RETURN(Prediction p, predict(m, c, w, l));
        out.push_back(std::move(p));
    }
    std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) {
        if (a.fits != b.fits) return a.fits;
        return a.input_tok_s > b.input_tok_s;
    });
    return out;
}

Result<TpCommPatterns> tp_comm_patterns(const loader::ModelConfig& m) {
    TpCommPatterns t;
    t.hidden = static_cast<double>(m.hidden_size);
    t.latent = static_cast<double>(std::max<int64_t>(m.q_lora_rank, 0) + m.kv_lora_rank + m.qk_rope_head_dim);
    t.all_reduce = 2.0 * t.hidden;
    t.rs_ag = t.hidden + t.latent;
    t.rs_ag_full_hidden = 2.0 * t.hidden + t.latent;
    PENSTOCK_ASSIGN_OR_RETURN(const models::LayerKinds kinds, models::layer_kinds(m));
    t.needs_full_hidden = kinds.mla_output_gate || kinds.any(AttentionKind::kKda);
    return t;
}

Result<LongContext> long_context(const loader::ModelConfig& m, const Workload& w, int64_t len,
                                 const std::vector<int64_t>& chunks) {
    PENSTOCK_ASSIGN_OR_RETURN(const ModelShape shape, model_shape(m, w));
    PENSTOCK_ASSIGN_OR_RETURN(const scheduler::CostBreakdown by_class,
                              scheduler::count_layer_cost_breakdown(m, 0, m.num_hidden_layers));
    const scheduler::CostCoefficients all = by_class.total();
    LongContext lc;
    lc.len = len;
    double index_k_per_token = 0;  // over the full layers
    for (const LayerModel& l : shape.layers) {
        lc.kv_bytes_per_token += l.kv_per_token;
        index_k_per_token += l.index_k_per_token;
        if (l.kind.full_indexer) ++lc.full_indexer_layers;
    }
    const double l2 = static_cast<double>(len) * static_cast<double>(len) / 2.0;
    const bool dsa = shape.index_topk > 0;
    const double total = scheduler::chunk_cost(all, 0, len);
    lc.indexer_pflop = by_class[scheduler::OpClass::kIndexer].k_a * l2 / 1e15;
    lc.backbone_pflop = total / 1e15 - lc.indexer_pflop;
    lc.kv_gb = lc.kv_bytes_per_token * static_cast<double>(len) / 1e9;
    for (const int64_t b : chunks) {
        ChunkTradeoff t{.chunk = b};
        if (dsa) {
            t.index_k_reread_gb = index_k_per_token * l2 / static_cast<double>(b) / 1e9;
            t.logits_peak_gb = static_cast<double>(b) * static_cast<double>(len) * 4.0 / 1e9;
        }
        t.activation_peak_gb = static_cast<double>(b) * static_cast<double>(m.hidden_size) * 4.0 * 6.0 / 1e9;
        lc.chunks.push_back(t);
    }
    return lc;
}

}  // namespace penstock::planner
