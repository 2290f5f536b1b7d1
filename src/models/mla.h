// Multi-head Latent Attention (DeepSeek-V2/V3 MLA) over a paged latent cache, in both prefill forms:
//   kMha: expand the cached latent through kv_b_proj in pieces (<= max_kv_chunk_capacity tokens across the batch),
//         attend per head with K = [k_nope; k_pe], merge the pieces by log-sum-exp;
//   kAbsorbed: fold W_UK into q and W_UV into the output, MQA over the (kv_lora + rope)-d latent.
// Both are algebraically identical (they differ by rounding only). The cache row of a token is [c (kv_lora) ; k_pe
// (rope)], c RMS-normalised and k_pe roped. See reference/MODELS.md §1.4.
#pragma once

#include <optional>
#include <string>

#include "kv_cache/paged_cache.h"
#include "loader/model_config.h"
#include "models/forward_batch.h"
#include "models/linear.h"
#include "models/model.h"
#include "models/rope_table.h"

namespace penstock::models {

struct MlaDims {
    int64_t hidden = 0;
    int64_t n_heads = 0;
    int64_t q_lora_rank = 0;  // 0: plain q_proj
    int64_t kv_lora_rank = 0;
    int64_t qk_nope_head_dim = 0;
    int64_t qk_rope_head_dim = 0;
    int64_t v_head_dim = 0;
    int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
    int64_t latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }

    static MlaDims from_config(const loader::ModelConfig& config);
};

// Family variations of MLA. The default is DeepSeek-V3's.
struct MlaVariant {
    // false: NoPE (Kimi Linear / K3): the "rope" slices of q and of the latent exist but are used unrotated, so the
    // cache row is [c ; k_shared] and `rope` is not read by forward().
    bool rope = true;
    // Kimi K3 gated MLA: attn_out *= sigmoid(x @ g_proj^T) (per head x v-dim) before o_proj; reads `<prefix>.g_proj`.
    bool output_gate = false;
    // ModelOptions::fp8_attention: with a native FP8 kv_b (WeightReader::fp8_native), keep its e4m3 form too, for the
    // FP8 MHA path's K / V (one block-scaled GEMM; kv_b stays dense for everything else).
    bool fp8_attention = false;
};

class MlaAttention final {
public:
    // Reads `<prefix>.{q_a_proj,q_a_layernorm,q_b_proj | q_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj,
    // o_proj}` (and `g_proj` for the gated variant). With tensor parallelism this rank keeps its head range
    // (tp.shard(num_attention_heads)): dims().n_heads is the local head count, and output() all-reduces o_proj's
    // partial sums over the tp group.
    [[nodiscard]] static Result<MlaAttention> load(WeightReader& reader, const std::string& prefix,
                                                   const loader::ModelConfig& config,
                                                   const MlaVariant& variant = MlaVariant{},
                                                   const TensorParallel& tp = TensorParallel{});

    // out[n_tokens, hidden] = MLA(x) for the batch; writes the batch's latent rows of `layer` into `cache` first.
    // x: [n_tokens, hidden] f32 (already input-normalised).
    // xq: x's FP8 rows (fp8_rows_scratch layout, e.g. from the norm that made x) for the FP8 q_a (or q) and kv_a
    // projections, instead of quantising x here (bit-identical); read only when fp8_input().
    void forward(const ForwardBatch& batch, const BatchLayout& layout, const TensorView& x, int64_t layer,
                 kv_cache::PagedRowCache* cache, const RopeTable& rope, float softmax_scale,
                 const ModelOptions& options, const TensorView& out, const kernels::Context& ctx,
                 const Fp8Activations* xq = nullptr) const;
    // True when the projections of x are FP8 (q_a or q, and kv_a): forward() / project() then take xq.
    bool fp8_input() const;

    const MlaDims& dims() const { return dims_; }

    // The pieces forward() is made of, for families that attend differently (DSA: sparse absorbed attention).
    struct Projection {
        Tensor q;   // [n_tokens, n_heads, qk_head_dim] f32, q_pe roped (unless project()'s rope_q is false)
        Tensor cq;  // [n_tokens, q_lora_rank] f32: RMSNorm(q_a_proj(x)), the q latent; undefined without q_lora
        Tensor kv;  // [n_tokens, kv_lora + rope] f32: the cache rows [RMSNorm(c) ; RoPE(k_pe)]
        // x's FP8 rows when project() quantised x itself (FP8 projections and no caller's rows): an FP8 output gate
        // (output()'s x_rows) reads them too.
        std::optional<Fp8Activations> x_rows;
    };
    // rope_q false: q_pe is left unrotated (the FP8 attention's q quantiser rotates it: forward()).
    Projection project(const BatchLayout& layout, const TensorView& x, const RopeTable& rope,
                       const kernels::Context& ctx, const Fp8Activations* xq = nullptr, bool rope_q = true) const;
    // q_abs [n, n_heads, kv_lora + rope] = [q_nope_h @ W_UK_h ; q_pe_h] for q [n, n_heads, qk_head_dim].
    Tensor absorb_q(const TensorView& q, const kernels::Context& ctx) const;
    // The same into q_abs [n, n_heads, kv_lora + rope] (q's dtype, contiguous).
    void absorb_q(const TensorView& q, const TensorView& q_abs, const kernels::Context& ctx) const;
    // attn_out[:, h] = o_lat_h @ W_UV_h^T: o_lat [n, n_heads, kv_lora] -> attn_out [n, n_heads * v_head_dim].
    void absorb_out(const TensorView& o_lat, const TensorView& attn_out, const kernels::Context& ctx) const;
    // out [n, hidden] = o_proj(attn_out) (after the variant's output gate on x), summed over the tp group. attn_rows:
    // attn_out's FP8 rows when the attention wrote them instead (FP8 o_proj, no output gate), else null. x_rows: x's
    // FP8 rows (fp8_quantize_rows), read by an FP8 g_proj instead of quantising x again (bit-identical); may be null.
    void output(const TensorView& x, const TensorView& attn_out, const TensorView& out, const kernels::Context& ctx,
                const Fp8Activations* attn_rows = nullptr, const Fp8Activations* x_rows = nullptr) const;

private:
    // attn_out[n_tokens, n_heads * v_head_dim] from q[n_tokens, n_heads, qk_head_dim] and the cached latents. With
    // attn_rows (non-null) the FP8 path writes o_proj's FP8 rows there instead (AttentionParams::out_scale; bit for
    // bit fp8_act_quant of the bf16 attn_out) and returns true; false: attn_out holds the result.
    // q_rope (non-null): q's rope columns are still unrotated and the FP8 path (which must be the one taken) rotates
    // them in its q quantiser (Fp8HeadQuantParams::rope; q_rope->x unused).
    bool attend_mha(const ForwardBatch& batch, const BatchLayout& layout, const TensorView& q, int64_t layer,
                    const kv_cache::PagedRowCache& cache, float softmax_scale, int64_t capacity, bool fp8_attention,
                    const TensorView& attn_out, Fp8Activations* attn_rows, const kernels::Context& ctx,
                    const kernels::RopeParams* q_rope = nullptr) const;
    // The key rounds attend_mha takes: each expands at most capacity / n_seqs keys per sequence.
    static int64_t mha_key_rounds(const ForwardBatch& batch, int64_t n_seqs, int64_t capacity);
    // Whether attend_mha runs FP8 attention (ModelOptions::fp8_attention): one key round, no context-parallel row
    // split, contiguous query positions, and an attn_out in q's dtype (forward() makes it so). forward() decides q's
    // RoPE by it, attend_mha its path.
    static bool fp8_mha_path(const ForwardBatch& batch, const BatchLayout& layout, bool fp8_attention,
                             int64_t capacity);
    // The one-round MHA attention call `ap` (bf16 q / k / v into ap.out) in FP8 (ModelOptions::fp8_attention): q
    // quantised per row and head, k = [ap.k's first nope columns ; k_pe] per head in blocks of kFp8AttnKeyBlock keys
    // of each sequence (kernels::fp8_quantize_heads; k_pe [total_k, H, rope] is the rope'd latent broadcast over the
    // heads, so K is never concatenated in bf16), v per tensor; the FP8 attention writes ap.out in its own dtype, or
    // attn_rows (non-null: e4m3 rows and their per-head block scales for the FP8 o_proj).
    // k_nope [total_k, H, nope] and v [total_k, H, v] may be strided views (of the kv_b GEMM's output).
    void attend_mha_fp8(const kernels::AttentionParams& ap, const TensorView& k_nope, const TensorView& k_pe,
                        Fp8Activations* attn_rows, const kernels::Context& ctx,
                        const kernels::RopeParams* q_rope = nullptr) const;
    void attend_absorbed(const ForwardBatch& batch, const BatchLayout& layout, const TensorView& q, int64_t layer,
                         const kv_cache::PagedRowCache& cache, float softmax_scale, const TensorView& attn_out,
                         const kernels::Context& ctx) const;

    MlaDims dims_;  // n_heads: this rank's heads
    MlaVariant variant_;
    TensorParallel tp_;
    float rms_eps_ = 1e-6f;
    Linear q_a_proj_, q_b_proj_, q_proj_;
    Tensor q_a_norm_;  // [q_lora_rank] f32
    Linear kv_a_proj_;
    Tensor kv_a_norm_;  // [kv_lora_rank] f32
    Linear kv_b_proj_;  // [n_heads * (nope + v), kv_lora_rank]: per head rows [0, nope) = W_UK, [nope, nope + v) = W_UV
    // kv_b's e4m3 form (MlaVariant::fp8_attention with a native FP8 kv_b; kv_b_proj_ is then its dequantisation), for
    // the FP8 MHA path: K's nope columns and V of a key round in one FP8 linear of the latents, as DeepSeek-V3's own
    // FP8 inference computes them (the latents quantised per 128 columns). Undefined otherwise.
    Linear kv_b_fp8_;
    Linear o_proj_;
    Linear g_proj_;  // [n_heads * v_head_dim, hidden], gated variant only
};

}  // namespace penstock::models
