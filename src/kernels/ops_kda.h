// Ops of Kimi Delta Attention (KDA, Kimi Linear / Kimi K3) and the K3 SiTU activation, on the conventions of
// kernels/ops.h (Params structs, Context dispatch; the CPU reference in kernels/ref/kda.cc is the specification).
// Per-sequence recurrent state lives in caller-owned slot tensors ([n_slots, ...]): a batch names each sequence's
// slot in `state_slots`, so ragged batches of requests at different points of their prefill run in one call.
// See reference/MODELS.md §3.3 (KDA), §3.5 (SiTU).
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace penstock::kernels {

// Causal depthwise 1-D convolution of each sequence's rows, continuing from the sequence's conv state:
//   window = [conv_state[slot] (kernel - 1 rows, oldest first) ; in rows of the sequence]
//   out[t, c] = act(sum_{j < kernel} weight[c, j] * window[t + j, c])   (weight[c, kernel - 1] hits the current row)
// act = SiLU when `silu`, else identity. Afterwards conv_state[slot] holds the last kernel - 1 rows of the window (a
// new sequence starts from a zero state: the left zero padding of a plain causal conv). fp32, double accumulation.
struct ShortConvParams {
    TensorView out;          // [n_tokens, channels] f32 (must not alias in)
    TensorView in;           // [n_tokens, channels] f32, rows strided
    TensorView weight;       // [channels, kernel] f32
    TensorView conv_state;   // [n_slots, kernel - 1, channels] f32, in/out
    TensorView cu_seqlens;   // [n_seqs + 1] i32: row range of each sequence in in/out
    TensorView state_slots;  // [n_seqs] i32: index into dim 0 of conv_state
    bool silu = true;
    // Fused L2 normalisation (KDA's q and k, as l2norm with eps): after the activation, channels [0, norm_channels)
    // of every output row are divided by sqrt(sum(x^2) + norm_eps) in consecutive groups of norm_dim (a head).
    // 0: none. norm_channels must be a multiple of norm_dim and at most channels.
    int64_t norm_channels = 0;
    int64_t norm_dim = 0;
    float norm_eps = 1e-6f;
};

// out = x / sqrt(sum(x^2) + eps) over the last dim (fla / transformers `l2norm`: eps inside the sqrt, not a clamp).
// out may alias in. Strided on dims 0 and 1.
struct L2NormParams {
    TensorView out;  // [n_tokens, n_heads, dim] f32
    TensorView in;   // [n_tokens, n_heads, dim] f32
    float eps = 1e-6f;
};

// out = 1 / (1 + exp(-in)), elementwise. out may alias in. Rows may be strided.
struct SigmoidParams {
    TensorView out;  // [n_rows, dim] f32
    TensorView in;   // [n_rows, dim] f32
};

// out = in * sigmoid(gate), elementwise (Kimi K3 gated MLA output). out may alias in or gate. Rows may be strided.
// bf16 activations: in and out bf16 (gate f32 or bf16), f32 math, rounded once to bf16 at the output.
struct SigmoidGateParams {
    TensorView out;   // [n_rows, dim] f32 or bf16 (in's dtype)
    TensorView in;    // [n_rows, dim] f32 or bf16
    TensorView gate;  // [n_rows, dim] f32 or bf16
};

enum class KdaGateForm : uint8_t {
    kSoftplus,    // Kimi Linear: g = -exp(A_log[h]) * softplus(f + dt_bias); softplus(u) = u for u > 20
    kLowerBound,  // Kimi K3:     g = lower_bound * sigmoid(exp(A_log[h]) * (f + dt_bias)), in (lower_bound, 0)
};

// The per-channel log decay of KDA, in fp32: u = f[t, h, d] + dt_bias[h * head_dim + d], then the form's formula.
// out may alias f.
struct KdaGateParams {
    TensorView out;      // [n_tokens, n_heads, head_dim] f32, contiguous
    TensorView f;        // [n_tokens, n_heads, head_dim] f32, contiguous (the low-rank or full-rank gate projection)
    TensorView a_log;    // [n_heads] f32
    TensorView dt_bias;  // [n_heads * head_dim] f32
    KdaGateForm form = KdaGateForm::kSoftplus;
    float lower_bound = -5.0f;  // kLowerBound only
};

// The gated delta rule with a per-key-channel decay (KDA), per sequence and head, state S [k_dim, v_dim] fp32:
//   S <- Diag(exp(g_t)) S;  S <- S + beta_t k_t (v_t - S^T k_t)^T;  out_t = S^T (scale * q_t)
// starting from state[slot] and writing the final state back to it. q and k are expected L2-normalised (not done
// here). The recurrent form walks tokens one by one (the oracle); the chunkwise form processes `chunk_size` tokens at a
// time in the WY/UT representation (MODELS.md §3.3) and agrees with it up to rounding. A zero-length sequence leaves
// its state untouched.
// Arithmetic of the chunkwise delta rule on a GPU. The CPU reference always computes in double/f32 and is the
// specification of both.
enum class DeltaRulePrecision : uint8_t {
    kF32,  // every product in fp32 on CUDA cores (agrees with the reference to f32 rounding)
    // the intra-chunk and state products on tensor cores with tf32 operands (10-bit mantissa, round to nearest) and
    // fp32 accumulation; the state, cumulative decays and exponentials stay fp32.
    kTensorCore,
    // the chunk-parallel work (L, A, (I + L)^-1, W, U, Q e^G, K e^{G_last - G}) for every chunk at once on bf16 tensor
    // cores (bf16 operands, fp32 accumulation; the cumulative decays, exponentials and T_bb in fp32), its products
    // kept as bf16; the state pass runs V' = U - W S, O = (Q e^G) S + A V' and the state update on bf16 tensor cores
    // (the fp32 state rounded to bf16 as an operand, fp32 accumulation, fp32 state). Needs a workspace of ~72.5 KB
    // per (chunk, head) plus 96 KB per prep CTA (two per SM). Used by the bf16 model path.
    kTensorCoreSplit,
};

struct GatedDeltaRuleParams {
    TensorView out;           // [n_tokens, n_heads, v_dim] f32 (must not alias the inputs)
    TensorView q;             // [n_tokens, n_heads, k_dim] f32, strided on dims 0 and 1
    TensorView k;             // [n_tokens, n_heads, k_dim] f32, strided on dims 0 and 1
    TensorView v;             // [n_tokens, n_heads, v_dim] f32, strided on dims 0 and 1
    TensorView g;             // [n_tokens, n_heads, k_dim] f32 log decay (<= 0), strided on dims 0 and 1
    TensorView beta;          // [n_tokens, n_heads] f32, rows strided
    TensorView state;         // [n_slots, n_heads, k_dim, v_dim] f32, contiguous, in/out
    TensorView cu_seqlens;    // [n_seqs + 1] i32
    TensorView state_slots;   // [n_seqs] i32: index into dim 0 of state
    float scale = 1.0f;       // applied to q (k_dim^-0.5 in KDA)
    int64_t chunk_size = 64;  // chunkwise form only
    DeltaRulePrecision precision = DeltaRulePrecision::kF32;  // chunkwise form on a GPU only
};

// out = weight * (x * rsqrt(mean(x^2) + eps)) * sigmoid(gate), per row, fp32 (FusedRMSNormGated, sigmoid). out may
// alias in (then f32). Rows may be strided. A bf16 out (the KDA output feeding a bf16 o_proj) takes the f32 result
// rounded once.
// Optional fusion (off while quant_out.data is nullptr), equal bit for bit to the unfused sequence (SPEC §2): then
// also fp8_act_quant of out's rounded values viewed as [n_rows / quant_heads, quant_heads * dim] (a token's
// quant_heads normed heads as one row: the FP8 input of KDA's o_proj) -> quant_out, quant_scale, without a pass over
// out of its own. quant_heads must divide n_rows, and with quant_heads > 1 out's rows must be contiguous.
// (out_scratch below: the FP8 rows without out, when nothing else reads it.)
struct GatedRmsNormParams {
    TensorView out;     // [n_rows, dim] f32 or bf16
    TensorView in;      // [n_rows, dim] f32
    TensorView gate;    // [n_rows, dim] f32
    TensorView weight;  // [dim] f32
    float eps = 1e-6f;
    TensorView quant_out = {};    // [n_rows / quant_heads, quant_heads * dim] f8e4m3, rows may be strided; optional
    TensorView quant_scale = {};  // [n_rows / quant_heads, ceil(quant_heads * dim / 128)] f32, strided on dims 0 and 1
    int64_t quant_heads = 1;
    // With quant_out: out is the caller's scratch, which the op may leave unwritten (its dtype still sets the
    // rounding the quantisation sees); the fused kernel then stores the FP8 rows only.
    bool out_scratch = false;
};
// out viewed as the rows fp8_act_quant reads for GatedRmsNormParams::quant_out: [n_rows / quant_heads,
// quant_heads * dim] (out itself when quant_heads is 1).
inline TensorView gated_norm_quant_rows(const GatedRmsNormParams& p) {
    if (p.quant_heads == 1) return p.out;
    PENSTOCK_CHECK(p.quant_heads > 1 && p.out.ndim == 2 && p.out.size(0) % p.quant_heads == 0 && p.out.is_contiguous())
        << "gated_rms_norm: quant_heads " << p.quant_heads << " needs contiguous out rows in whole tokens, got out "
        << p.out.shape_string();
    return p.out.reshape({p.out.size(0) / p.quant_heads, p.quant_heads * p.out.size(1)});
}

// Kimi K3 SiTU-GLU, elementwise in fp32:
//   out = beta * tanh(gate / beta) * sigmoid(gate) * linear_beta * tanh(up / linear_beta)
// out may alias gate or up. Rows may be strided (gate and up may be the two halves of one [n_rows, 2 * dim] GEMM
// output). f32 or bf16, one dtype for all three: bf16 inputs are widened exactly and the f32 (reference: double)
// result is rounded once to bf16 at the output.
struct SituMulParams {
    TensorView out;             // [n_rows, dim] f32 or bf16
    TensorView gate;            // [n_rows, dim] same dtype
    TensorView up;              // [n_rows, dim] same dtype
    float beta = 4.0f;          // activation_situ_beta
    float linear_beta = 25.0f;  // activation_situ_linear_beta
};

// Kimi K3 Block Attention Residuals read (MODELS.md §3.6): per token, a softmax over depth of the candidates
// V = [bank rows 0..n_blocks-1 ; partial] with logits_i = query . RMSNorm_w(V_i) (eps, fp32), returning
// out = sum_i softmax_i * V_i (the raw rows). Double accumulation. out may alias partial. bf16 activations: partial
// and out bf16, the bank bf16 or f32; rows are read as f32 (exact), the mix rounded once to bf16 at the output.
struct AttnResMixParams {
    TensorView out;          // [n_tokens, hidden] f32 or bf16 (partial's dtype)
    TensorView bank;         // [n_tokens, n_blocks, hidden] f32 or bf16, strided on dims 0 and 1 (n_blocks may be 0)
    TensorView partial;      // [n_tokens, hidden] f32 or bf16, rows strided
    TensorView query;        // [hidden] f32: the sub-layer's pseudo-query (`*_res_proj.weight` row)
    TensorView norm_weight;  // [hidden] f32 (`*_res_norm.weight`)
    float eps = 1e-5f;
};

void short_conv(const ShortConvParams& p, const Context& ctx);
void l2norm(const L2NormParams& p, const Context& ctx);
void sigmoid(const SigmoidParams& p, const Context& ctx);
void sigmoid_gate(const SigmoidGateParams& p, const Context& ctx);
void kda_gate(const KdaGateParams& p, const Context& ctx);
void gated_delta_rule_recurrent(const GatedDeltaRuleParams& p, const Context& ctx);
void gated_delta_rule_chunk(const GatedDeltaRuleParams& p, const Context& ctx);
void gated_rms_norm(const GatedRmsNormParams& p, const Context& ctx);
void situ_mul(const SituMulParams& p, const Context& ctx);
void attn_res_mix(const AttnResMixParams& p, const Context& ctx);

}  // namespace penstock::kernels
