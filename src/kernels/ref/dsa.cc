// Reference DSA ops (see kernels/ops_dsa.h for the contracts).
// dsa_indexer_logits: one task per query row, range [0, n_rows) (keys [0, q_pos[r]] with q_pos, else all); each
//   head's q.k accumulates in double and is rounded to f32 once, the per-head scale / ReLU / gate products are f32
//   (as Hugging Face computes them), the sum over heads accumulates in double and is rounded once.
// dsa_topk: one task per row; the selection replays ATen's CPU topk (libstdc++ nth_element / partial_sort with the
//   same comparator on the same (value, index) queue), which is what fixes the choice among exactly tied logits.
// dsa_quantize_fp8: one task per row; Walsh-Hadamard butterflies in f32, then the scale, then one e4m3 rounding.
// sparse_mla_attention: one task per (row, head); the same double accumulation, in the same key order, as
//   ref::attention, so a row listing all its visible keys in ascending order reproduces it bit for bit.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/ref/ref_dsa.h"

namespace penstock::ref {

namespace {

void check_2d(const TensorView& v, int64_t n0, int64_t n1, DType dtype, const char* name) {
    PENSTOCK_CHECK_EQ(v.ndim, 2) << name;
    PENSTOCK_CHECK(v.dtype == dtype) << name << " has dtype " << dtype_name(v.dtype) << ", want " << dtype_name(dtype);
    PENSTOCK_CHECK_EQ(v.size(0), n0) << name;
    PENSTOCK_CHECK_EQ(v.size(1), n1) << name;
    PENSTOCK_CHECK_EQ(v.stride(1), 1) << name << ": last dim must be contiguous";
}

void check_1d(const TensorView& v, int64_t n, DType dtype, const char* name) {
    PENSTOCK_CHECK_EQ(v.ndim, 1) << name;
    PENSTOCK_CHECK(v.dtype == dtype) << name << " has dtype " << dtype_name(v.dtype) << ", want " << dtype_name(dtype);
    PENSTOCK_CHECK_EQ(v.size(0), n) << name;
}

// Element i of a row of f32 or e4m3 values as f32.
inline float load(const TensorView& v, const void* row, int64_t i) {
    if (v.dtype == DType::kF32) return static_cast<const float*>(row)[i];
    return e4m3_to_float(static_cast<const uint8_t*>(row)[i]);
}

}  // namespace

void dsa_indexer_logits(const kernels::DsaIndexerLogitsParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.q.ndim, 3);
    const int64_t n_rows = p.q.size(0);
    const int64_t n_heads = p.q.size(1);
    const int64_t head_dim = p.q.size(2);
    const int64_t n_keys = p.k.size(0);
    const bool fp8 = p.q.dtype == DType::kF8E4M3;
    PENSTOCK_CHECK(p.q.dtype == DType::kF32 || fp8) << "dsa_indexer_logits: q must be f32 or f8e4m3";
    PENSTOCK_CHECK(p.k.dtype == p.q.dtype) << "dsa_indexer_logits: q and k dtypes differ";
    PENSTOCK_CHECK_EQ(p.q.stride(2), 1);
    check_2d(p.k, n_keys, head_dim, p.q.dtype, "dsa_indexer_logits k");
    check_2d(p.weights, n_rows, n_heads, DType::kF32, "dsa_indexer_logits weights");
    check_2d(p.logits, n_rows, n_keys, DType::kF32, "dsa_indexer_logits logits");
    if (fp8) {
        check_2d(p.q_scale, n_rows, n_heads, DType::kF32, "dsa_indexer_logits q_scale");
        check_1d(p.k_scale, n_keys, DType::kF32, "dsa_indexer_logits k_scale");
    } else {
        PENSTOCK_CHECK(p.q_scale.data == nullptr && p.k_scale.data == nullptr) << "scales are for fp8 keys only";
    }
    const bool causal = p.q_pos.data != nullptr;
    if (causal) check_1d(p.q_pos, n_rows, DType::kI32, "dsa_indexer_logits q_pos");
    const size_t elem = fp8 ? 1 : sizeof(float);

    parallel_for(pool, n_rows, /*grain=*/1, [&](int64_t begin, int64_t end) {
        std::vector<float> gate(static_cast<size_t>(n_heads));
        for (int64_t r = begin; r < end; ++r) {  // range [0, n_rows)
            const float* w = p.weights.at<const float>({r});
            for (int64_t h = 0; h < n_heads; ++h) {
                // f32: the gate multiplies ReLU(scale * dot); fp8: it also carries the q scale and softmax scale.
                gate[static_cast<size_t>(h)] = fp8 ? w[h] * *p.q_scale.at<const float>({r, h}) * p.scale : w[h];
            }
            float* out = p.logits.at<float>({r});
            // With q_pos only the visible keys are scored (the others are left as they were).
            const int64_t end_key =
                causal ? std::clamp<int64_t>(int64_t{*p.q_pos.at<const int32_t>({r})} + 1, 0, n_keys) : n_keys;
            for (int64_t s = 0; s < end_key; ++s) {
                const void* k = static_cast<const char*>(p.k.data) + static_cast<size_t>(s * p.k.stride(0)) * elem;
                double acc = 0.0;
                for (int64_t h = 0; h < n_heads; ++h) {
                    const void* q = static_cast<const char*>(p.q.data) +
                                    static_cast<size_t>(r * p.q.stride(0) + h * p.q.stride(1)) * elem;
                    double dot = 0.0;
                    for (int64_t i = 0; i < head_dim; ++i) {
                        dot += static_cast<double>(load(p.q, q, i)) * static_cast<double>(load(p.k, k, i));
                    }
                    const float score = fp8 ? static_cast<float>(dot) : p.scale * static_cast<float>(dot);
                    const float relu = score > 0.0f ? score : 0.0f;
                    acc += static_cast<double>(gate[static_cast<size_t>(h)] * relu);
                }
                out[s] = fp8 ? static_cast<float>(acc) * *p.k_scale.at<const float>({s}) : static_cast<float>(acc);
            }
        }
    });
}

void dsa_topk(const kernels::DsaTopkParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.indices.ndim, 2);
    const int64_t n_rows = p.indices.size(0);
    const int64_t top_k = p.indices.size(1);
    PENSTOCK_CHECK_GT(top_k, 0);
    check_2d(p.indices, n_rows, top_k, DType::kI32, "dsa_topk indices");
    PENSTOCK_CHECK_EQ(p.logits.ndim, 2);
    const int64_t n_keys = p.logits.size(1);
    check_2d(p.logits, n_rows, n_keys, DType::kF32, "dsa_topk logits");
    check_1d(p.q_pos, n_rows, DType::kI32, "dsa_topk q_pos");
    const int64_t row_len = p.torch_row_len == 0 ? n_keys : p.torch_row_len;
    PENSTOCK_CHECK_GE(row_len, n_keys) << "dsa_topk: torch_row_len must cover every key";

    parallel_for(pool, n_rows, /*grain=*/1, [&](int64_t begin, int64_t end) {
        using Elem = std::pair<float, int64_t>;
        // ATen's comparator for largest=true: NaN first, then descending.
        const auto greater = [](const Elem& x, const Elem& y) {
            return (std::isnan(x.first) && !std::isnan(y.first)) || (x.first > y.first);
        };
        std::vector<Elem> queue;
        std::vector<int32_t> chosen;
        for (int64_t r = begin; r < end; ++r) {  // range [0, n_rows)
            const int64_t q_pos = *p.q_pos.at<const int32_t>({r});
            const int64_t visible = std::clamp<int64_t>(q_pos + 1, 0, n_keys);
            chosen.clear();
            if (visible <= top_k) {
                for (int64_t s = 0; s < visible; ++s) chosen.push_back(static_cast<int32_t>(s));
            } else {
                const float* logits = p.logits.at<const float>({r});
                queue.resize(static_cast<size_t>(row_len));
                for (int64_t s = 0; s < row_len; ++s) {
                    queue[static_cast<size_t>(s)] = {s < visible ? logits[s] : -FLT_MAX, s};
                }
                if (top_k * 64 <= row_len) {
                    std::partial_sort(queue.begin(), queue.begin() + top_k, queue.end(), greater);
                } else {
                    std::nth_element(queue.begin(), queue.begin() + (top_k - 1), queue.end(), greater);
                }
                for (int64_t j = 0; j < top_k; ++j) {
                    const int64_t s = queue[static_cast<size_t>(j)].second;
                    if (s < visible) chosen.push_back(static_cast<int32_t>(s));  // masked picks (NaN rows) drop out
                }
                std::sort(chosen.begin(), chosen.end());
            }
            int32_t* out = p.indices.at<int32_t>({r});
            for (int64_t j = 0; j < top_k; ++j) {
                out[j] = j < static_cast<int64_t>(chosen.size()) ? chosen[static_cast<size_t>(j)] : -1;
            }
        }
    });
}

void dsa_quantize_fp8(const kernels::DsaQuantizeFp8Params& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.in.ndim, 2);
    const int64_t n_rows = p.in.size(0);
    const int64_t dim = p.in.size(1);
    check_2d(p.in, n_rows, dim, DType::kF32, "dsa_quantize_fp8 in");
    check_2d(p.out, n_rows, dim, DType::kF8E4M3, "dsa_quantize_fp8 out");
    check_1d(p.scale, n_rows, DType::kF32, "dsa_quantize_fp8 scale");
    PENSTOCK_CHECK(!p.rotate || (dim > 0 && (dim & (dim - 1)) == 0)) << "Hadamard rotation needs a power-of-two dim";
    const float norm = 1.0f / std::sqrt(static_cast<float>(dim));

    parallel_for(pool, n_rows, /*grain=*/8, [&](int64_t begin, int64_t end) {
        std::vector<float> y(static_cast<size_t>(dim));
        for (int64_t r = begin; r < end; ++r) {  // range [0, n_rows)
            const float* x = p.in.at<const float>({r});
            std::copy_n(x, dim, y.begin());
            if (p.rotate) {
                // Sylvester order: H_2n = [[H, H], [H, -H]]; stage h pairs (i, i + h) within blocks of 2h.
                for (int64_t h = 1; h < dim; h *= 2) {
                    for (int64_t i = 0; i < dim; i += 2 * h) {
                        for (int64_t j = i; j < i + h; ++j) {
                            const float a = y[static_cast<size_t>(j)];
                            const float b = y[static_cast<size_t>(j + h)];
                            y[static_cast<size_t>(j)] = a + b;
                            y[static_cast<size_t>(j + h)] = a - b;
                        }
                    }
                }
                for (float& v : y) v *= norm;
            }
            float amax = 0.0f;
            for (float v : y) amax = std::max(amax, std::fabs(v));
            float s = std::max(amax, 1e-4f) / 448.0f;
            if (p.ue8m0) s = std::exp2(std::ceil(std::log2(s)));
            uint8_t* out = p.out.at<uint8_t>({r});
            for (int64_t i = 0; i < dim; ++i) {
                out[i] = float_to_e4m3(std::clamp(y[static_cast<size_t>(i)] / s, -448.0f, 448.0f));
            }
            *p.scale.at<float>({r}) = s;
        }
    });
}

void sparse_mla_attention(const kernels::SparseMlaAttentionParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.q.ndim, 3);
    const int64_t n_rows = p.q.size(0);
    const int64_t n_heads = p.q.size(1);
    const int64_t d_qk = p.q.size(2);
    const int64_t n_slots = p.kv.size(0);
    const int64_t d_v = p.v.size(1);
    PENSTOCK_CHECK(p.q.dtype == DType::kF32) << "sparse_mla_attention: q must be f32";
    PENSTOCK_CHECK_EQ(p.q.stride(2), 1);
    check_2d(p.kv, n_slots, d_qk, DType::kF32, "sparse_mla_attention kv");
    check_2d(p.v, n_slots, d_v, DType::kF32, "sparse_mla_attention v");
    PENSTOCK_CHECK_EQ(p.out.ndim, 3);
    PENSTOCK_CHECK(p.out.dtype == DType::kF32 && p.out.size(0) == n_rows && p.out.size(1) == n_heads &&
                   p.out.size(2) == d_v && p.out.stride(2) == 1)
        << "sparse_mla_attention out " << p.out.shape_string();
    check_2d(p.lse, n_rows, n_heads, DType::kF32, "sparse_mla_attention lse");
    PENSTOCK_CHECK_EQ(p.indices.ndim, 2);
    const int64_t top_k = p.indices.size(1);
    check_2d(p.indices, n_rows, top_k, DType::kI32, "sparse_mla_attention indices");

    parallel_for(pool, n_rows * n_heads, /*grain=*/4, [&](int64_t begin, int64_t end) {
        std::vector<double> scores;
        std::vector<int64_t> slots;
        std::vector<double> acc(static_cast<size_t>(d_v));
        for (int64_t item = begin; item < end; ++item) {
            const int64_t r = item / n_heads;  // range [0, n_rows)
            const int64_t h = item % n_heads;  // range [0, n_heads)
            const int32_t* idx = p.indices.at<const int32_t>({r});
            slots.clear();
            for (int64_t j = 0; j < top_k; ++j) {
                if (idx[j] < 0) continue;
                PENSTOCK_CHECK_LT(idx[j], n_slots) << "sparse_mla_attention: index out of range at row " << r;
                slots.push_back(idx[j]);
            }
            float* out = p.out.at<float>({r, h});
            float* lse = p.lse.at<float>({r, h});
            if (slots.empty()) {
                for (int64_t i = 0; i < d_v; ++i) out[i] = 0.0f;
                *lse = -std::numeric_limits<float>::infinity();
                continue;
            }
            const float* q = p.q.at<const float>({r, h});
            scores.assign(slots.size(), 0.0);
            double max_score = -std::numeric_limits<double>::infinity();
            for (size_t j = 0; j < slots.size(); ++j) {
                const float* k = p.kv.at<const float>({slots[j]});
                double dot = 0.0;
                for (int64_t i = 0; i < d_qk; ++i) dot += static_cast<double>(q[i]) * k[i];
                const double score = static_cast<double>(p.scale) * dot;
                scores[j] = score;
                max_score = std::max(max_score, score);
            }
            double sum = 0.0;
            std::fill(acc.begin(), acc.end(), 0.0);
            for (size_t j = 0; j < slots.size(); ++j) {
                const double w = std::exp(scores[j] - max_score);
                sum += w;
                const float* v = p.v.at<const float>({slots[j]});
                for (int64_t i = 0; i < d_v; ++i) acc[static_cast<size_t>(i)] += w * v[i];
            }
            for (int64_t i = 0; i < d_v; ++i) out[i] = static_cast<float>(acc[static_cast<size_t>(i)] / sum);
            *lse = static_cast<float>(max_score + std::log(sum));
        }
    });
}

}  // namespace penstock::ref
