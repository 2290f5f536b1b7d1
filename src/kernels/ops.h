// Penstock's op interface: one Params struct and one entry point per op. The CPU reference (kernels/ref/) is the
// specification of each op; the CUDA backend (kernels/cuda/) implements the same Params. Backends are chosen here, at
// dispatch, from Context::device and nowhere else. Kernels see TensorViews and scalars only, never engine types.
//
// Conventions: row major, last dim contiguous unless a view's strides say otherwise (the reference honours strides on
// every dim it documents as "strided"). "[n, d] f32" comments give shape and dtype. An optional tensor is a view with
// data == nullptr (documented per field); there are no defaulted nullable pointers.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace penstock::kernels {

class Profiler;  // kernels/profile.h

// Where an op runs. CPU: `pool` may be null (single-threaded). CUDA: `stream` is a cudaStream_t. `alloc` provides
// memory for temporaries on `device` (null: the host allocator; must be set for CUDA). `profiler`: opt-in named-scope
// timing of the ops issued under this context (kernels/profile.h ProfileScope); null = off (ops never read it).
// `side_stream`: CUDA, a second stream of the same device on which a kernels::Fork (kernels/fork.h) issues work that
// may overlap the work issued on `stream` after it; null: forks run in line. Ops never read it.
struct Context {
    Device device = Device::kCPU;
    ThreadPool* pool = nullptr;
    void* stream = nullptr;
    Allocator* alloc = nullptr;
    Profiler* profiler = nullptr;
    void* side_stream = nullptr;
};

// The allocator for temporaries of ctx's device.
Allocator& allocator_of(const Context& ctx);

// Device memory a forward can still take for temporaries (SPEC §3, "the memory left outside the static pool"): free =
// what the device has not handed out plus what ctx's caching allocator holds for reuse; total = the device's memory.
// Read at call time. CPU: both 0 (host memory is not budgeted this way).
struct DeviceMemory {
    int64_t free_bytes = 0;
    int64_t total_bytes = 0;
};
DeviceMemory device_memory(const Context& ctx);

// A contiguous byte copy between any two devices the context can reach (host <-> host on CPU; host <-> device and
// device <-> device on CUDA, stream-ordered). Same nbytes, both contiguous.
struct TransferParams {
    TensorView out;
    TensorView in;
};

// out[t, :] = table[ids[t], :]. ids outside [0, vocab) abort (callers validate user input first).
struct EmbeddingParams {
    TensorView out;    // [n_tokens, hidden] f32
    TensorView table;  // [vocab, hidden] f32 or bf16
    TensorView ids;    // [n_tokens] i32
};

// out = weight * (x * rsqrt(mean(x^2) + eps)), fp32 accumulation. out may alias in. Rows may be strided (stride(0)).
// Two optional fusions (off while their data is nullptr), each equal bit for bit to the unfused sequence (SPEC §2):
//   residual:   first in = in + residual in place (AddParams' rounding: the f32 sum rounded once to in's dtype), then
//               x = that sum: the pre-norm residual add of a decoder block ("hidden += sub_out; normed =
//               norm(hidden)"). residual may not alias in or out.
//   quant_out:  then also fp8_act_quant(out) -> quant_out, quant_scale (Fp8ActQuantParams, on out's rounded values):
//               the FP8 input of the projections that read out, without a pass over out of their own.
struct RmsNormParams {
    TensorView out;     // [n_rows, dim] f32
    TensorView in;      // [n_rows, dim] f32
    TensorView weight;  // [dim] f32
    float eps = 1e-6f;
    TensorView residual = {};     // [n_rows, dim] in's dtype, rows may be strided; optional
    TensorView quant_out = {};    // [n_rows, dim] f8e4m3, rows may be strided; optional
    TensorView quant_scale = {};  // [n_rows, ceil(dim / 128)] f32, strided on dims 0 and 1 (Fp8ActQuantParams::scale)
};

// out = ((x - mean) * rsqrt(var + eps)) * weight + bias (biased variance, fp32). bias optional (data == nullptr).
struct LayerNormParams {
    TensorView out;     // [n_rows, dim] f32
    TensorView in;      // [n_rows, dim] f32
    TensorView weight;  // [dim] f32
    TensorView bias;    // [dim] f32, optional
    float eps = 1e-5f;
};

// Rotary embedding in place on x. Angle for pair i of token t: positions[t] * inv_freq[i], computed in fp32;
// cos and sin are multiplied by attention_factor (YaRN's mscale ratio; 1 for default RoPE).
// interleaved: pairs are (x[2i], x[2i+1]) and the output is written de-interleaved as [rotated evens; rotated odds]
//   (Hugging Face's apply_rotary_pos_emb_interleave layout; dot products equal the pairwise form).
// half-split (interleaved == false): pairs are (x[i], x[i + rot_dim/2]) (rotate_half, NeoX layout).
struct RopeParams {
    TensorView x;          // [n_tokens, n_heads, rot_dim] f32, strided on dims 0 and 1
    TensorView positions;  // [n_tokens] i32
    TensorView inv_freq;   // [rot_dim / 2] f32
    float attention_factor = 1.0f;
    bool interleaved = true;
};

// out = alpha * a @ op(b) + beta * out, op(b) = b^T when trans_b (b is a torch Linear weight [n, k]) else b ([k, n]).
// fp32; rows of a, b and out may be strided (stride(0) >= row length), last dim contiguous.
// Batched: a, b and out may all be 3-D, [batch, ...] with the same batch count and any batch strides (one product
// per batch index, e.g. MLA's per-head absorption over strided head slices); the CPU reference is the loop of 2-D
// products, CUDA one strided-batched cuBLASLt call.
struct GemmParams {
    TensorView out;  // [m, n] f32 (or [batch, m, n])
    TensorView a;    // [m, k] f32 (or [batch, m, k])
    TensorView b;    // [n, k] f32 when trans_b, else [k, n] (or [batch, ...])
    bool trans_b = true;
    float alpha = 1.0f;
    float beta = 0.0f;
};

// out = silu(gate) * up, elementwise, f32 math. out may alias gate or up. Rows may be strided (gate and up may be the
// two halves of one [n_rows, 2 * dim] GEMM output). f32 or bf16, one dtype for all three: bf16 inputs are widened
// exactly, the f32 result is rounded once to bf16 at the output (the reference's bf16 contract).
struct SiluMulParams {
    TensorView out;   // [n_rows, dim] f32 or bf16
    TensorView gate;  // [n_rows, dim] same dtype
    TensorView up;    // [n_rows, dim] same dtype
};

// out = a + b, elementwise, fp32; out may alias a or b. Contiguous.
struct AddParams {
    TensorView out;  // [...] f32
    TensorView a;    // [...] f32
    TensorView b;    // [...] f32
};

// Row-wise softmax over the last dim, fp32, max-subtracted. out may alias in.
struct SoftmaxParams {
    TensorView out;  // [n_rows, dim] f32
    TensorView in;   // [n_rows, dim] f32
};

// A host-side promise about an attention call's mask, for backends that plan on the host (the CUDA backend's cuDNN
// SDPA path: docs/design/kernels.md). It applies to every sequence s with len_q(s) > 0 and len_k(s) > 0 (rows of a
// sequence without keys always get out = 0, lse = -inf). The result never depends on it; the CPU reference checks it.
enum class AttentionMaskKind : uint8_t {
    kGeneral,  // no promise
    // causal, q_pos_step == 1, and the last query and the last key share a position:
    // q_pos0[s] + len_q(s) == k_pos0[s] + len_k(s), so query i sees keys j <= i + len_k(s) - len_q(s) (bottom-right
    // aligned diagonal; rows i < len_q(s) - len_k(s) see none).
    kCausalBottomRight,
    // every key is visible to every query row: causal == false, or k_pos0[s] + len_k(s) - 1 <= q_pos0[s].
    kAllVisible,
};

// Variable-length attention with a causal mask in absolute positions, GQA/MQA by head groups
// (query head h reads kv head h / (n_heads / n_kv_heads)). Sequence s owns query rows
// [cu_seqlens_q[s], cu_seqlens_q[s+1]) at positions q_pos0[s] + i, and key rows [cu_seqlens_k[s], cu_seqlens_k[s+1])
// at positions k_pos0[s] + j; when causal, key j is visible to query i iff k_pos0[s] + j <= q_pos0[s] + i.
// Writes out = softmax(scale * q k^T) v and lse = log(sum(exp(scale * q k^T))) (natural log, fp32).
// A row that sees no key gets out = 0 and lse = -inf (so merging it is a no-op). k, v may be strided views of one
// buffer (e.g. the MLA absorbed form uses v = the first d_v columns of k).
struct AttentionParams {
    TensorView out;  // [total_q, n_heads, d_v] f32
    TensorView lse;  // [total_q, n_heads] f32; may be empty (data null: not computed, e.g. one key round)
    TensorView q;    // [total_q, n_heads, d_qk] f32, strided on dims 0 and 1
    TensorView k;    // [total_k, n_kv_heads, d_qk] f32, strided on dims 0 and 1
    TensorView v;    // [total_k, n_kv_heads, d_v] f32, strided on dims 0 and 1
    // Optional (data null: none): the keys' last columns, key row j of kv head h being [k[j, h, :] ; k_rope[j, h, :]]
    // with k then [total_k, n_kv_heads, d_qk - d_rope]. MLA's MHA form passes its one rope head this way, broadcast
    // over the heads by a stride-0 view, so that K's rope columns are never written per head. Not with FP8 q / k / v.
    // A backend whose kernel does not read it concatenates the two into one k first (the reference always does).
    TensorView k_rope{};      // [total_k, n_kv_heads, d_rope] in k's dtype, strided on dims 0 and 1 (stride 0 allowed)
    TensorView cu_seqlens_q;  // [n_seqs + 1] i32
    TensorView cu_seqlens_k;  // [n_seqs + 1] i32
    TensorView q_pos0;        // [n_seqs] i32
    TensorView k_pos0;        // [n_seqs] i32
    float scale = 1.0f;
    bool causal = true;
    // Query row i of sequence s sits at position q_pos0[s] + i * q_pos_step (context parallelism's interleave split
    // gives each rank every cp-th row; 1 otherwise).
    int32_t q_pos_step = 1;
    // Optional host-known hints (the metadata above lives on the device): upper bounds on every sequence's query and
    // key count (0 = unknown) and a promise about the mask. Callers that know their pieces set them so that a backend
    // can plan without reading device memory (which would break CUDA-graph capture); wrong hints are a caller bug.
    int32_t max_seqlen_q = 0;
    int32_t max_seqlen_k = 0;
    AttentionMaskKind mask_kind = AttentionMaskKind::kGeneral;
    // Host hint: every sequence has as many keys as queries (len_k(s) == len_q(s)), e.g. a prefill chunk with no
    // cached prefix. With kCausalBottomRight the diagonal is then also top-left aligned, which is the only causal
    // form some backends take for FP8 (cuDNN's FP8 SDPA on Hopper). Wrong hints are a caller bug.
    bool equal_lengths = false;

    // FP8 attention (opt-in, models::ModelOptions::fp8_attention). When q, k and v are f8e4m3 (all three or none),
    // their true values are e4m3_to_float(x) * descale: q and k per tensor ([1]) or per row and head
    // (q_descale[i, h], k_descale[j, h_kv]; fp8_quantize_heads writes them), v per tensor. out may then
    // be f8e4m3 too: the op writes out_descale[0] = v_descale[0] * kFp8AttnOutHeadroom and
    // out = e4m3(o * (1 / out_descale[0])), o the f32 result (|o| <= max |v| as a convex combination of v rows, so
    // the headroom keeps the FP8 softmax probabilities' rounding from saturating). The reference computes o exactly
    // from the dequantised inputs; the CUDA backend (Penstock's FP8 wgmma kernel, else cuDNN's FP8 SDPA) also rounds
    // the probabilities to e4m3 (scaled by 2^8, resp. 448), so the two agree to FP8 accuracy, not bit for bit. lse
    // stays f32.
    TensorView q_descale{};    // [1] or [total_q, n_heads] f32 (FP8 q), strided on both dims
    TensorView k_descale{};    // [1] or [total_k, n_kv_heads] f32 (FP8 k), strided on both dims
    TensorView v_descale{};    // [1] f32 (FP8 v)
    TensorView out_descale{};  // [1] f32, written (FP8 out)
    // Host hint for per-row k descales: 0 (no promise), or kFp8AttnKeyBlock when k_descale is constant over each
    // block of that many keys of a sequence counted from its first key (keys [128 b, 128 b + 128) of sequence s, per
    // kv head), as fp8_quantize_heads with that block writes it: the CUDA FP8 kernel, which scales a whole key tile
    // at once, takes per-row k descales only with it. Wrong hints are a caller bug.
    int32_t k_descale_block = 0;
    // FP8 out per row and head, in the block-FP8 activation layout a following FP8 GEMM reads (o_proj): when set, out
    // is f8e4m3 with d_v == 128 (one 128-column block per head) and contiguous over (heads, d_v) in each row,
    // out_descale is unused, and the result is bit for bit that of the same call with an out of dtype out_scale_from
    // (bf16 or f32: the activation dtype the unfused caller would have used) followed by fp8_act_quant of those rows
    // viewed [total_q, n_heads * 128]: out_scale[i, h] (written) is row i's scale of block h. The CUDA FP8 kernel
    // writes bf16's from its epilogue; other paths compose the two ops.
    TensorView out_scale{};  // [total_q, n_heads] f32, strided on both dims
    DType out_scale_from = DType::kBF16;
};

inline constexpr float kFp8AttnOutHeadroom = 1.125f;
inline constexpr int32_t kFp8AttnKeyBlock = 128;
inline constexpr int64_t kFp8AttnOutScaleBlock = 128;  // d_v with out_scale: one activation block per head

// out_scale's checks (AttentionParams), then out viewed as fp8_act_quant's [total_q, n_heads * d_v] rows.
inline TensorView fp8_attention_out_rows(const AttentionParams& p) {
    PENSTOCK_CHECK(p.out.dtype == DType::kF8E4M3 && p.out.ndim == 3) << "attention: out_scale needs an f8e4m3 out";
    PENSTOCK_CHECK(p.out_scale_from == DType::kBF16 || p.out_scale_from == DType::kF32)
        << "attention: out_scale_from must be bf16 or f32, got " << dtype_name(p.out_scale_from);
    const int64_t rows = p.out.size(0), heads = p.out.size(1), d_v = p.out.size(2);
    PENSTOCK_CHECK_EQ(d_v, kFp8AttnOutScaleBlock) << "attention: out_scale needs d_v 128 (one block per head)";
    PENSTOCK_CHECK(p.out.stride(2) == 1 && (p.out.stride(1) == d_v || heads <= 1))
        << "attention: out_scale needs out contiguous over (heads, d_v) in each row, got strides " << p.out.stride(0)
        << ", " << p.out.stride(1) << ", " << p.out.stride(2);
    PENSTOCK_CHECK(p.out_scale.dtype == DType::kF32 && p.out_scale.ndim == 2 && p.out_scale.size(0) == rows &&
                   p.out_scale.size(1) == heads && p.out_scale.device == p.out.device)
        << "attention: out_scale must be [" << rows << ", " << heads << "] f32 on out's device, got "
        << p.out_scale.shape_string();
    return p.out.as_strided(0, {rows, heads * d_v}, {rows > 1 ? p.out.stride(0) : heads * d_v, 1});
}

// Merges a partial attention result (in_out, in_lse) into the running (out, lse) by log-sum-exp:
// lse' = log(exp(lse) + exp(in_lse)); out' = out * exp(lse - lse') + in_out * exp(in_lse - lse'). -inf entries are
// neutral. out and lse are updated in place.
struct MergeAttentionParams {
    TensorView out;     // [n_rows, n_heads, d_v] f32
    TensorView lse;     // [n_rows, n_heads] f32
    TensorView in_out;  // [n_rows, n_heads, d_v] f32
    TensorView in_lse;  // [n_rows, n_heads] f32
};

enum class MoeScoring : uint8_t { kSigmoid, kSoftmax };

// MoE top-k routing, DeepSeek noaux_tc with groups, in fp32:
//   s = sigmoid(logits) (or softmax); c = s + bias (bias optional: data == nullptr means 0);
//   when n_group > 1: group score = sum of the top-2 c in the group (max when there is no bias), keep the best
//   topk_group groups, mask the others' c to -inf; ids = top_k of c; weights = s[ids];
//   if norm_topk_prob: weights /= sum(weights) + 1e-20; weights *= routed_scaling_factor.
// Ties break toward the lower expert index. ids within a row are written in descending c order.
struct MoeRoutingParams {
    TensorView topk_ids;      // [n_tokens, top_k] i32 (out)
    TensorView topk_weights;  // [n_tokens, top_k] f32 (out)
    TensorView logits;        // [n_tokens, n_experts] f32
    TensorView bias;          // [n_experts] f32, optional (e_score_correction_bias)
    int n_group = 1;
    int topk_group = 1;
    float routed_scaling_factor = 1.0f;
    bool norm_topk_prob = true;
    MoeScoring scoring = MoeScoring::kSigmoid;
};

// Groups the (token, slot) pairs by expert: sorted_pairs lists pair indices p = token * top_k + slot ordered by
// expert (stable in p); expert_offsets[e] .. expert_offsets[e+1] is expert e's range. ids outside [0, n_experts)
// (e.g. -1 for "dropped") are left out, so expert_offsets[n_experts] may be < n_tokens * top_k.
struct MoeAlignParams {
    TensorView expert_offsets;  // [n_experts + 1] i32 (out)
    TensorView sorted_pairs;    // [n_tokens * top_k] i32 (out; entries past expert_offsets[n_experts] unspecified)
    TensorView topk_ids;        // [n_tokens, top_k] i32
    // Expert parallelism: only experts [expert_begin, expert_begin + n_experts) are this rank's; pair p of expert e
    // lands in group e - expert_begin, pairs of other experts are dropped (as are ids outside [0, n_routed)).
    int32_t expert_begin = 0;
};

// Gathers token rows into expert order: out[i] = in[sorted_pairs[i] / top_k] for i < n_rows, where sorted_pairs'
// first n_rows entries are distinct pairs in [0, n_tokens * top_k) (moe_align's output), so that a backend may copy
// in token order (each token row read once, CUDA) instead. Any dtype (rows are moved as bytes: f32, bf16, e4m3
// activations or their f32 block scales); last dims contiguous.
struct MoePermuteParams {
    TensorView out;           // [n_rows, hidden], in's dtype
    TensorView in;            // [n_tokens, hidden]
    TensorView sorted_pairs;  // [>= n_rows] i32
    int top_k = 1;
};

// Scatters expert outputs back, weighted: out[p / top_k] += topk_weights.flat[p] * expert_out[i], p = sorted_pairs[i],
// for i < n_rows. Accumulates in fp32 into out, in order of increasing slot per token (deterministic).
struct MoeUnpermuteParams {
    TensorView out;           // [n_tokens, hidden] f32 (accumulated into)
    TensorView expert_out;    // [n_rows, hidden] f32
    TensorView sorted_pairs;  // [>= n_rows] i32
    TensorView topk_weights;  // [n_tokens, top_k] f32
};

// Data movement that lets model code stay backend-agnostic (no host loops over device memory).

// out = in over identical shapes with arbitrary strides (stride 0 on `in` broadcasts); f32 <-> bf16 conversion
// allowed (round to nearest even). out must not overlap in.
struct CopyParams {
    TensorView out;  // [d0, ..., dn] f32 or bf16, strided
    TensorView in;   // same shape, f32 or bf16, strided (0 = broadcast)
};

// Every element of out = value (converted to out's dtype). Strided.
struct FillParams {
    TensorView out;  // [...] f32, bf16 or i32
    float value = 0.0f;
};

// Seeded random values (dummy weights, benchmarks): out[i] = mean + stddev * u(seed, i) for the flat index i of the
// contiguous out (f32, or bf16 rounded to nearest even), u uniform in [-sqrt(3), sqrt(3)) from a counter hash
// (kernels/random_hash.h): unit variance, the same bits on every backend.
struct FillRandomParams {
    TensorView out;  // [...] f32 or bf16, contiguous
    uint64_t seed = 0;
    float mean = 0.0f;
    float stddev = 1.0f;
};

// out[i] = in[index[i]] (row gather). index entries must be in [0, in.size(0)).
struct GatherRowsParams {
    TensorView out;    // [n, d] f32/bf16
    TensorView in;     // [m, d] same dtype, rows may be strided
    TensorView index;  // [n] i32
};

// MoE expert GEMM over row groups: for each group g, rows [offsets[g], offsets[g+1]) of out are a's same rows
// times b[g]^T (b[g] is a torch Linear weight [n, k]). Rows at or past offsets[n_groups] are left untouched.
// fp32 accumulation.
struct GroupedGemmParams {
    TensorView out;      // [n_rows, n] f32/bf16
    TensorView a;        // [n_rows, k] f32/bf16
    TensorView b;        // [n_groups, n, k] f32/bf16
    TensorView offsets;  // [n_groups + 1] i32, non-decreasing, offsets[0] = 0
};

// The MoE experts' gate/up GEMM with the gated activation: [gate ; up] = grouped_gemm(a, b) into a [n_rows, 2 I]
// buffer of out's dtype (b[g] = [gate rows I ; up rows I], the layout of a fused gate_up weight), then out =
// silu_mul(gate, up) or situ_mul(gate, up; beta, linear_beta) (ops_kda.h). Bit-exact with that pair of ops on every
// backend (SPEC §2: a fused kernel equals the unfused path); CUDA fuses the activation into the device grouped GEMM's
// epilogue where cuda::grouped_gemm would run that kernel (kernels/cuda/grouped_gemm.h). Rows at or past
// offsets[n_groups] of out are unspecified. `gate_up` is the caller's [n_rows, 2 I] buffer (out's dtype, rows
// contiguous) for the unfused form; a fused backend leaves it untouched, and it may be left empty where
// grouped_gemm_glu_needs_scratch says false.
enum class GluKind : uint8_t { kSilu, kSitu };
struct GroupedGluGemmParams {
    TensorView out;      // [n_rows, I] f32/bf16, rows may be strided
    TensorView a;        // [n_rows, k] f32/bf16
    TensorView b;        // [n_groups, 2 I, k] f32/bf16, contiguous
    TensorView offsets;  // [n_groups + 1] i32, non-decreasing, offsets[0] = 0
    TensorView gate_up;  // [n_rows, 2 I] scratch in out's dtype
    GluKind act = GluKind::kSilu;
    float situ_beta = 4.0f;
    float situ_linear_beta = 25.0f;
};

// DeepSeek-style block-scaled FP8 (kernels/ref/fp8.cc; CUDA: kernels/cuda/fp8_gemm.h). Block size 128 along k for
// activations (one scale per token per 128 columns) and 128 x 128 for weights (the checkpoints' `weight_scale_inv`).
// Scales are multipliers: value = e4m3_to_float(q) * scale.
inline constexpr int64_t kFp8Block = 128;

// Per-token, per-128-column activation quantisation, DeepSeek-V3's inference `act_quant` (kernel.py):
//   for row r and group g (columns [128 g, min(128 g + 128, k))), in fp32 with IEEE division (round to nearest):
//     amax = max(max_j |x[r, j]|, 1e-4)            (the 1e-4 floor keeps all-zero groups finite)
//     s    = amax / 448
//     out[r, j] = e4m3(x[r, j] / s)                 (penstock::float_to_e4m3: torch's .to(torch.float8_e4m3fn))
//     scale[r, g] = s
// NaN inputs are ignored by amax; a NaN quotient (a NaN input, or inf / inf when the group holds an infinity) is
// stored as 0x7f whatever its sign bit: the sign of a generated NaN differs between x86 (negative) and CUDA
// (positive), and torch on CUDA writes 0x7f.
// bf16 input is widened to f32 exactly first. k need not be a multiple of 128 (the last group is shorter).
// `scale` may be strided on both dims: [m, kb] row major, or the transposed layout (stride(0) == 1,
// stride(1) == m) that the cuBLASLt FP8 GEMM wants for its activation scales (Fp8GemmParams::a_scale).
struct Fp8ActQuantParams {
    TensorView out;    // [m, k] f8e4m3, rows may be strided
    TensorView scale;  // [m, ceil(k / 128)] f32, strided on dims 0 and 1
    TensorView in;     // [m, k] f32 or bf16, rows may be strided
};

// Per-tensor FP8 (FP8 attention's q / k / v, models/mla.cc), in fp32:
//   fp8_quantize_tensor:   amax = max |in| over the whole view; s = amax > 0 ? amax / 448 : 1; inv = 1 / s;
//                          out = e4m3(in * inv) (penstock::float_to_e4m3); scale[0] = s (written).
//   fp8_dequantize_tensor: out = e4m3_to_float(in) * scale[0] (read), rounded once to out's dtype.
// in / out are 1- to 3-d views of one shape with the last dim contiguous (strided on the others); scale is a [1] f32
// tensor on the same device (so the scale never travels to the host). A NaN input makes amax, and every output, NaN.
struct Fp8TensorScaleParams {
    TensorView out;    // quantize: f8e4m3; dequantize: f32 or bf16
    TensorView scale;  // [1] f32: written by quantize, read by dequantize
    TensorView in;     // quantize: f32 or bf16; dequantize: f8e4m3
};

// FP8 attention's q and k quantised per head in blocks of rows (models/mla.cc), in fp32: x = [in ; in_tail] along the
// last dim (in_tail optional, e.g. k = [k_nope ; k_pe] with k_pe broadcast over the heads by a stride-0 view, so
// the concatenation is never written in bf16). The rows of each sequence s (cu_seqlens; all n rows one sequence when
// it is empty) form blocks of `block` rows from the sequence's first row (the last block may be shorter); per block
// and head h:
//   amax = max |x[r, h, :]| over the block's rows r; s = amax > 0 ? amax / 448 : 1; inv = 1 / s;
//   out[r, h, :] = e4m3(x[r, h, :] * inv) (penstock::float_to_e4m3; NaN -> 0x7f); scale[r, h] = s for each row r.
// A NaN in a block makes its s, and every output of the block, NaN (as fp8_quantize_tensor). block 1: per row and
// head (q); kFp8AttnKeyBlock with the keys' cu_seqlens: AttentionParams::k_descale_block's promise (k).
struct Fp8HeadQuantParams {
    TensorView out;           // [n, H, d + d_tail] f8e4m3, strided on dims 0 and 1
    TensorView scale;         // [n, H] f32, written, strided on both dims
    TensorView in;            // [n, H, d] f32 or bf16, strided on dims 0 and 1 (the last dim contiguous)
    TensorView in_tail{};     // [n, H, d_tail] of in's dtype (strides may be 0), or empty (d_tail = 0)
    TensorView cu_seqlens{};  // [n_seqs + 1] i32 (0 .. n), or empty: one sequence
    int32_t block = 1;        // rows per block, >= 1
    // Optional RoPE first (FP8 attention's q, whose rope columns would otherwise take a pass of their own): with
    // rope.inv_freq set, columns [rope_col, rope_col + 2 * rope.inv_freq.size(0)) of each row are rotated as
    // kernels::rope rotates them (rope.positions [n] i32 per row, attention_factor, interleaved; rope.x unused),
    // rounded to in's dtype, and then quantised: bit for bit kernels::rope on that slice of in followed by this op.
    // in itself is not written. block 1 and no in_tail only.
    RopeParams rope{};
    int64_t rope_col = 0;
};

// Block-scaled FP8 GEMM (a torch Linear with a DeepSeek FP8 weight on quantised activations):
//   out[i, j] = sum_kb (a_scale[i, kb] * b_scale[j / 128, kb]) * sum_{k in block kb} e4m3(a[i, k]) * e4m3(b[j, k])
// fp32 accumulation; bf16 out rounded once. The reference dequantises both operands per block to f32 and runs an
// fp32 GEMM (the same sum up to fp32 reassociation). k > 0.
struct Fp8GemmParams {
    TensorView out;      // [m, n] f32 or bf16, rows may be strided
    TensorView a;        // [m, k] f8e4m3, rows may be strided
    TensorView a_scale;  // [m, ceil(k / 128)] f32, strided on dims 0 and 1 (see Fp8ActQuantParams::scale)
    TensorView b;        // [n, k] f8e4m3 (torch Linear weight), rows may be strided
    TensorView b_scale;  // [ceil(n / 128), ceil(k / 128)] f32 (weight_scale_inv), rows may be strided
};

// The MoE form of Fp8GemmParams, with GroupedGemmParams' row groups: rows [offsets[g], offsets[g+1]) of out are
// the same rows of a (and a_scale) times expert g's weight b[g] with its scales b_scale[g]. Rows at or past
// offsets[n_groups] are left untouched.
struct Fp8GroupedGemmParams {
    TensorView out;      // [n_rows, n] f32 or bf16, rows may be strided
    TensorView a;        // [n_rows, k] f8e4m3, rows may be strided
    TensorView a_scale;  // [n_rows, ceil(k / 128)] f32, strided on dims 0 and 1
    TensorView b;        // [n_groups, n, k] f8e4m3, contiguous
    TensorView b_scale;  // [n_groups, ceil(n / 128), ceil(k / 128)] f32, contiguous
    TensorView offsets;  // [n_groups + 1] i32, non-decreasing, offsets[0] = 0
};

// The FP8 MoE experts' gate/up GEMM with the gated activation and the down GEMM's input quantisation, i.e. the
// sequence fp8_grouped_gemm(a, a_scale, b, b_scale) -> gate_up ([n_rows, 2 I], b[g] = [gate rows I ; up rows I]),
// silu_mul / situ_mul(gate, up) written over gate_up's gate half (GroupedGluGemmParams' activation), then
// fp8_act_quant(that half) -> out, out_scale. Bit-exact with that sequence on every backend (SPEC §2); CUDA fuses it
// into the FP8 GEMM's epilogue when gate_up is bf16 and I % 128 == 0 (one 128 x 256 tile holds 128 gate and the
// matching 128 up columns: one scale block of the output per row), and leaves gate_up untouched then. Rows at or
// past offsets[n_groups] of out / out_scale are unspecified.
struct Fp8GroupedGluGemmParams {
    TensorView out;        // [n_rows, I] f8e4m3, rows may be strided
    TensorView out_scale;  // [n_rows, ceil(I / 128)] f32, strided on dims 0 and 1
    TensorView a;          // [n_rows, k] f8e4m3, rows may be strided
    TensorView a_scale;    // [n_rows, ceil(k / 128)] f32, strided on dims 0 and 1
    TensorView b;          // [n_groups, 2 I, k] f8e4m3, contiguous
    TensorView b_scale;    // [n_groups, ceil(2 I / 128), ceil(k / 128)] f32, contiguous
    TensorView offsets;    // [n_groups + 1] i32, non-decreasing, offsets[0] = 0
    TensorView gate_up;    // [n_rows, 2 I] f32 or bf16 scratch (the activation dtype), rows contiguous; data may be
                           // null where fp8_grouped_gemm_glu_needs_scratch says false
    GluKind act = GluKind::kSilu;
    float situ_beta = 4.0f;
    float situ_linear_beta = 25.0f;
};

// Paged row cache write: for sequence s, rows [cu_rows[s], cu_rows[s+1]) go to positions pos0[s], pos0[s] + 1, ...
// of that sequence; position p lives in page page_table[s, p / page_size], slot p % page_size.
struct PagedWriteParams {
    TensorView cache;       // [n_pages, page_size, row_dim]
    TensorView rows;        // [n_rows, row_dim] same dtype, rows may be strided
    TensorView page_table;  // [n_seqs, max_pages] i32
    TensorView cu_rows;     // [n_seqs + 1] i32
    TensorView pos0;        // [n_seqs] i32
};

// Paged row cache read, the inverse of PagedWriteParams: out rows [cu_rows[s], cu_rows[s+1]) = positions pos0[s], ...
struct PagedGatherParams {
    TensorView out;         // [n_rows, row_dim], contiguous
    TensorView cache;       // [n_pages, page_size, row_dim]
    TensorView page_table;  // [n_seqs, max_pages] i32
    TensorView cu_rows;     // [n_seqs + 1] i32
    TensorView pos0;        // [n_seqs] i32
};

void transfer(const TransferParams& p, const Context& ctx);
void copy(const CopyParams& p, const Context& ctx);
void fill(const FillParams& p, const Context& ctx);
void fill_random(const FillRandomParams& p, const Context& ctx);
void gather_rows(const GatherRowsParams& p, const Context& ctx);
void grouped_gemm(const GroupedGemmParams& p, const Context& ctx);
void grouped_gemm_glu(const GroupedGluGemmParams& p, const Context& ctx);
// Whether grouped_gemm_glu writes p.gate_up for these parameters (the unfused form: every CPU call; on CUDA where
// the fused kernel does not take the call). When false, gate_up may be left empty. Callers allocate the [n_rows, 2 I]
// buffer only when this says so: it is an MoE layer's largest scratch (3 GiB for Kimi K3 at 16K tokens).
bool grouped_gemm_glu_needs_scratch(const GroupedGluGemmParams& p, const Context& ctx);
void paged_write(const PagedWriteParams& p, const Context& ctx);
void paged_gather(const PagedGatherParams& p, const Context& ctx);
void fp8_act_quant(const Fp8ActQuantParams& p, const Context& ctx);
void fp8_gemm(const Fp8GemmParams& p, const Context& ctx);
void fp8_grouped_gemm(const Fp8GroupedGemmParams& p, const Context& ctx);
void fp8_grouped_gemm_glu(const Fp8GroupedGluGemmParams& p, const Context& ctx);
// As grouped_gemm_glu_needs_scratch, for fp8_grouped_gemm_glu. Here p.gate_up must still describe the buffer's shape
// and dtype (the dtype picks the form); when this returns false its data pointer may be null.
bool fp8_grouped_gemm_glu_needs_scratch(const Fp8GroupedGluGemmParams& p, const Context& ctx);
void fp8_quantize_tensor(const Fp8TensorScaleParams& p, const Context& ctx);
void fp8_dequantize_tensor(const Fp8TensorScaleParams& p, const Context& ctx);
void fp8_quantize_heads(const Fp8HeadQuantParams& p, const Context& ctx);

void embedding(const EmbeddingParams& p, const Context& ctx);
void rms_norm(const RmsNormParams& p, const Context& ctx);
void layer_norm(const LayerNormParams& p, const Context& ctx);
void rope(const RopeParams& p, const Context& ctx);
void gemm(const GemmParams& p, const Context& ctx);
void silu_mul(const SiluMulParams& p, const Context& ctx);
void add(const AddParams& p, const Context& ctx);
void softmax(const SoftmaxParams& p, const Context& ctx);
void attention(const AttentionParams& p, const Context& ctx);
void merge_attention(const MergeAttentionParams& p, const Context& ctx);
void moe_routing(const MoeRoutingParams& p, const Context& ctx);
void moe_align(const MoeAlignParams& p, const Context& ctx);
void moe_permute(const MoePermuteParams& p, const Context& ctx);
void moe_unpermute(const MoeUnpermuteParams& p, const Context& ctx);

}  // namespace penstock::kernels
