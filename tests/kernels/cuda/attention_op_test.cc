// cuda::attention against the CPU reference (double accumulation): f32 to kF32Tol and bf16 to kBF16Tol, for out and
// lse. Grid: 1 token; lengths off the 8-row / 32-key tiles; varlen batches of 3 with cached prefixes; GQA ratios
// 1/4/8; odd head counts 3 and 96; MLA MHA form d_qk 192 / d_v 128; MLA absorbed form d_qk 576 / d_v 512 with
// k = latent [L, 1, 576] and v = a strided view of its first 512 columns; rows with no visible key (k_pos0 past the
// query); non-causal; strided q/k/v.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ref/ref_ops.h"
#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {
namespace {

struct AttnCase {
    const char* name;
    int64_t n_heads, n_kv_heads, d_qk, d_v;
    std::vector<int32_t> q_lens, k_lens, q_pos0, k_pos0;
    bool causal = true;
    bool strided = false;
    bool mla_shared_kv = false;  // v = k[..., :d_v]
};

class AttentionOpTest : public CudaTest {
protected:
    void run(const AttnCase& c, DType dt, uint32_t seed) {
        SCOPED_TRACE(::testing::Message() << c.name << " " << dtype_name(dt));
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed);
        std::vector<int32_t> cu_q(1, 0), cu_k(1, 0);
        for (size_t s = 0; s < c.q_lens.size(); ++s) {
            cu_q.push_back(cu_q.back() + c.q_lens[s]);
            cu_k.push_back(cu_k.back() + c.k_lens[s]);
        }
        const int64_t total_q = cu_q.back(), total_k = cu_k.back();
        const Pair q = random_pair(rng, {total_q, c.n_heads, c.d_qk}, dt, c.strided, alloc(), stream());
        const Pair k = random_pair(rng, {total_k, c.n_kv_heads, c.d_qk}, dt, c.strided, alloc(), stream());
        Pair v_own;
        TensorView v_dev, v_host;
        if (c.mla_shared_kv) {
            v_dev = k.dv.slice(2, 0, c.d_v);
            v_host = k.hv.slice(2, 0, c.d_v);
        } else {
            v_own = random_pair(rng, {total_k, c.n_kv_heads, c.d_v}, dt, c.strided, alloc(), stream());
            v_dev = v_own.dv;
            v_host = v_own.hv;
        }
        Pair out = poisoned_pair({total_q, c.n_heads, c.d_v}, dt, c.strided, alloc(), stream());
        Pair lse = poisoned_pair({total_q, c.n_heads}, DType::kF32, c.strided, alloc(), stream());
        const Tensor cu_q_d = dev_i32(cu_q, alloc(), stream()), cu_k_d = dev_i32(cu_k, alloc(), stream());
        const Tensor qp_d = dev_i32(c.q_pos0, alloc(), stream()), kp_d = dev_i32(c.k_pos0, alloc(), stream());
        const Tensor cu_q_h = i32_tensor(cu_q), cu_k_h = i32_tensor(cu_k);
        const Tensor qp_h = i32_tensor(c.q_pos0), kp_h = i32_tensor(c.k_pos0);
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.d_qk)) * 2.0f;  // sharper than uniform
        cuda::attention({.out = out.dv,
                         .lse = lse.dv,
                         .q = q.dv,
                         .k = k.dv,
                         .v = v_dev,
                         .cu_seqlens_q = cu_q_d,
                         .cu_seqlens_k = cu_k_d,
                         .q_pos0 = qp_d,
                         .k_pos0 = kp_d,
                         .scale = scale,
                         .causal = c.causal},
                        raw_stream());
        ref::attention({.out = out.hv,
                        .lse = lse.hv,
                        .q = q.hv,
                        .k = k.hv,
                        .v = v_host,
                        .cu_seqlens_q = cu_q_h,
                        .cu_seqlens_k = cu_k_h,
                        .q_pos0 = qp_h,
                        .k_pos0 = kp_h,
                        .scale = scale,
                        .causal = c.causal},
                       nullptr);
        expect_pair_close(out, out.hv, tol_for(dt), stream());
        expect_pair_close(lse, lse.hv, dt == DType::kF32 ? kF32Tol : kBF16Tol, stream());
    }
};

std::vector<AttnCase> cases() {
    return {
        {"one_token", 3, 3, 64, 64, {1}, {1}, {0}, {0}},
        {"single_seq_off_tile", 3, 3, 64, 64, {45}, {45}, {0}, {0}},
        {"varlen3_prefix_gqa1", 4, 4, 128, 128, {1, 17, 40}, {5, 17, 100}, {4, 0, 60}, {0, 0, 0}},
        {"varlen3_prefix_gqa4", 8, 2, 128, 128, {3, 33, 9}, {35, 33, 70}, {32, 0, 61}, {0, 0, 0}},
        {"varlen3_prefix_gqa8", 8, 1, 64, 64, {9, 1, 31}, {9, 64, 31}, {0, 63, 0}, {0, 0, 0}, true, true},
        {"heads96", 96, 96, 64, 64, {13}, {29}, {16}, {0}},
        {"mla_mha_192_128", 16, 16, 192, 128, {7, 40, 2}, {7, 72, 130}, {0, 32, 128}, {0, 0, 0}, true, true},
        {"mla_absorbed_576_512", 16, 1, 576, 512, {5, 33, 1}, {20, 33, 65}, {15, 0, 64}, {0, 0, 0}, true, false, true},
        {"no_visible_keys", 4, 2, 64, 32, {10, 4}, {12, 6}, {0, 0}, {5, 100}},
        {"non_causal", 3, 1, 96, 80, {17, 2}, {40, 70}, {0, 0}, {0, 0}, false, true},
        {"empty_k_seq", 2, 2, 32, 32, {3, 5}, {0, 9}, {0, 4}, {0, 0}},
    };
}

TEST_F(AttentionOpTest, F32MatchesReference) {
    uint32_t seed = 1300;
    for (const AttnCase& c : cases()) {
        run(c, DType::kF32, seed++);
        if (HasFatalFailure()) return;
    }
}

TEST_F(AttentionOpTest, BF16MatchesReference) {
    uint32_t seed = 1400;
    for (const AttnCase& c : cases()) {
        run(c, DType::kBF16, seed++);
        if (HasFatalFailure()) return;
    }
}

}  // namespace
}  // namespace penstock::test
