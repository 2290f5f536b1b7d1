// cuda::{moe_routing, moe_align, moe_permute, moe_unpermute} against the CPU reference. Routing: selected ids must
// match exactly (ties toward the lower index, including forced exact ties) and weights to 1e-6; DeepSeek-V3
// (256 experts, 8 groups, top-4 groups, top-8, bias, sigmoid), Kimi-like (384, no groups), softmax scoring, 1 token.
// Align: bit-exact offsets and sorted pairs (stable), with dropped (-1) ids. Permute/unpermute: f32 exact / kF32Tol,
// bf16 to kBF16Tol, accumulating into a non-zero out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ref/ref_ops.h"
#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {
namespace {

class MoeOpTest : public CudaTest {};

// Routing weights are normalised probabilities: one f32 ulp-level difference in exp/sigmoid.
constexpr Tolerance kRoutingWeightTol{.atol = 1e-6, .rtol = 1e-6};

struct RouteCase {
    const char* name;
    int64_t n_tokens, n_experts, top_k;
    int n_group, topk_group;
    bool bias;
    kernels::MoeScoring scoring;
    bool norm;
    float scaling;
    bool ties;  // quantise logits so exact ties occur
    DType logits_dtype = DType::kF32;
};

TEST_F(MoeOpTest, RoutingMatchesReference) {
    const RouteCase kCases[] = {
        {"one_token", 1, 256, 8, 8, 4, true, kernels::MoeScoring::kSigmoid, true, 2.5f, false},
        {"deepseek_v3", 257, 256, 8, 8, 4, true, kernels::MoeScoring::kSigmoid, true, 2.5f, false},
        {"deepseek_v3_ties", 65, 256, 8, 8, 4, true, kernels::MoeScoring::kSigmoid, true, 2.5f, true},
        {"kimi_no_groups", 33, 384, 8, 1, 1, true, kernels::MoeScoring::kSigmoid, true, 2.827f, false},
        {"softmax_no_norm", 19, 64, 6, 1, 1, false, kernels::MoeScoring::kSoftmax, false, 1.0f, false},
        {"groups_no_bias", 21, 64, 4, 8, 3, false, kernels::MoeScoring::kSoftmax, true, 1.0f, true},
        {"top_k_40", 5, 128, 40, 1, 1, true, kernels::MoeScoring::kSigmoid, true, 1.0f, false},
        {"deepseek_v3_bf16_logits", 97, 256, 8, 8, 4, true, kernels::MoeScoring::kSigmoid, true, 2.5f, false,
         DType::kBF16},
    };
    uint32_t seed = 1500;
    for (const RouteCase& c : kCases) {
        SCOPED_TRACE(c.name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        std::vector<float> logits = random_floats(rng, c.n_tokens * c.n_experts, -4.0f, 4.0f);
        if (c.ties) {
            for (float& x : logits) x = std::round(x * 2.0f) / 2.0f;
        }
        std::vector<float> bias = random_floats(rng, c.n_experts, -0.1f, 0.1f);
        if (c.ties) {
            for (float& x : bias) x = std::round(x * 20.0f) / 20.0f;
        }
        // bf16 logits: the reference reads the same rounded values in f32 (its ids must still match exactly).
        const Pair l = make_pair_from(logits, {c.n_tokens, c.n_experts}, c.logits_dtype, false, alloc(), stream());
        const Pair b = make_pair_from(bias, {c.n_experts}, DType::kF32, false, alloc(), stream());
        const Tensor ids_dev = Tensor::empty({c.n_tokens, c.top_k}, DType::kI32, alloc());
        Pair w = poisoned_pair({c.n_tokens, c.top_k}, DType::kF32, false, alloc(), stream());
        Tensor ids_host = Tensor::zeros({c.n_tokens, c.top_k}, DType::kI32);
        kernels::MoeRoutingParams pd{.topk_ids = ids_dev,
                                     .topk_weights = w.dv,
                                     .logits = l.dv,
                                     .bias = c.bias ? b.dv : TensorView{},
                                     .n_group = c.n_group,
                                     .topk_group = c.topk_group,
                                     .routed_scaling_factor = c.scaling,
                                     .norm_topk_prob = c.norm,
                                     .scoring = c.scoring};
        cuda::moe_routing(pd, raw_stream());
        kernels::MoeRoutingParams ph = pd;
        ph.topk_ids = ids_host;
        ph.topk_weights = w.hv;
        ph.logits = l.hv;
        ph.bias = c.bias ? b.hv : TensorView{};
        ref::moe_routing(ph, nullptr);
        const std::vector<int32_t> got = read_i32(ids_dev, stream());
        int64_t mismatches = 0, first = -1;
        for (int64_t i = 0; i < c.n_tokens * c.top_k; ++i) {
            if (got[static_cast<size_t>(i)] != ids_host.ptr<int32_t>()[i]) {
                if (first < 0) first = i;
                ++mismatches;
            }
        }
        EXPECT_EQ(mismatches, 0) << "first mismatch at token " << first / c.top_k << " slot " << first % c.top_k
                                 << ": got " << (first >= 0 ? got[static_cast<size_t>(first)] : 0) << " want "
                                 << (first >= 0 ? ids_host.ptr<int32_t>()[first] : 0);
        expect_pair_close(w, w.hv, kRoutingWeightTol, stream());
    }
}

TEST_F(MoeOpTest, AlignMatchesReferenceExactly) {
    struct AlignCase {
        int64_t n_tokens, top_k, n_experts;
        double drop;  // fraction of ids set to -1 or n_experts (out of range)
        bool skewed;  // most pairs to a few experts
    };
    const AlignCase kCases[] = {{1, 1, 1, 0.0, false},     {1, 8, 256, 0.0, false},  {333, 8, 256, 0.1, false},
                                {2049, 8, 256, 0.0, true}, {100, 6, 64, 0.5, false}, {5000, 8, 384, 0.01, true},
                                {17, 4, 0, 0.0, false}};
    uint32_t seed = 1600;
    for (const AlignCase& c : kCases) {
        SCOPED_TRACE(::testing::Message() << "tokens=" << c.n_tokens << " top_k=" << c.top_k
                                          << " experts=" << c.n_experts << " drop=" << c.drop);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const int64_t n_pairs = c.n_tokens * c.top_k;
        std::vector<int32_t> ids(static_cast<size_t>(n_pairs));
        std::uniform_int_distribution<int32_t> pick(0, std::max<int32_t>(0, static_cast<int32_t>(c.n_experts) - 1));
        std::uniform_int_distribution<int32_t> few(
            0, std::min<int32_t>(3, std::max<int32_t>(0, static_cast<int32_t>(c.n_experts) - 1)));
        std::uniform_real_distribution<double> u(0.0, 1.0);
        for (auto& e : ids) {
            e = c.skewed && u(rng) < 0.8 ? few(rng) : pick(rng);
            if (c.n_experts == 0 || u(rng) < c.drop) e = u(rng) < 0.5 ? -1 : static_cast<int32_t>(c.n_experts);
        }
        const Tensor ids_dev = dev_i32(ids, alloc(), stream(), {c.n_tokens, c.top_k});
        const Tensor ids_host = Tensor::from_i32({c.n_tokens, c.top_k}, ids);
        const Tensor off_dev = Tensor::empty({c.n_experts + 1}, DType::kI32, alloc());
        const Tensor sorted_dev = Tensor::empty({n_pairs}, DType::kI32, alloc());
        cuda::fill_bytes_async(sorted_dev, 0x7f, stream());
        Tensor off_host = Tensor::zeros({c.n_experts + 1}, DType::kI32);
        Tensor sorted_host = Tensor::zeros({n_pairs}, DType::kI32);
        cuda::moe_align({.expert_offsets = off_dev, .sorted_pairs = sorted_dev, .topk_ids = ids_dev}, raw_stream());
        ref::moe_align({.expert_offsets = off_host, .sorted_pairs = sorted_host, .topk_ids = ids_host}, nullptr);
        const std::vector<int32_t> off = read_i32(off_dev, stream());
        const std::vector<int32_t> sorted = read_i32(sorted_dev, stream());
        EXPECT_EQ(off, std::vector<int32_t>(off_host.ptr<int32_t>(), off_host.ptr<int32_t>() + c.n_experts + 1));
        EXPECT_EQ(sorted, std::vector<int32_t>(sorted_host.ptr<int32_t>(), sorted_host.ptr<int32_t>() + n_pairs));
    }
}

TEST_F(MoeOpTest, PermuteAndUnpermute) {
    uint32_t seed = 1700;
    for (int64_t hidden : {1, 7, 256, 7168}) {
        for (DType dt : {DType::kF32, DType::kBF16}) {
            SCOPED_TRACE(::testing::Message() << "hidden=" << hidden << " " << dtype_name(dt));
            PENSTOCK_SEEDED(seed);
            std::mt19937 rng(seed++);
            // hidden 256 / 7168: contiguous rows, the 16-byte unpermute (top-k 4 and 16); 1 / 7: strided, scalar.
            const int64_t n_tokens = 37, top_k = hidden == 7168 ? 16 : 4, n_experts = 16;
            // Routing ids (a few dropped) -> align on the host -> sorted pairs for both sides.
            std::vector<int32_t> ids(static_cast<size_t>(n_tokens * top_k));
            std::uniform_int_distribution<int32_t> pick(-1, static_cast<int32_t>(n_experts - 1));
            for (auto& e : ids) e = pick(rng);
            const Tensor ids_host = Tensor::from_i32({n_tokens, top_k}, ids);
            Tensor off_host = Tensor::zeros({n_experts + 1}, DType::kI32);
            Tensor sorted_host = Tensor::zeros({n_tokens * top_k}, DType::kI32);
            ref::moe_align({.expert_offsets = off_host, .sorted_pairs = sorted_host, .topk_ids = ids_host}, nullptr);
            const int64_t n_rows = off_host.ptr<int32_t>()[n_experts];
            const std::vector<int32_t> sorted(sorted_host.ptr<int32_t>(),
                                              sorted_host.ptr<int32_t>() + n_tokens * top_k);
            const Tensor sorted_dev = dev_i32(sorted, alloc(), stream());

            const Pair in = random_pair(rng, {n_tokens, hidden}, dt, true, alloc(), stream());
            Pair perm = poisoned_pair({n_rows, hidden}, dt, true, alloc(), stream());
            cuda::moe_permute(
                {.out = perm.dv, .in = in.dv, .sorted_pairs = sorted_dev, .top_k = static_cast<int>(top_k)},
                raw_stream());
            ref::moe_permute(
                {.out = perm.hv, .in = in.hv, .sorted_pairs = sorted_host, .top_k = static_cast<int>(top_k)}, nullptr);
            expect_pair_close(perm, perm.hv, kExact, stream());
            if (hidden >= 256) {
                // 16-byte aligned rows (the GPU's token-order copy; the strided views above take its gather): all
                // rows, then the first half only (an expert-parallel rank's slice) into rows with a pitch wider than
                // hidden, where rows of pairs past the slice must not be written.
                const Pair in_c = random_pair(rng, {n_tokens, hidden}, dt, false, alloc(), stream());
                for (const int64_t rows : {n_rows, n_rows / 2}) {
                    const int64_t pitch = rows == n_rows ? hidden : hidden + 8;
                    Pair out_c = poisoned_pair({rows, pitch}, dt, false, alloc(), stream());
                    out_c.hv = out_c.hv.slice(1, 0, hidden);
                    out_c.dv = out_c.dv.slice(1, 0, hidden);
                    cuda::moe_permute({.out = out_c.dv, .in = in_c.dv, .sorted_pairs = sorted_dev,
                                       .top_k = static_cast<int>(top_k)},
                                      raw_stream());
                    ref::moe_permute({.out = out_c.hv, .in = in_c.hv, .sorted_pairs = sorted_host,
                                      .top_k = static_cast<int>(top_k)},
                                     nullptr);
                    expect_pair_close(out_c, out_c.hv, kExact, stream());
                }
            }

            if (dt == DType::kBF16) {  // e4m3 rows (FP8 experts permute quantised tokens): bytes, bit for bit
                Tensor q_h = Tensor::empty({n_tokens, hidden}, DType::kF8E4M3);
                std::uniform_int_distribution<int> byte(0, 255);
                auto* qb = static_cast<uint8_t*>(q_h.view().data);
                for (int64_t i = 0; i < n_tokens * hidden; ++i) qb[i] = static_cast<uint8_t>(byte(rng));
                const Tensor q_d = cuda::to_device(q_h, alloc(), stream());
                Tensor pq_d = Tensor::empty({n_rows, hidden}, DType::kF8E4M3, alloc());
                Tensor pq_h = Tensor::empty({n_rows, hidden}, DType::kF8E4M3);
                cuda::moe_permute({.out = pq_d, .in = q_d, .sorted_pairs = sorted_dev, .top_k = static_cast<int>(top_k)},
                                  raw_stream());
                ref::moe_permute({.out = pq_h, .in = q_h, .sorted_pairs = sorted_host, .top_k = static_cast<int>(top_k)},
                                 nullptr);
                const Tensor got = cuda::to_host(pq_d, stream());
                ASSERT_EQ(std::memcmp(got.view().data, pq_h.view().data, static_cast<size_t>(n_rows * hidden)), 0)
                    << "e4m3 permute";
            }
            const Pair expert_out = random_pair(rng, {n_rows, hidden}, dt, false, alloc(), stream());
            const Pair weights = random_pair(rng, {n_tokens, top_k}, DType::kF32, false, alloc(), stream(), 0.0f, 1.0f);
            Pair acc = random_pair(rng, {n_tokens, hidden}, dt, hidden < 8, alloc(), stream());
            cuda::moe_unpermute(
                {.out = acc.dv, .expert_out = expert_out.dv, .sorted_pairs = sorted_dev, .topk_weights = weights.dv},
                raw_stream());
            ref::moe_unpermute(
                {.out = acc.hv, .expert_out = expert_out.hv, .sorted_pairs = sorted_host, .topk_weights = weights.hv},
                nullptr);
            expect_pair_close(acc, acc.hv, tol_for(dt), stream(), false);
        }
    }
}

}  // namespace
}  // namespace penstock::test
