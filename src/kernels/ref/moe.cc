// Reference MoE routing (DeepSeek noaux_tc top-k with expert groups), alignment of (token, slot) pairs by expert, and
// the gather/scatter around the expert GEMMs. Routing runs one token per task; selection sorts by (score desc, index
// asc) so ties go to the lower index. moe_align is a serial stable counting sort. moe_unpermute accumulates each
// token's slots in increasing slot order through an inverse pair -> row map, so it is deterministic.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include <cstring>

#include "core/check.h"
#include "kernels/ref/ref_ops.h"

namespace penstock::ref {

namespace {

// Indices [0, n) ordered by value descending, ties toward the lower index.
std::vector<int64_t> order_desc(const std::vector<float>& values) {
    std::vector<int64_t> idx(values.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
        return values[static_cast<size_t>(a)] > values[static_cast<size_t>(b)];
    });
    return idx;
}

}  // namespace

void moe_routing(const kernels::MoeRoutingParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.logits.ndim, 2);
    PENSTOCK_CHECK(p.logits.dtype == DType::kF32) << "moe_routing: logits must be f32";
    PENSTOCK_CHECK_EQ(p.logits.stride(1), 1);
    const int64_t n_tokens = p.logits.size(0);
    const int64_t n_experts = p.logits.size(1);
    PENSTOCK_CHECK_EQ(p.topk_ids.ndim, 2);
    PENSTOCK_CHECK_EQ(p.topk_weights.ndim, 2);
    PENSTOCK_CHECK(p.topk_ids.dtype == DType::kI32) << "moe_routing: topk_ids must be i32";
    PENSTOCK_CHECK(p.topk_weights.dtype == DType::kF32) << "moe_routing: topk_weights must be f32";
    const int64_t top_k = p.topk_ids.size(1);
    PENSTOCK_CHECK_EQ(p.topk_ids.size(0), n_tokens);
    PENSTOCK_CHECK_EQ(p.topk_weights.size(0), n_tokens);
    PENSTOCK_CHECK_EQ(p.topk_weights.size(1), top_k);
    const bool has_bias = p.bias.data != nullptr;
    if (has_bias) {
        PENSTOCK_CHECK_EQ(p.bias.ndim, 1);
        PENSTOCK_CHECK(p.bias.dtype == DType::kF32) << "moe_routing: bias must be f32";
        PENSTOCK_CHECK_EQ(p.bias.size(0), n_experts);
    }
    PENSTOCK_CHECK_GE(p.n_group, 1);
    PENSTOCK_CHECK_EQ(n_experts % p.n_group, 0) << "moe_routing: n_experts must divide into n_group groups";
    const int64_t n_group = p.n_group;
    const int64_t per_group = n_experts / n_group;
    PENSTOCK_CHECK(1 <= p.topk_group && p.topk_group <= p.n_group) << "topk_group " << p.topk_group;
    const int64_t n_eligible = n_group > 1 ? p.topk_group * per_group : n_experts;
    PENSTOCK_CHECK(1 <= top_k && top_k <= n_eligible)
        << "moe_routing: top_k " << top_k << " exceeds the " << n_eligible << " experts of the kept groups";
    if (n_group > 1 && has_bias) PENSTOCK_CHECK_GE(per_group, 2) << "top-2 group score needs 2 experts per group";

    parallel_for(pool, n_tokens, /*grain=*/8, [&](int64_t begin, int64_t end) {
        std::vector<float> s(static_cast<size_t>(n_experts));
        std::vector<float> c(static_cast<size_t>(n_experts));
        std::vector<float> group_score(static_cast<size_t>(n_group));
        std::vector<float> in_group(static_cast<size_t>(per_group));
        for (int64_t t = begin; t < end; ++t) {
            const float* logits = p.logits.at<const float>({t});
            // s: the scores; c: the selection scores (s + bias).
            if (p.scoring == kernels::MoeScoring::kSigmoid) {
                for (int64_t e = 0; e < n_experts; ++e)
                    s[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
            } else {
                float max_l = -std::numeric_limits<float>::infinity();
                for (int64_t e = 0; e < n_experts; ++e) max_l = std::max(max_l, logits[e]);
                double sum = 0.0;
                for (int64_t e = 0; e < n_experts; ++e) sum += std::exp(logits[e] - max_l);
                for (int64_t e = 0; e < n_experts; ++e) {
                    s[static_cast<size_t>(e)] = static_cast<float>(std::exp(logits[e] - max_l) / sum);
                }
            }
            for (int64_t e = 0; e < n_experts; ++e) {
                const float b = has_bias ? *p.bias.at<const float>({e}) : 0.0f;
                c[static_cast<size_t>(e)] = s[static_cast<size_t>(e)] + b;
            }
            if (n_group > 1) {
                for (int64_t g = 0; g < n_group; ++g) {
                    for (int64_t i = 0; i < per_group; ++i) {
                        in_group[static_cast<size_t>(i)] = c[static_cast<size_t>(g * per_group + i)];
                    }
                    std::sort(in_group.begin(), in_group.end(), std::greater<float>());
                    group_score[static_cast<size_t>(g)] = has_bias ? in_group[0] + in_group[1] : in_group[0];
                }
                const std::vector<int64_t> groups = order_desc(group_score);
                std::vector<bool> keep(static_cast<size_t>(n_group), false);
                for (int64_t i = 0; i < p.topk_group; ++i)
                    keep[static_cast<size_t>(groups[static_cast<size_t>(i)])] = true;
                for (int64_t e = 0; e < n_experts; ++e) {
                    if (!keep[static_cast<size_t>(e / per_group)]) {
                        c[static_cast<size_t>(e)] = -std::numeric_limits<float>::infinity();
                    }
                }
            }
            const std::vector<int64_t> experts = order_desc(c);
            int32_t* ids = p.topk_ids.at<int32_t>({t});
            float* weights = p.topk_weights.at<float>({t});
            float sum = 0.0f;
            for (int64_t k = 0; k < top_k; ++k) {
                const int64_t e = experts[static_cast<size_t>(k)];
                ids[k * p.topk_ids.stride(1)] = static_cast<int32_t>(e);
                weights[k * p.topk_weights.stride(1)] = s[static_cast<size_t>(e)];
                sum += s[static_cast<size_t>(e)];
            }
            const float denom = sum + 1e-20f;
            for (int64_t k = 0; k < top_k; ++k) {
                float& w = weights[k * p.topk_weights.stride(1)];
                if (p.norm_topk_prob) w /= denom;
                w *= p.routed_scaling_factor;
            }
        }
    });
}

void moe_align(const kernels::MoeAlignParams& p, ThreadPool* /*pool*/) {
    PENSTOCK_CHECK_EQ(p.topk_ids.ndim, 2);
    PENSTOCK_CHECK(p.topk_ids.dtype == DType::kI32) << "moe_align: topk_ids must be i32";
    PENSTOCK_CHECK_EQ(p.expert_offsets.ndim, 1);
    PENSTOCK_CHECK(p.expert_offsets.dtype == DType::kI32) << "moe_align: expert_offsets must be i32";
    PENSTOCK_CHECK_EQ(p.sorted_pairs.ndim, 1);
    PENSTOCK_CHECK(p.sorted_pairs.dtype == DType::kI32) << "moe_align: sorted_pairs must be i32";
    const int64_t n_tokens = p.topk_ids.size(0);
    const int64_t top_k = p.topk_ids.size(1);
    const int64_t n_pairs = n_tokens * top_k;
    const int64_t n_experts = p.expert_offsets.size(0) - 1;
    PENSTOCK_CHECK_GE(n_experts, 0);
    PENSTOCK_CHECK_EQ(p.sorted_pairs.size(0), n_pairs);
    PENSTOCK_CHECK_LE(n_pairs, static_cast<int64_t>(std::numeric_limits<int32_t>::max()));

    // Counting sort, stable in the pair index p = token * top_k + slot.
    std::vector<int64_t> expert_of(static_cast<size_t>(n_pairs));
    std::vector<int64_t> count(static_cast<size_t>(n_experts), 0);
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t k = 0; k < top_k; ++k) {
            const int64_t e = static_cast<int64_t>(*p.topk_ids.at<const int32_t>({t, k})) - p.expert_begin;
            const bool valid = 0 <= e && e < n_experts;
            expert_of[static_cast<size_t>(t * top_k + k)] = valid ? e : -1;
            if (valid) ++count[static_cast<size_t>(e)];
        }
    }
    std::vector<int64_t> next(static_cast<size_t>(n_experts) + 1, 0);
    for (int64_t e = 0; e < n_experts; ++e)
        next[static_cast<size_t>(e) + 1] = next[static_cast<size_t>(e)] + count[static_cast<size_t>(e)];
    for (int64_t e = 0; e <= n_experts; ++e) {
        *p.expert_offsets.at<int32_t>({e}) = static_cast<int32_t>(next[static_cast<size_t>(e)]);
    }
    const int64_t n_rows = next[static_cast<size_t>(n_experts)];
    for (int64_t pair = 0; pair < n_pairs; ++pair) {
        const int64_t e = expert_of[static_cast<size_t>(pair)];
        if (e < 0) continue;
        *p.sorted_pairs.at<int32_t>({next[static_cast<size_t>(e)]++}) = static_cast<int32_t>(pair);
    }
    for (int64_t i = n_rows; i < n_pairs; ++i) *p.sorted_pairs.at<int32_t>({i}) = -1;  // unspecified; -1 for hygiene
}

void moe_permute(const kernels::MoePermuteParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.out.ndim, 2);
    PENSTOCK_CHECK_EQ(p.in.ndim, 2);
    PENSTOCK_CHECK(p.out.dtype == p.in.dtype) << "moe_permute: dtypes differ";
    PENSTOCK_CHECK(p.sorted_pairs.ndim == 1 && p.sorted_pairs.dtype == DType::kI32) << "moe_permute: sorted_pairs";
    const int64_t n_rows = p.out.size(0);
    const int64_t hidden = p.out.size(1);
    const int64_t n_tokens = p.in.size(0);
    PENSTOCK_CHECK_EQ(p.in.size(1), hidden);
    PENSTOCK_CHECK_EQ(p.out.stride(1), 1);
    PENSTOCK_CHECK_EQ(p.in.stride(1), 1);
    PENSTOCK_CHECK_GE(p.sorted_pairs.size(0), n_rows);
    PENSTOCK_CHECK_GE(p.top_k, 1);
    std::vector<bool> seen(static_cast<size_t>(n_tokens * p.top_k), false);
    for (int64_t i = 0; i < n_rows; ++i) {
        const int64_t pair = *p.sorted_pairs.at<const int32_t>({i});
        PENSTOCK_CHECK(0 <= pair && pair < n_tokens * p.top_k) << "moe_permute: row " << i << " pair " << pair;
        PENSTOCK_CHECK(!seen[static_cast<size_t>(pair)]) << "moe_permute: pair " << pair << " repeats at row " << i;
        seen[static_cast<size_t>(pair)] = true;
    }
    const size_t es = dtype_bytes(p.in.dtype, 1);
    parallel_for(pool, n_rows, /*grain=*/16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const int64_t token = *p.sorted_pairs.at<const int32_t>({i}) / p.top_k;
            const auto* src = static_cast<const uint8_t*>(p.in.data) + static_cast<size_t>(token * p.in.stride(0)) * es;
            auto* dst = static_cast<uint8_t*>(p.out.data) + static_cast<size_t>(i * p.out.stride(0)) * es;
            std::memcpy(dst, src, static_cast<size_t>(hidden) * es);
        }
    });
}

void moe_unpermute(const kernels::MoeUnpermuteParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.out.ndim, 2);
    PENSTOCK_CHECK_EQ(p.expert_out.ndim, 2);
    PENSTOCK_CHECK_EQ(p.topk_weights.ndim, 2);
    PENSTOCK_CHECK(p.out.dtype == DType::kF32 && p.expert_out.dtype == DType::kF32 &&
                   p.topk_weights.dtype == DType::kF32)
        << "moe_unpermute: f32 only";
    PENSTOCK_CHECK(p.sorted_pairs.ndim == 1 && p.sorted_pairs.dtype == DType::kI32) << "moe_unpermute: sorted_pairs";
    const int64_t n_tokens = p.out.size(0);
    const int64_t hidden = p.out.size(1);
    const int64_t n_rows = p.expert_out.size(0);
    const int64_t top_k = p.topk_weights.size(1);
    PENSTOCK_CHECK_EQ(p.expert_out.size(1), hidden);
    PENSTOCK_CHECK_EQ(p.topk_weights.size(0), n_tokens);
    PENSTOCK_CHECK_EQ(p.out.stride(1), 1);
    PENSTOCK_CHECK_EQ(p.expert_out.stride(1), 1);
    PENSTOCK_CHECK_GE(p.sorted_pairs.size(0), n_rows);

    // Inverse map pair -> expert row; each pair appears at most once.
    const int64_t n_pairs = n_tokens * top_k;
    std::vector<int64_t> row_of_pair(static_cast<size_t>(n_pairs), -1);
    for (int64_t i = 0; i < n_rows; ++i) {
        const int64_t pair = *p.sorted_pairs.at<const int32_t>({i});
        PENSTOCK_CHECK(0 <= pair && pair < n_pairs) << "moe_unpermute: row " << i << " pair " << pair;
        PENSTOCK_CHECK_EQ(row_of_pair[static_cast<size_t>(pair)], -1) << "moe_unpermute: pair " << pair << " twice";
        row_of_pair[static_cast<size_t>(pair)] = i;
    }
    parallel_for(pool, n_tokens, /*grain=*/8, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            float* dst = p.out.at<float>({t});
            for (int64_t k = 0; k < top_k; ++k) {
                const int64_t row = row_of_pair[static_cast<size_t>(t * top_k + k)];
                if (row < 0) continue;
                const float w = *p.topk_weights.at<const float>({t, k});
                const float* src = p.expert_out.at<const float>({row});
                for (int64_t h = 0; h < hidden; ++h) dst[h] += w * src[h];
            }
        }
    });
}

}  // namespace penstock::ref
