// Reference varlen attention (causal in absolute positions, GQA/MQA) and the log-sum-exp merge of partial results.
// attention: one task per (query row, head), range [0, total_q * n_heads). Scores, the max-subtracted softmax, lse and
// the weighted sum of v accumulate in double and are rounded to f32 once on write, so results never depend on the
// thread count. A row that sees no key writes out = 0 and lse = -inf. The host-side hints (max_seqlen_q/k, mask_kind)
// are checked against the metadata, never used. FP8 q / k / v (per-tensor or per-row descales) are dequantised to f32
// first and an FP8 out re-quantised after (kernels/ops.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/ref/ref_ops.h"

namespace penstock::ref {

namespace {

void check_f32_3d(const TensorView& v, int64_t n0, int64_t n1, int64_t n2, const char* name) {
    PENSTOCK_CHECK_EQ(v.ndim, 3) << name;
    PENSTOCK_CHECK(v.dtype == DType::kF32) << name << " must be f32";
    PENSTOCK_CHECK_EQ(v.size(0), n0) << name;
    PENSTOCK_CHECK_EQ(v.size(1), n1) << name;
    PENSTOCK_CHECK_EQ(v.size(2), n2) << name;
    PENSTOCK_CHECK_EQ(v.stride(2), 1) << name << ": last dim must be contiguous";
}

void check_f32_2d(const TensorView& v, int64_t n0, int64_t n1, const char* name) {
    PENSTOCK_CHECK_EQ(v.ndim, 2) << name;
    PENSTOCK_CHECK(v.dtype == DType::kF32) << name << " must be f32";
    PENSTOCK_CHECK_EQ(v.size(0), n0) << name;
    PENSTOCK_CHECK_EQ(v.size(1), n1) << name;
}

// Reads an i32 vector of length n.
std::vector<int64_t> read_i32(const TensorView& v, int64_t n, const char* name) {
    PENSTOCK_CHECK_EQ(v.ndim, 1) << name;
    PENSTOCK_CHECK(v.dtype == DType::kI32) << name << " must be i32";
    PENSTOCK_CHECK_EQ(v.size(0), n) << name;
    std::vector<int64_t> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = *v.at<const int32_t>({i});
    return out;
}

// Checks cu_seqlens: starts at 0, non-decreasing, ends at total.
void check_cu_seqlens(const std::vector<int64_t>& cu, int64_t total, const char* name) {
    PENSTOCK_CHECK_EQ(cu.front(), 0) << name;
    for (size_t s = 0; s + 1 < cu.size(); ++s) PENSTOCK_CHECK_LE(cu[s], cu[s + 1]) << name << " at " << s;
    PENSTOCK_CHECK_EQ(cu.back(), total) << name;
}

// [k ; k_rope] along the last dim as one new contiguous tensor (AttentionParams::k_rope).
Tensor concat_k_rope(const TensorView& k, const TensorView& k_rope, ThreadPool* pool) {
    PENSTOCK_CHECK(k.ndim == 3 && k_rope.ndim == 3) << "attention: k and k_rope must be 3-d";
    PENSTOCK_CHECK(k_rope.size(0) == k.size(0) && k_rope.size(1) == k.size(1) && k_rope.dtype == k.dtype)
        << "attention: k_rope " << k_rope.shape_string() << " must match k " << k.shape_string()
        << " in rows, heads and dtype";
    const int64_t dk = k.size(2), dr = k_rope.size(2);
    Tensor out = Tensor::empty({k.size(0), k.size(1), dk + dr}, k.dtype);
    copy({.out = out.view().slice(2, 0, dk), .in = k}, pool);
    copy({.out = out.view().slice(2, dk, dk + dr), .in = k_rope}, pool);
    return out;
}

// Checks p's host-side hints (kernels/ops.h) against the metadata. They never change the result here, but a backend
// that plans from a wrong one would compute something else, so a wrong hint aborts as the caller bug it is.
void check_hints(const kernels::AttentionParams& p, const std::vector<int64_t>& cu_q, const std::vector<int64_t>& cu_k,
                 const std::vector<int64_t>& q_pos0, const std::vector<int64_t>& k_pos0) {
    PENSTOCK_CHECK(p.max_seqlen_q >= 0 && p.max_seqlen_k >= 0) << "attention: max_seqlen hints must be >= 0";
    for (size_t s = 0; s + 1 < cu_q.size(); ++s) {
        const int64_t len_q = cu_q[s + 1] - cu_q[s];
        const int64_t len_k = cu_k[s + 1] - cu_k[s];
        if (p.max_seqlen_q > 0) PENSTOCK_CHECK_LE(len_q, p.max_seqlen_q) << "attention: max_seqlen_q hint, seq " << s;
        if (p.max_seqlen_k > 0) PENSTOCK_CHECK_LE(len_k, p.max_seqlen_k) << "attention: max_seqlen_k hint, seq " << s;
        if (p.equal_lengths)
            PENSTOCK_CHECK_EQ(len_q, len_k) << "attention: equal_lengths hint broken by sequence " << s;
        if (len_q == 0 || len_k == 0) continue;  // the mask promise covers sequences with rows and keys only
        switch (p.mask_kind) {
            case kernels::AttentionMaskKind::kGeneral:
                break;
            case kernels::AttentionMaskKind::kCausalBottomRight:
                PENSTOCK_CHECK(p.causal && p.q_pos_step == 1)
                    << "attention: kCausalBottomRight needs causal and q_pos_step 1";
                PENSTOCK_CHECK_EQ(q_pos0[s] + len_q, k_pos0[s] + len_k)
                    << "attention: kCausalBottomRight promise broken by sequence " << s;
                break;
            case kernels::AttentionMaskKind::kAllVisible:
                PENSTOCK_CHECK(!p.causal || k_pos0[s] + len_k - 1 <= q_pos0[s])
                    << "attention: kAllVisible promise broken by sequence " << s;
                break;
        }
    }
}

// AttentionParams::k_descale_block's promise: the per-row k descales are equal within each block of that many keys of
// a sequence (from its first key), per kv head.
void check_k_descale_blocks(const kernels::AttentionParams& p) {
    const int64_t n_seqs = p.cu_seqlens_k.size(0) - 1, b = p.k_descale_block;
    for (int64_t s = 0; s < n_seqs; ++s) {
        const int64_t k0 = *p.cu_seqlens_k.at<int32_t>({s}), k1 = *p.cu_seqlens_k.at<int32_t>({s + 1});
        for (int64_t j = k0; j < k1; ++j) {
            const int64_t first = k0 + (j - k0) / b * b;
            for (int64_t h = 0; h < p.k.size(1); ++h) {
                const float a = *p.k_descale.at<float>({j, h}), f = *p.k_descale.at<float>({first, h});
                PENSTOCK_CHECK(a == f || (std::isnan(a) && std::isnan(f)))
                    << "attention: k_descale_block " << b << " promised, but key " << j - k0 << " of sequence " << s
                    << " (head " << h << ") has descale " << a << " where its block's first key has " << f;
            }
        }
    }
}

// FP8 attention (kernels/ops.h): the e4m3 inputs dequantised to f32 (per tensor or per row and head), the f32
// attention, out re-quantised with out_descale = v_descale * kFp8AttnOutHeadroom.
void attention_fp8(const kernels::AttentionParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK(p.q.dtype == DType::kF8E4M3 && p.k.dtype == DType::kF8E4M3 && p.v.dtype == DType::kF8E4M3)
        << "attention: q, k and v are all f8e4m3 or none is";
    PENSTOCK_CHECK(p.q_descale.data != nullptr && p.k_descale.data != nullptr && p.v_descale.data != nullptr)
        << "attention: FP8 q, k, v need q_descale, k_descale and v_descale";
    PENSTOCK_CHECK(p.v_descale.numel() == 1) << "attention: v_descale is per tensor ([1])";
    // x * descale, the descale per tensor ([1]) or per row and head ([rows, heads])
    auto widen = [&](const TensorView& x, const TensorView& descale, const char* name) {
        Tensor f = Tensor::empty({x.size(0), x.size(1), x.size(2)}, DType::kF32);
        if (descale.numel() == 1) {
            fp8_dequantize_tensor({.out = f, .scale = descale, .in = x}, pool);
            return f;
        }
        PENSTOCK_CHECK(descale.device == Device::kCPU && descale.dtype == DType::kF32 && descale.ndim == 2 &&
                       descale.size(0) == x.size(0) && descale.size(1) == x.size(1))
            << "attention: " << name << " must be [1] or [" << x.size(0) << ", " << x.size(1) << "] f32, got "
            << descale.shape_string();
        PENSTOCK_CHECK(x.stride(2) == 1 || x.size(2) <= 1) << "attention: last dims must be contiguous";
        for (int64_t i = 0; i < x.size(0); ++i) {
            for (int64_t h = 0; h < x.size(1); ++h) {
                const float s = *descale.at<float>({i, h});
                const auto* src = x.at<uint8_t>({i, h});
                float* dst = f.ptr<float>() + (i * x.size(1) + h) * x.size(2);
                for (int64_t c = 0; c < x.size(2); ++c) dst[c] = e4m3_to_float(src[c]) * s;
            }
        }
        return f;
    };
    if (p.k_descale_block > 0 && p.k_descale.numel() != 1) check_k_descale_blocks(p);
    const Tensor q = widen(p.q, p.q_descale, "q_descale"), k = widen(p.k, p.k_descale, "k_descale"),
                 v = widen(p.v, p.v_descale, "v_descale");
    kernels::AttentionParams f = p;
    f.q = q;
    f.k = k;
    f.v = v;

    if (p.out.dtype != DType::kF8E4M3) {
        PENSTOCK_CHECK(p.out_scale.data == nullptr) << "attention: out_scale needs an f8e4m3 out";
        attention(f, pool);
        return;
    }
    // Per row and head (out_scale): the result in out_scale_from, then fp8_act_quant of its rows.
    if (p.out_scale.data != nullptr) {
        const TensorView o2 = kernels::fp8_attention_out_rows(p);
        Tensor o = Tensor::empty({p.out.size(0), p.out.size(1), p.out.size(2)}, DType::kF32);
        f.out = o;
        f.out_scale = {};
        attention(f, pool);
        if (p.out_scale_from == DType::kBF16) {  // rounded once, as a bf16 out
            Tensor b = Tensor::empty({o.size(0), o.size(1), o.size(2)}, DType::kBF16);
            copy({.out = b, .in = o}, pool);
            o = std::move(b);
        }
        fp8_act_quant({.out = o2, .scale = p.out_scale, .in = o.view().reshape({o2.size(0), o2.size(1)})}, pool);
        return;
    }
    PENSTOCK_CHECK(p.out_descale.device == Device::kCPU && p.out_descale.dtype == DType::kF32 &&
                   p.out_descale.numel() == 1 && p.out_descale.data != nullptr)
        << "attention: FP8 out needs a [1] f32 out_descale";
    PENSTOCK_CHECK_EQ(p.out.ndim, 3) << "attention out";
    Tensor o = Tensor::empty({p.out.size(0), p.out.size(1), p.out.size(2)}, DType::kF32);
    f.out = o;
    attention(f, pool);
    const float out_descale = *static_cast<const float*>(p.v_descale.data) * kernels::kFp8AttnOutHeadroom;
    const float inv = 1.0f / out_descale;
    PENSTOCK_CHECK(p.out.stride(2) == 1 || p.out.size(2) <= 1) << "attention: out last dim must be contiguous";
    for (int64_t i = 0; i < o.size(0); ++i) {
        for (int64_t h = 0; h < o.size(1); ++h) {
            const float* src = o.ptr<float>() + (i * o.size(1) + h) * o.size(2);
            auto* dst = p.out.at<uint8_t>({i, h});
            for (int64_t c = 0; c < o.size(2); ++c) {
                const float y = src[c] * inv;
                dst[c] = std::isnan(y) ? uint8_t{0x7f} : float_to_e4m3(y);
            }
        }
    }
    *static_cast<float*>(p.out_descale.data) = out_descale;
}

}  // namespace

void attention(const kernels::AttentionParams& p, ThreadPool* pool) {
    if (p.k_rope.data != nullptr) {  // K = [k ; k_rope] per key row and kv head (kernels/ops.h)
        PENSTOCK_CHECK(p.k.dtype != DType::kF8E4M3) << "attention: k_rope is not taken with FP8 q / k / v";
        kernels::AttentionParams joined = p;
        joined.k_rope = TensorView{};
        const Tensor k = concat_k_rope(p.k, p.k_rope, pool);
        joined.k = k;
        attention(joined, pool);
        return;
    }
    if (p.q.dtype == DType::kF8E4M3 || p.k.dtype == DType::kF8E4M3 || p.v.dtype == DType::kF8E4M3) {
        attention_fp8(p, pool);
        return;
    }
    PENSTOCK_CHECK(p.out.dtype != DType::kF8E4M3) << "attention: FP8 out needs FP8 q, k and v";
    if (p.lse.data == nullptr) {  // lse not wanted: computed into a scratch tensor
        PENSTOCK_CHECK_EQ(p.q.ndim, 3);
        Tensor lse = Tensor::empty({p.q.size(0), p.q.size(1)}, DType::kF32);
        kernels::AttentionParams with_lse = p;
        with_lse.lse = lse;
        attention(with_lse, pool);
        return;
    }
    PENSTOCK_CHECK_EQ(p.q.ndim, 3);
    PENSTOCK_CHECK_EQ(p.k.ndim, 3);
    PENSTOCK_CHECK_EQ(p.v.ndim, 3);
    const int64_t total_q = p.q.size(0);
    const int64_t n_heads = p.q.size(1);
    const int64_t d_qk = p.q.size(2);
    const int64_t total_k = p.k.size(0);
    const int64_t n_kv_heads = p.k.size(1);
    const int64_t d_v = p.v.size(2);
    check_f32_3d(p.q, total_q, n_heads, d_qk, "attention q");
    check_f32_3d(p.k, total_k, n_kv_heads, d_qk, "attention k");
    check_f32_3d(p.v, total_k, n_kv_heads, d_v, "attention v");
    check_f32_3d(p.out, total_q, n_heads, d_v, "attention out");
    check_f32_2d(p.lse, total_q, n_heads, "attention lse");
    PENSTOCK_CHECK_GT(n_kv_heads, 0);
    PENSTOCK_CHECK_EQ(n_heads % n_kv_heads, 0) << "attention: n_heads must be a multiple of n_kv_heads";
    PENSTOCK_CHECK_EQ(p.cu_seqlens_q.ndim, 1);
    const int64_t n_seqs = p.cu_seqlens_q.size(0) - 1;
    PENSTOCK_CHECK_GE(n_seqs, 0);
    const std::vector<int64_t> cu_q = read_i32(p.cu_seqlens_q, n_seqs + 1, "cu_seqlens_q");
    const std::vector<int64_t> cu_k = read_i32(p.cu_seqlens_k, n_seqs + 1, "cu_seqlens_k");
    const std::vector<int64_t> q_pos0 = read_i32(p.q_pos0, n_seqs, "q_pos0");
    const std::vector<int64_t> k_pos0 = read_i32(p.k_pos0, n_seqs, "k_pos0");
    check_cu_seqlens(cu_q, total_q, "cu_seqlens_q");
    check_cu_seqlens(cu_k, total_k, "cu_seqlens_k");
    check_hints(p, cu_q, cu_k, q_pos0, k_pos0);

    // Sequence of each query row.
    std::vector<int64_t> row_seq(static_cast<size_t>(total_q));
    for (int64_t s = 0; s < n_seqs; ++s) {
        for (int64_t r = cu_q[static_cast<size_t>(s)]; r < cu_q[static_cast<size_t>(s) + 1]; ++r) {
            row_seq[static_cast<size_t>(r)] = s;
        }
    }
    const int64_t group = n_heads / n_kv_heads;

    parallel_for(pool, total_q * n_heads, /*grain=*/4, [&](int64_t begin, int64_t end) {
        std::vector<double> scores;
        std::vector<double> acc(static_cast<size_t>(d_v));
        for (int64_t item = begin; item < end; ++item) {
            const int64_t r = item / n_heads;  // range [0, total_q)
            const int64_t h = item % n_heads;  // range [0, n_heads)
            const int64_t kvh = h / group;
            const auto s = static_cast<size_t>(row_seq[static_cast<size_t>(r)]);
            const int64_t q_pos = q_pos0[s] + (r - cu_q[s]) * p.q_pos_step;
            const int64_t len_k = cu_k[s + 1] - cu_k[s];
            // Keys are at increasing positions k_pos0 + j, so the visible ones are a prefix [0, n_visible).
            int64_t n_visible = len_k;
            if (p.causal) n_visible = std::clamp<int64_t>(q_pos - k_pos0[s] + 1, 0, len_k);

            float* out = p.out.at<float>({r, h});
            float* lse = p.lse.at<float>({r, h});
            if (n_visible == 0) {
                for (int64_t i = 0; i < d_v; ++i) out[i] = 0.0f;
                *lse = -std::numeric_limits<float>::infinity();
                continue;
            }
            const float* q = p.q.at<const float>({r, h});
            scores.assign(static_cast<size_t>(n_visible), 0.0);
            double max_score = -std::numeric_limits<double>::infinity();
            for (int64_t j = 0; j < n_visible; ++j) {
                const float* k = p.k.at<const float>({cu_k[s] + j, kvh});
                double dot = 0.0;
                for (int64_t i = 0; i < d_qk; ++i) dot += static_cast<double>(q[i]) * k[i];
                const double score = static_cast<double>(p.scale) * dot;
                scores[static_cast<size_t>(j)] = score;
                max_score = std::max(max_score, score);
            }
            double sum = 0.0;
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t j = 0; j < n_visible; ++j) {
                const double w = std::exp(scores[static_cast<size_t>(j)] - max_score);
                sum += w;
                const float* v = p.v.at<const float>({cu_k[s] + j, kvh});
                for (int64_t i = 0; i < d_v; ++i) acc[static_cast<size_t>(i)] += w * v[i];
            }
            for (int64_t i = 0; i < d_v; ++i) out[i] = static_cast<float>(acc[static_cast<size_t>(i)] / sum);
            *lse = static_cast<float>(max_score + std::log(sum));
        }
    });
}

void merge_attention(const kernels::MergeAttentionParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.out.ndim, 3);
    const int64_t n_rows = p.out.size(0);
    const int64_t n_heads = p.out.size(1);
    const int64_t d_v = p.out.size(2);
    check_f32_3d(p.out, n_rows, n_heads, d_v, "merge_attention out");
    check_f32_3d(p.in_out, n_rows, n_heads, d_v, "merge_attention in_out");
    check_f32_2d(p.lse, n_rows, n_heads, "merge_attention lse");
    check_f32_2d(p.in_lse, n_rows, n_heads, "merge_attention in_lse");

    parallel_for(pool, n_rows * n_heads, /*grain=*/16, [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
            const int64_t r = item / n_heads;
            const int64_t h = item % n_heads;
            float* out = p.out.at<float>({r, h});
            float* lse = p.lse.at<float>({r, h});
            const float* in_out = p.in_out.at<const float>({r, h});
            const float in_lse = *p.in_lse.at<const float>({r, h});
            const double a = *lse;
            const double b = in_lse;
            if (std::isinf(b) && b < 0) continue;  // nothing to merge (also covers both -inf)
            if (std::isinf(a) && a < 0) {          // running result is empty: take the partial one
                for (int64_t i = 0; i < d_v; ++i) out[i] = in_out[i];
                *lse = in_lse;
                continue;
            }
            const double m = std::max(a, b);
            const double merged = m + std::log(std::exp(a - m) + std::exp(b - m));
            const double wa = std::exp(a - merged);
            const double wb = std::exp(b - merged);
            for (int64_t i = 0; i < d_v; ++i) out[i] = static_cast<float>(wa * out[i] + wb * in_out[i]);
            *lse = static_cast<float>(merged);
        }
    });
}

}  // namespace penstock::ref
