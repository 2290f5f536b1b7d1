// Kimi Delta Attention layer (Kimi Linear / Kimi K3 linear-attention layers; reference/MODELS.md §3.2-3.3,
// transformers 5.17 KimiLinearDeltaAttention): fused q|k|v projection -> causal short conv + SiLU continuing from the
// request's conv state -> l2norm(q), l2norm(k) -> decay gate g (softplus form, or K3's lower-bounded sigmoid form) and
// beta = sigmoid(b_proj x) -> chunkwise gated delta rule from the request's recurrent state -> per-head RMSNorm gated
// by sigmoid(output gate) -> o_proj. All per-request state lives in the caller's KdaStatePool slots.
#pragma once

#include <string>

#include "kernels/ops_kda.h"
#include "models/forward_batch.h"
#include "models/linear.h"

namespace penstock::models {

struct KdaDims {
    int64_t hidden = 0;
    int64_t n_heads = 0;
    int64_t head_dim = 0;  // k and v head dim
    int64_t conv_kernel = 4;
    int64_t qkv_dim() const { return n_heads * head_dim; }
    int64_t conv_channels() const { return 3 * qkv_dim(); }  // the fused q|k|v conv
};

struct KdaOptions {
    KdaDims dims;
    kernels::KdaGateForm gate_form = kernels::KdaGateForm::kSoftplus;
    float gate_lower_bound = -5.0f;      // kLowerBound only
    bool full_rank_output_gate = false;  // K3: `g_proj` [qkv, hidden]; else low-rank `g_a_proj`, `g_b_proj`
    float norm_eps = 1e-5f;              // o_norm (rms_norm_eps)
    int64_t chunk_size = 64;             // chunkwise delta rule
};

class KdaAttention final {
public:
    // Reads `<prefix>.{q,k,v}_proj`, `{q,k,v}_conv1d` ([qkv, 1, K] or [qkv, K]; or a fused `conv1d` [3 qkv, 1, K]),
    // `f_a_proj`, `f_b_proj`, `A_log` ([n_heads] or [1, 1, n_heads, 1]), `dt_bias`, `b_proj`, the output gate
    // (`g_a_proj` + `g_b_proj`, or `g_proj`), `o_norm.weight` [head_dim] and `o_proj` (each under its transformers
    // internal name too: `forget_gate.f_a_proj`, ...). With tensor parallelism this rank keeps the heads
    // tp.shard(n_heads) (q/k/v, conv channels, gates, beta column-parallel; o_proj row-parallel, all-reduced);
    // options().dims then holds the local head count, which sizes the state.
    [[nodiscard]] static Result<KdaAttention> load(WeightReader& reader, const std::string& prefix,
                                                   const KdaOptions& options,
                                                   const TensorParallel& tp = TensorParallel{});

    // out[n_tokens, hidden] = KDA(x) for the batch. x: [n_tokens, hidden] (input-normalised) and out in the
    // activation dtype (f32 or bf16; the layer computes in f32 between its projections). Sequence s reads and updates
    // slot state_slots[s] ([n_seqs] i32 on ctx's device) of recurrent_state [n_slots, n_heads, head_dim, head_dim] f32
    // and conv_state [n_slots, conv_kernel - 1, 3 qkv] f32 (a new request's slot is zero).
    // xq: x's FP8 rows (fp8_rows_scratch layout, from the norm that made x) for the FP8 q / k / v (and g) projections,
    // or null (quantised here when fp8_input()).
    void forward(const BatchLayout& layout, const TensorView& x, const TensorView& recurrent_state,
                 const TensorView& conv_state, const TensorView& state_slots, const TensorView& out,
                 const kernels::Context& ctx, const Fp8Activations* xq = nullptr) const;

    const KdaOptions& options() const { return options_; }
    // True when q / k / v are native FP8 (models.md "FP8 weights"): forward() then reads x in FP8.
    bool fp8_input() const { return q_proj_.fp8(); }

private:
    KdaOptions options_;
    Linear qkv_proj_;                  // [3 qkv, hidden]: q, k, v rows stacked (dense weights)
    Linear q_proj_, k_proj_, v_proj_;  // native FP8 only (qkv_proj_ undefined): one FP8 GEMM each into mixed's thirds
    Tensor conv_weight_;               // [3 qkv, conv_kernel] f32
    Linear f_a_proj_, f_b_proj_;
    Tensor a_log_;    // [n_heads] f32
    Tensor dt_bias_;  // [qkv] f32
    Linear b_proj_;   // [n_heads, hidden]
    Linear g_a_proj_, g_b_proj_, g_proj_;
    Tensor o_norm_;  // [head_dim] f32
    Linear o_proj_;  // [hidden, qkv]
    TensorParallel tp_;
};

}  // namespace penstock::models
