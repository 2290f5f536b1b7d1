// The tensor-core MLA absorbed-form kernels (kernels/cuda/mla_tc.h) against the CPU reference on the same seeded bf16
// inputs (the reference reads the bf16-rounded values as f32), through the ops' own dispatch:
//  - dense: cuda::attention with bf16 q [T, H, 576], k = a latent [L, 1, 576] and v = k[..., :512]; 1 token, rows off
//    the 64-row tile, heads 1 / 3 / 16 / 64 / 96 / 128, ragged batches with cached prefixes, rows that see no key,
//    non-causal, q_pos_step 2, an empty key sequence, 16-byte aligned strided q / k / out (padding must stay poisoned);
//    every case asserts that the tensor-core path took it.
//  - sparse: kernels::sparse_mla_attention with bf16 q / kv (v = kv[:, :512]), out bf16 and f32; top-k 1 / 7 / 64 /
//    65 / 127 / 2048 with -1 holes and -1 tail padding, an all -1 row, slots on page edges (64 p - 1, 64 p, 64 p + 1),
//    causal-prefix rows (every visible key, then -1), heads 1 / 3 / 16 / 64 / 96 / 128.
// Each case runs through the op's dispatch and through every variant (mma.sync, wgmma) explicitly. Outputs are
// compared to kBF16Tol (P is rounded to bf16 before P V); one "[conf]" line per output with max|d|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/mla_tc.h"
#include "kernels/ops_dsa.h"
#include "kernels/ref/ref_ops.h"
#include "tests/kernels/cuda/conformance_log.h"
#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {
namespace {

constexpr int64_t kDqk = 576;
constexpr int64_t kDv = 512;
constexpr int64_t kPage = 64;

// A pair whose backing is `padded` and whose views are the leading `shape` corner (strides of the padded shape), so
// padding keeps rows 16-byte aligned when every padded dim but the first is a multiple of 8.
Pair corner_pair(const std::vector<float>& values, const Shape& shape, const Shape& padded, DType dtype,
                 cuda::CudaCachingAllocator& alloc, const cuda::Stream& stream) {
    Pair p = make_pair_from(values, padded, dtype, /*strided=*/false, alloc, stream);
    for (size_t d = 1; d < shape.size(); ++d) {
        p.hv = p.hv.slice(static_cast<int>(d), 0, shape[d]);
        p.dv = p.dv.slice(static_cast<int>(d), 0, shape[d]);
    }
    return p;
}

Pair random_corner(std::mt19937& rng, const Shape& shape, const Shape& padded, DType dtype,
                   cuda::CudaCachingAllocator& alloc, const cuda::Stream& stream) {
    return corner_pair(random_floats(rng, numel_of(padded)), shape, padded, dtype, alloc, stream);
}

// A poisoned (NaN) device output viewed as the corner of `padded`.
Pair poisoned_corner(const Shape& shape, const Shape& padded, DType dtype, cuda::CudaCachingAllocator& alloc,
                     const cuda::Stream& stream) {
    Pair p = corner_pair(std::vector<float>(static_cast<size_t>(numel_of(padded)), 0.0f), shape, padded, dtype, alloc,
                         stream);
    cuda::fill_bytes_async(p.dev, 0xff, stream);
    return p;
}

// Every kernel variant, and the op's own dispatch (kAuto).
struct Variant {
    const char* name;
    cuda::MlaTcVariant variant;
    bool dispatch;
};

std::vector<Variant> variants() {
    return {{"dispatch", cuda::MlaTcVariant::kAuto, true},
            {"mma.sync", cuda::MlaTcVariant::kMmaSync, false},
            {"wgmma", cuda::MlaTcVariant::kWgmma, false},
            {"wgmma-ws", cuda::MlaTcVariant::kWgmmaWs, false},
            {"wgmma-pair", cuda::MlaTcVariant::kWgmmaPair, false},
            {"wgmma-pair-full", cuda::MlaTcVariant::kWgmmaPairFull, false}};
}

class MlaTcOpTest : public CudaTest {
protected:
    ThreadPool& pool() {
        if (!pool_) pool_ = std::make_unique<ThreadPool>(0);
        return *pool_;
    }

private:
    std::unique_ptr<ThreadPool> pool_;
};

// ------------------------------------------------------------------------------------------------ dense
struct DenseCase {
    const char* name;
    int64_t n_heads;
    std::vector<int32_t> q_lens, k_lens, q_pos0, k_pos0;
    bool causal = true;
    int32_t q_pos_step = 1;
    bool padded = false;  // q, k and out are 16-byte aligned corners of larger buffers
};

std::vector<DenseCase> dense_cases() {
    return {
        {"one_token_h1", 1, {1}, {1}, {0}, {0}},
        {"h1_off_tile", 1, {77}, {77}, {0}, {0}},
        {"h3_off_tile", 3, {45}, {45}, {0}, {0}},
        {"h16_varlen3_prefix", 16, {5, 33, 1}, {20, 33, 65}, {15, 0, 64}, {0, 0, 0}},
        {"h64_prefix100", 64, {7, 70}, {107, 70}, {100, 0}, {0, 0}},
        {"h96_varlen2", 96, {3, 20}, {130, 20}, {127, 0}, {0, 0}, true, 1, true},
        {"h128_prefix63", 128, {17}, {80}, {63}, {0}},
        {"h16_no_visible_keys", 16, {4, 3}, {10, 6}, {0, 0}, {5, 100}},
        {"h16_non_causal", 16, {9, 2}, {40, 130}, {0, 0}, {0, 0}, false},
        {"h16_q_pos_step2", 16, {12}, {40}, {3}, {0}, true, 2},
        {"h8_empty_k_seq", 8, {3, 5}, {0, 9}, {0, 4}, {0, 0}},
        {"h64_padded_long", 64, {130}, {300}, {170}, {0}, true, 1, true},
        {"h3_ragged4", 3, {1, 64, 65, 2}, {64, 64, 129, 200}, {63, 0, 64, 198}, {0, 0, 0, 0}},
    };
}

TEST_F(MlaTcOpTest, DenseAbsorbedMatchesReference) {
    uint32_t seed = 7100;
    for (const DenseCase& c : dense_cases()) {
        SCOPED_TRACE(c.name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        std::vector<int32_t> cu_q(1, 0), cu_k(1, 0);
        for (size_t s = 0; s < c.q_lens.size(); ++s) {
            cu_q.push_back(cu_q.back() + c.q_lens[s]);
            cu_k.push_back(cu_k.back() + c.k_lens[s]);
        }
        const int64_t total_q = cu_q.back(), total_k = cu_k.back(), H = c.n_heads;
        const int64_t pad = c.padded ? 8 : 0;
        const Pair q = random_corner(rng, {total_q, H, kDqk}, {total_q, H + (c.padded ? 1 : 0), kDqk + pad},
                                     DType::kBF16, alloc(), stream());
        const Pair k = random_corner(rng, {std::max<int64_t>(total_k, 1), 1, kDqk},
                                     {std::max<int64_t>(total_k, 1), 1, kDqk + pad}, DType::kBF16, alloc(), stream());
        const TensorView k_dev = k.dv.slice(0, 0, total_k), k_host = k.hv.slice(0, 0, total_k);
        Pair out = poisoned_corner({total_q, H, kDv}, {total_q, H + (c.padded ? 1 : 0), kDv + pad}, DType::kBF16,
                                   alloc(), stream());
        Pair lse = poisoned_pair({total_q, H}, DType::kF32, /*strided=*/c.padded, alloc(), stream());
        const Tensor cu_q_d = dev_i32(cu_q, alloc(), stream()), cu_k_d = dev_i32(cu_k, alloc(), stream());
        const Tensor qp_d = dev_i32(c.q_pos0, alloc(), stream()), kp_d = dev_i32(c.k_pos0, alloc(), stream());
        const Tensor cu_q_h = i32_tensor(cu_q), cu_k_h = i32_tensor(cu_k);
        const Tensor qp_h = i32_tensor(c.q_pos0), kp_h = i32_tensor(c.k_pos0);
        const float scale = 2.0f / std::sqrt(static_cast<float>(kDqk));  // sharper than uniform
        const kernels::AttentionParams gp{.out = out.dv,
                                          .lse = lse.dv,
                                          .q = q.dv,
                                          .k = k_dev,
                                          .v = k_dev.slice(2, 0, kDv),
                                          .cu_seqlens_q = cu_q_d,
                                          .cu_seqlens_k = cu_k_d,
                                          .q_pos0 = qp_d,
                                          .k_pos0 = kp_d,
                                          .scale = scale,
                                          .causal = c.causal,
                                          .q_pos_step = c.q_pos_step};
        EXPECT_TRUE(cuda::mla_tc_attention_supported(gp)) << "the tensor-core path must take this case";
        ref::attention({.out = out.hv,
                        .lse = lse.hv,
                        .q = q.hv,
                        .k = k_host,
                        .v = k_host.slice(2, 0, kDv),
                        .cu_seqlens_q = cu_q_h,
                        .cu_seqlens_k = cu_k_h,
                        .q_pos0 = qp_h,
                        .k_pos0 = kp_h,
                        .scale = scale,
                        .causal = c.causal,
                        .q_pos_step = c.q_pos_step},
                       &pool());
        for (const Variant& v : variants()) {
            cuda::fill_bytes_async(out.dev, 0xff, stream());
            cuda::fill_bytes_async(lse.dev, 0xff, stream());
            if (v.dispatch) {
                cuda::attention(gp, raw_stream());
            } else {
                cuda::mla_tc_attention(gp, v.variant, raw_stream());
            }
            const std::string name = std::string(c.name) + " [" + v.name + "]";
            conf_pair("mla_tc dense", name + " out", out, out.hv, kBF16Tol, stream());
            conf_pair("mla_tc dense", name + " lse", lse, lse.hv, kBF16Tol, stream());
        }
    }
}

// ------------------------------------------------------------------------------------------------ sparse
enum class Pattern { kRandomHoles, kPageEdges, kCausalPrefix, kTailPadded, kLateKeys };

struct SparseCase {
    const char* name;
    int64_t n_rows, n_heads, top_k, n_pages;
    Pattern pattern;
    DType out_dtype = DType::kBF16;
    bool padded = false;  // q, kv, out are aligned corners of larger buffers
};

// Index lists of one case (row-major [n_rows, top_k], -1 = unused).
std::vector<int32_t> make_indices(const SparseCase& c, std::mt19937& rng) {
    const int64_t n_slots = c.n_pages * kPage;
    std::vector<int32_t> idx(static_cast<size_t>(c.n_rows * c.top_k), -1);
    std::vector<int32_t> perm(static_cast<size_t>(n_slots));
    std::iota(perm.begin(), perm.end(), 0);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int64_t r = 0; r < c.n_rows; ++r) {
        int32_t* row = idx.data() + r * c.top_k;
        switch (c.pattern) {
            case Pattern::kRandomHoles: {
                // Row 0 full; the others with scattered -1 holes and a short -1 tail; the last of >= 3 rows all -1.
                if (c.n_rows >= 3 && r == c.n_rows - 1) break;
                std::shuffle(perm.begin(), perm.end(), rng);
                const int64_t used = std::min<int64_t>(r == 0 ? c.top_k : c.top_k - (r % 5), n_slots);
                for (int64_t j = 0; j < used; ++j) {
                    if (r > 0 && u(rng) < 0.1f) continue;
                    row[j] = perm[static_cast<size_t>(j)];
                }
                break;
            }
            case Pattern::kPageEdges: {
                // Slots 64 p - 1, 64 p, 64 p + 1 of every page edge (and the first / last slot), shuffled, then -1.
                std::vector<int32_t> edges{0, static_cast<int32_t>(n_slots - 1)};
                for (int64_t p = 1; p < c.n_pages; ++p) {
                    for (int64_t d = -1; d <= 1; ++d) edges.push_back(static_cast<int32_t>(p * kPage + d));
                }
                std::shuffle(edges.begin(), edges.end(), rng);
                const int64_t used = std::min<int64_t>(c.top_k - r, static_cast<int64_t>(edges.size()));
                for (int64_t j = 0; j < used; ++j) row[j] = edges[static_cast<size_t>(j)];
                break;
            }
            case Pattern::kCausalPrefix: {
                // Row r sits at position n_slots - n_rows + r: every visible slot in ascending order when they fit
                // in top_k (a dense-causal row), else top_k of them (ascending), then -1.
                const int64_t visible = n_slots - c.n_rows + r + 1;
                if (visible <= c.top_k) {
                    for (int64_t j = 0; j < visible; ++j) row[j] = static_cast<int32_t>(j);
                } else {
                    std::vector<int32_t> pick(static_cast<size_t>(visible));
                    std::iota(pick.begin(), pick.end(), 0);
                    std::shuffle(pick.begin(), pick.end(), rng);
                    pick.resize(static_cast<size_t>(c.top_k));
                    std::sort(pick.begin(), pick.end());
                    std::copy(pick.begin(), pick.end(), row);
                }
                break;
            }
            case Pattern::kTailPadded: {
                // Row r keeps only its first n_valid(r) entries (ascending distinct slots), then -1: row 0 one entry,
                // row 1 none, the others 65 / 700 / all.
                const int64_t n_valid_by_row[] = {1, 0, 65, 700, c.top_k};
                const int64_t n_valid = std::min<int64_t>(c.top_k, n_valid_by_row[std::min<int64_t>(r, 4)]);
                std::shuffle(perm.begin(), perm.end(), rng);
                std::vector<int32_t> pick(perm.begin(), perm.begin() + std::min<int64_t>(n_valid, n_slots));
                std::sort(pick.begin(), pick.end());
                std::copy(pick.begin(), pick.end(), row);
                break;
            }
            case Pattern::kLateKeys: {
                // Keys only late in the list, behind long -1 runs (the paired kernel runs up to the last valid
                // index): row 0 only its last entry, row 1 three entries mid-list, row 2 the second half, row 3 the
                // first and the last entry, further rows one key in the last 64-key tile.
                std::shuffle(perm.begin(), perm.end(), rng);
                const int64_t k = c.top_k;
                std::vector<int64_t> at;
                switch (std::min<int64_t>(r, 4)) {
                    case 0:
                        at = {k - 1};
                        break;
                    case 1:
                        at = {k / 2, k / 2 + 1, k / 2 + 2};
                        break;
                    case 2:
                        for (int64_t j = k / 2; j < k; ++j) at.push_back(j);
                        break;
                    case 3:
                        at = {0, k - 1};
                        break;
                    default:
                        at = {std::max<int64_t>(0, k - 1 - (r % 64))};
                        break;
                }
                for (size_t j = 0; j < at.size(); ++j) {
                    if (at[j] < k) row[at[j]] = perm[j % static_cast<size_t>(n_slots)];
                }
                break;
            }
        }
    }
    return idx;
}

std::vector<SparseCase> sparse_cases() {
    return {
        {"one_token_h1_k1", 1, 1, 1, 1, Pattern::kRandomHoles},
        {"h3_k7_holes", 5, 3, 7, 1, Pattern::kRandomHoles},
        {"h16_k64", 9, 16, 64, 2, Pattern::kRandomHoles},
        {"h64_k65_page_edges", 4, 64, 65, 30, Pattern::kPageEdges},
        {"h96_k127_f32out_padded", 3, 96, 127, 3, Pattern::kRandomHoles, DType::kF32, true},
        {"h16_k128_causal_prefix", 6, 16, 128, 2, Pattern::kCausalPrefix},
        {"h64_k200_causal_prefix", 4, 64, 200, 5, Pattern::kCausalPrefix, DType::kF32},
        {"h128_k2048", 2, 128, 2048, 40, Pattern::kRandomHoles},
        {"h64_k2048_tail_padded", 5, 64, 2048, 36, Pattern::kTailPadded, DType::kBF16, true},
        {"h1_k2048_tail_padded_f32", 5, 1, 2048, 33, Pattern::kTailPadded, DType::kF32},
        {"h64_k2048_late_keys", 6, 64, 2048, 33, Pattern::kLateKeys},
        {"h64_k320_late_keys", 5, 64, 320, 6, Pattern::kLateKeys, DType::kF32},
    };
}

TEST_F(MlaTcOpTest, SparseMatchesReference) {
    uint32_t seed = 7200;
    const kernels::Context gpu{.device = Device::kCUDA, .pool = nullptr, .stream = raw_stream(), .alloc = &alloc()};
    for (const SparseCase& c : sparse_cases()) {
        SCOPED_TRACE(c.name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const int64_t n_slots = c.n_pages * kPage, H = c.n_heads;
        const int64_t pad = c.padded ? 8 : 0;
        const Pair q = random_corner(rng, {c.n_rows, H, kDqk}, {c.n_rows, H + (c.padded ? 1 : 0), kDqk + pad},
                                     DType::kBF16, alloc(), stream());
        const Pair kv = random_corner(rng, {n_slots, kDqk}, {n_slots, kDqk + pad}, DType::kBF16, alloc(), stream());
        const std::vector<int32_t> idx = make_indices(c, rng);
        const Tensor idx_d = dev_i32(idx, alloc(), stream(), {c.n_rows, c.top_k});
        const Tensor idx_h = Tensor::from_i32({c.n_rows, c.top_k}, idx);
        Pair out = poisoned_corner({c.n_rows, H, kDv}, {c.n_rows, H + (c.padded ? 1 : 0), kDv + pad}, c.out_dtype,
                                   alloc(), stream());
        Pair lse = poisoned_pair({c.n_rows, H}, DType::kF32, /*strided=*/false, alloc(), stream());
        const float scale = 2.0f / std::sqrt(static_cast<float>(kDqk));
        const kernels::SparseMlaAttentionParams gp{.out = out.dv, .lse = lse.dv, .q = q.dv, .kv = kv.dv,
                                                   .v = kv.dv.slice(1, 0, kDv), .indices = idx_d, .scale = scale};
        EXPECT_TRUE(cuda::mla_tc_sparse_supported(gp));
        kernels::sparse_mla_attention({.out = out.hv, .lse = lse.hv, .q = q.hv, .kv = kv.hv,
                                       .v = kv.hv.slice(1, 0, kDv), .indices = idx_h, .scale = scale},
                                      kernels::Context{.device = Device::kCPU, .pool = &pool()});
        for (const Variant& v : variants()) {
            cuda::fill_bytes_async(out.dev, 0xff, stream());
            cuda::fill_bytes_async(lse.dev, 0xff, stream());
            if (v.dispatch) {
                kernels::sparse_mla_attention(gp, gpu);
            } else {
                cuda::mla_tc_sparse_attention(gp, v.variant, raw_stream());
            }
            const std::string name =
                std::string(c.name) + " [" + v.name + ", out " + std::string(dtype_name(c.out_dtype)) + "]";
            conf_pair("mla_tc sparse", name + " out", out, out.hv, kBF16Tol, stream());
            conf_pair("mla_tc sparse", name + " lse", lse, lse.hv, kBF16Tol, stream());
        }
    }
}

}  // namespace
}  // namespace penstock::test
