// CPU reference MoE tests: routing on a hand-worked example and against a naive double implementation (groups, bias,
// sigmoid/softmax, norm on/off), thread-count independence, and align -> permute -> expert GEMM -> unpermute equal to
// a naive dense MoE combination.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ref/ref_ops.h"
#include "ref_test_util.h"

namespace penstock::test {
namespace {

using kernels::MoeScoring;

struct Routed {
    Tensor ids, weights;
};

Routed route(const TensorView& logits, const TensorView& bias, int top_k, int n_group, int topk_group, float scale,
             bool norm, MoeScoring scoring, ThreadPool* pool) {
    const int64_t n_tokens = logits.size(0);
    Routed r{Tensor::zeros({n_tokens, top_k}, DType::kI32), Tensor::zeros({n_tokens, top_k}, DType::kF32)};
    ref::moe_routing({.topk_ids = r.ids,
                      .topk_weights = r.weights,
                      .logits = logits,
                      .bias = bias,
                      .n_group = n_group,
                      .topk_group = topk_group,
                      .routed_scaling_factor = scale,
                      .norm_topk_prob = norm,
                      .scoring = scoring},
                     pool);
    return r;
}

std::vector<int32_t> read_i32(const Tensor& t) {
    return std::vector<int32_t>(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
}

// Hand-worked example: 4 experts in n_group = 2 groups G0 = {0, 1}, G1 = {2, 3}; topk_group = 1, top_k = 2,
// bias = [0, 0, 0, 0.2], routed_scaling_factor = 2.5, norm_topk_prob on. s = sigmoid(logit), c = s + bias,
// group score = c1 + c2 of its two experts. With sigmoid(x) + sigmoid(-x) = 1 and sigmoid(ln 3) = 3/4:
//  t0 logits [3, -3, 1, 1]: s = [.9526, .0474, .7311, .7311], c = [.9526, .0474, .7311, .9311];
//     G0 = 1.0, G1 = 1.6622 -> keep G1 although expert 0 alone would rank first; ids [3, 2] (c order);
//     weights from s: s2 = s3, so each is 1/2 * 2.5 = 1.25.
//  t1 logits [0, 0, 0, 0]: s = .5 each, c = [.5, .5, .5, .7]; G0 = 1.0, G1 = 1.2 -> G1; ids [3, 2]; weights 1.25 each.
//  t2 logits [4, 4, 5, -5]: s = [.9820, .9820, .9933, .0067], c = [.9820, .9820, .9933, .2067]; G0 = 1.9640,
//     G1 = 1.2 -> G0 although expert 2 has the largest c (top-2 sum, not max); ids [0, 1] (tie -> lower index
//     first); weights 1.25 each.
//  t3 logits [ln 3, 0, 0, -ln 3]: s = [.75, .5, .5, .25], c = [.75, .5, .5, .45]; G0 = 1.25, G1 = .95 -> G0;
//     ids [0, 1]; weights .75 / 1.25 * 2.5 = 1.5 and .5 / 1.25 * 2.5 = 1.0.
// Without bias the group score is the group max: t2 gives G0 = .9820 < G1 = .9933 -> ids [2, 3] with weights
//     sigmoid(5) * 2.5 and sigmoid(-5) * 2.5 (their sum is 1).
TEST(RefMoeRouting, HandWorkedGroupedExample) {
    const float ln3 = std::log(3.0f);
    const Tensor logits =
        Tensor::from_f32({4, 4}, std::vector<float>{3, -3, 1, 1, 0, 0, 0, 0, 4, 4, 5, -5, ln3, 0, 0, -ln3});
    const Tensor bias = Tensor::from_f32({4}, std::vector<float>{0, 0, 0, 0.2f});
    const Routed r = route(logits, bias, 2, 2, 1, 2.5f, true, MoeScoring::kSigmoid, nullptr);
    EXPECT_EQ(read_i32(r.ids), (std::vector<int32_t>{3, 2, 3, 2, 0, 1, 0, 1}));
    EXPECT_TRUE(all_close(read_f32(r.weights), {1.25, 1.25, 1.25, 1.25, 1.25, 1.25, 1.5, 1.0}, kF32Elementwise));

    const Tensor t2 = Tensor::from_f32({1, 4}, std::vector<float>{4, 4, 5, -5});
    const Routed nb = route(t2, TensorView{}, 2, 2, 1, 2.5f, true, MoeScoring::kSigmoid, nullptr);
    EXPECT_EQ(read_i32(nb.ids), (std::vector<int32_t>{2, 3}));
    const double s5 = 1.0 / (1.0 + std::exp(-5.0));
    EXPECT_TRUE(all_close(read_f32(nb.weights), {s5 * 2.5, (1.0 - s5) * 2.5}, kF32Elementwise));
}

struct RoutingCase {
    int64_t n_tokens, n_experts;
    int n_group, topk_group, top_k;
    bool bias, norm;
    float scale;
    MoeScoring scoring;
};

// Naive routing in double: repeated arg-max with strict '>' (so ties go to the lower index), -inf group masking.
void naive_routing(const RoutingCase& c, const std::vector<float>& logits, const std::vector<float>& bias,
                   std::vector<int32_t>* ids, std::vector<double>* weights) {
    const int64_t per_group = c.n_experts / c.n_group;
    auto argmax = [](const std::vector<double>& v) {
        size_t best = 0;
        for (size_t i = 1; i < v.size(); ++i) {
            if (v[i] > v[best]) best = i;
        }
        return best;
    };
    for (int64_t t = 0; t < c.n_tokens; ++t) {
        std::vector<double> s(size_t(c.n_experts)), sel(size_t(c.n_experts));
        double mx = -1e300, sum = 0;
        for (int64_t e = 0; e < c.n_experts; ++e) mx = std::max(mx, double(logits[size_t(t * c.n_experts + e)]));
        for (int64_t e = 0; e < c.n_experts; ++e) sum += std::exp(logits[size_t(t * c.n_experts + e)] - mx);
        for (int64_t e = 0; e < c.n_experts; ++e) {
            const double x = logits[size_t(t * c.n_experts + e)];
            s[size_t(e)] = c.scoring == MoeScoring::kSigmoid ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x - mx) / sum;
            sel[size_t(e)] = s[size_t(e)] + (c.bias ? bias[size_t(e)] : 0.0);
        }
        if (c.n_group > 1) {
            std::vector<double> gscore(size_t(c.n_group));
            for (int g = 0; g < c.n_group; ++g) {
                std::vector<double> grp(sel.begin() + g * per_group, sel.begin() + (g + 1) * per_group);
                const size_t a = argmax(grp);
                const double first = grp[a];
                grp[a] = -INFINITY;
                gscore[size_t(g)] = c.bias ? first + grp[argmax(grp)] : first;
            }
            std::vector<bool> keep(size_t(c.n_group), false);
            for (int i = 0; i < c.topk_group; ++i) {
                const size_t g = argmax(gscore);
                keep[g] = true;
                gscore[g] = -INFINITY;
            }
            for (int64_t e = 0; e < c.n_experts; ++e) {
                if (!keep[size_t(e / per_group)]) sel[size_t(e)] = -INFINITY;
            }
        }
        std::vector<double> w;
        std::vector<bool> taken(size_t(c.n_experts), false);
        for (int k = 0; k < c.top_k; ++k) {
            size_t best = 0;
            while (taken[best]) ++best;
            for (size_t e = best + 1; e < sel.size(); ++e) {
                if (!taken[e] && sel[e] > sel[best]) best = e;
            }
            taken[best] = true;
            ids->push_back(int32_t(best));
            w.push_back(s[best]);
        }
        double wsum = 0;
        for (double x : w) wsum += x;
        for (double x : w) weights->push_back((c.norm ? x / (wsum + 1e-20) : x) * c.scale);
    }
}

TEST(RefMoeRouting, MatchesNaive) {
    constexpr uint32_t kSeed = 1616;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    const std::vector<RoutingCase> cases = {
        {1, 8, 1, 1, 2, false, true, 1.0f, MoeScoring::kSigmoid},
        {13, 16, 4, 2, 4, true, true, 2.5f, MoeScoring::kSigmoid},
        {9, 64, 8, 4, 8, true, true, 2.5f, MoeScoring::kSigmoid},   // DeepSeek-V3 shape, scaled down
        {7, 12, 4, 2, 3, false, true, 1.0f, MoeScoring::kSigmoid},  // no bias: group max
        {11, 32, 1, 1, 6, false, false, 1.0f, MoeScoring::kSoftmax},
        {5, 20, 4, 2, 5, true, false, 1.5f, MoeScoring::kSoftmax},
        {6, 24, 4, 2, 12, true, true, 1.0f, MoeScoring::kSigmoid},  // top_k == every expert of the kept groups
    };
    for (const RoutingCase& c : cases) {
        for (bool strided : {false, true}) {
            SCOPED_TRACE(::testing::Message()
                         << "n_experts=" << c.n_experts << " n_group=" << c.n_group << " topk_group=" << c.topk_group
                         << " top_k=" << c.top_k << " bias=" << c.bias << " norm=" << c.norm << " strided=" << strided);
            Buffer logits = random_buffer(rng, {c.n_tokens, c.n_experts}, strided, -4.0f, 4.0f);
            const std::vector<float> bias_v = random_floats(rng, c.n_experts, -0.5f, 0.5f);
            const Tensor bias = Tensor::from_f32({c.n_experts}, bias_v);
            const Routed r = route(logits.view, c.bias ? bias.view() : TensorView{}, c.top_k, c.n_group, c.topk_group,
                                   c.scale, c.norm, c.scoring, nullptr);
            std::vector<int32_t> ids;
            std::vector<double> weights;
            naive_routing(c, read_f32(logits.view), bias_v, &ids, &weights);
            EXPECT_EQ(read_i32(r.ids), ids);
            EXPECT_TRUE(all_close(read_f32(r.weights), weights, kF32Reduction, {c.n_tokens, c.top_k}));
        }
    }
}

TEST(RefMoeRouting, ThreadCountIndependent) {
    constexpr uint32_t kSeed = 1717;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    const Tensor logits = Tensor::from_f32({301, 64}, random_floats(rng, 301 * 64, -4.0f, 4.0f));
    const Tensor bias = Tensor::from_f32({64}, random_floats(rng, 64, -0.5f, 0.5f));
    ThreadPool pool1(1), pool3(3);
    const Routed serial = route(logits, bias, 8, 8, 4, 2.5f, true, MoeScoring::kSigmoid, nullptr);
    for (ThreadPool* pool : {&pool1, &pool3}) {
        const Routed r = route(logits, bias, 8, 8, 4, 2.5f, true, MoeScoring::kSigmoid, pool);
        EXPECT_EQ(read_i32(serial.ids), read_i32(r.ids));
        EXPECT_TRUE(same_bits(read_f32(serial.weights), read_f32(r.weights)));
    }
}

struct DenseCase {
    int64_t n_tokens, n_experts, top_k, hidden;
};

// align -> permute -> per-expert GEMM (ref::gemm on row ranges) -> unpermute into a non-zero out, against
// out0[t] + sum over valid slots of w[t, k] * W_{id[t, k]} x[t] in double. Some slots are dropped (-1) or out of range.
TEST(RefMoe, AlignPermuteUnpermuteEqualsDenseCombination) {
    constexpr uint32_t kSeed = 1818;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    for (const DenseCase& c : {DenseCase{1, 3, 1, 4}, DenseCase{9, 6, 3, 5}, DenseCase{40, 8, 4, 16}}) {
        SCOPED_TRACE(::testing::Message()
                     << "n_tokens=" << c.n_tokens << " n_experts=" << c.n_experts << " top_k=" << c.top_k);
        // Distinct experts per token (expert n_experts - 1 never chosen when possible), ~15% of slots dropped.
        std::vector<int32_t> ids;
        for (int64_t t = 0; t < c.n_tokens; ++t) {
            std::vector<int32_t> pool(size_t(c.n_experts > c.top_k ? c.n_experts - 1 : c.n_experts));
            for (size_t i = 0; i < pool.size(); ++i) pool[i] = int32_t(i);
            std::shuffle(pool.begin(), pool.end(), rng);
            for (int64_t k = 0; k < c.top_k; ++k) {
                const uint32_t u = rng() % 100;
                ids.push_back(c.n_tokens > 1 && u < 10
                                  ? -1
                                  : (c.n_tokens > 1 && u < 15 ? int32_t(c.n_experts) : pool[size_t(k)]));
            }
        }
        const Tensor topk_ids = Tensor::from_i32({c.n_tokens, c.top_k}, ids);
        const Tensor topk_w = Tensor::from_f32({c.n_tokens, c.top_k}, random_floats(rng, c.n_tokens * c.top_k, 0, 1));
        const Tensor x = Tensor::from_f32({c.n_tokens, c.hidden}, random_floats(rng, c.n_tokens * c.hidden));
        const Tensor w_experts =
            Tensor::from_f32({c.n_experts, c.hidden, c.hidden}, random_floats(rng, c.n_experts * c.hidden * c.hidden));

        Tensor offsets = Tensor::zeros({c.n_experts + 1}, DType::kI32);
        Tensor sorted = Tensor::zeros({c.n_tokens * c.top_k}, DType::kI32);
        ref::moe_align({.expert_offsets = offsets, .sorted_pairs = sorted, .topk_ids = topk_ids}, nullptr);
        // Naive align: for each expert, its pairs in increasing pair index.
        std::vector<int32_t> want_offsets{0}, want_sorted;
        for (int32_t e = 0; e < c.n_experts; ++e) {
            for (size_t p = 0; p < ids.size(); ++p) {
                if (ids[p] == e) want_sorted.push_back(int32_t(p));
            }
            want_offsets.push_back(int32_t(want_sorted.size()));
        }
        ASSERT_EQ(read_i32(offsets), want_offsets);
        const int64_t n_rows = want_offsets.back();
        const std::vector<int32_t> got_sorted = read_i32(sorted);
        ASSERT_EQ(std::vector<int32_t>(got_sorted.begin(), got_sorted.begin() + n_rows), want_sorted);

        Tensor permuted = Tensor::zeros({n_rows, c.hidden}, DType::kF32);
        ref::moe_permute({.out = permuted, .in = x, .sorted_pairs = sorted, .top_k = int(c.top_k)}, nullptr);
        std::vector<double> want_perm;
        for (int32_t p : want_sorted) {
            for (int64_t h = 0; h < c.hidden; ++h) want_perm.push_back(x.ptr<float>()[(p / c.top_k) * c.hidden + h]);
        }
        EXPECT_TRUE(all_close(read_f32(permuted), want_perm, kExact));

        Tensor expert_out = Tensor::zeros({n_rows, c.hidden}, DType::kF32);
        for (int64_t e = 0; e < c.n_experts; ++e) {
            const int64_t b = want_offsets[size_t(e)], en = want_offsets[size_t(e) + 1];
            ref::gemm({.out = expert_out.view().slice(0, b, en),
                       .a = permuted.view().slice(0, b, en),
                       .b = w_experts.view().select(0, e),
                       .trans_b = true},
                      nullptr);
        }
        const std::vector<float> out0 = random_floats(rng, c.n_tokens * c.hidden);
        std::vector<double> want = to_double(out0);
        for (int64_t t = 0; t < c.n_tokens; ++t) {
            for (int64_t k = 0; k < c.top_k; ++k) {
                const int32_t e = ids[size_t(t * c.top_k + k)];
                if (e < 0 || e >= c.n_experts) continue;
                for (int64_t i = 0; i < c.hidden; ++i) {
                    double y = 0;
                    for (int64_t j = 0; j < c.hidden; ++j) {
                        y += double(w_experts.ptr<float>()[(e * c.hidden + i) * c.hidden + j]) *
                             x.ptr<float>()[t * c.hidden + j];
                    }
                    want[size_t(t * c.hidden + i)] += topk_w.ptr<float>()[t * c.top_k + k] * y;
                }
            }
        }
        ThreadPool pool1(1), pool3(3);
        std::vector<std::vector<float>> results;
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool1, &pool3}) {
            Tensor out = Tensor::from_f32({c.n_tokens, c.hidden}, out0);
            ref::moe_unpermute({.out = out, .expert_out = expert_out, .sorted_pairs = sorted, .topk_weights = topk_w},
                               pool);
            results.push_back(read_f32(out));
        }
        EXPECT_TRUE(all_close(results[0], want, kF32Gemm, {c.n_tokens, c.hidden}));
        EXPECT_TRUE(same_bits(results[0], results[1]));
        EXPECT_TRUE(same_bits(results[0], results[2]));
    }
}

}  // namespace
}  // namespace penstock::test
