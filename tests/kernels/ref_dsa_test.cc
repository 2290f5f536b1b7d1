// CPU reference DSA ops against naive double computations written here: indexer logits (f32 and fp8 keys, strided
// views, exact ReLU zeros), causal top-k (the mask applied inside the selection: masked logits are never read, rows
// with <= top_k visible keys take them all, torch.topk's choice among exactly tied logits for given row lengths,
// including the partial_sort path), the FP8 quantiser (float emulation of Hadamard + e4m3 + ue8m0 scale), and sparse
// MLA attention (naive double, skipped -1 entries, empty rows, bit-exact with ref::attention over all visible keys).
#include "kernels/ref/ref_dsa.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ref/ref_ops.h"
#include "ref_test_util.h"

namespace penstock::test {
namespace {

double f(const TensorView& v, std::initializer_list<int64_t> idx) { return *v.at<const float>(idx); }

// ------------------------------------------------------------------------------------------------- indexer logits
TEST(RefDsaIndexer, F32LogitsMatchNaive) {
    const uint32_t seed = 301;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    const int64_t n = 5, heads = 3, dim = 8, keys = 11;
    for (bool strided : {false, true}) {
        Buffer q = random_buffer(rng, {n, heads, dim}, strided);
        Buffer k = random_buffer(rng, {keys, dim}, strided);
        Buffer w = random_buffer(rng, {n, heads}, strided);
        Tensor logits = Tensor::empty({n, keys}, DType::kF32);
        const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
        ThreadPool pool(3);
        ref::dsa_indexer_logits({.logits = logits,
                                 .q = q.view,
                                 .k = k.view,
                                 .weights = w.view,
                                 .q_scale = {},
                                 .k_scale = {},
                                 .q_pos = {},
                                 .scale = scale},
                                &pool);
        std::vector<double> want;
        int64_t zeros = 0;
        for (int64_t r = 0; r < n; ++r) {
            for (int64_t s = 0; s < keys; ++s) {
                double acc = 0.0;
                bool all_neg = true;
                for (int64_t h = 0; h < heads; ++h) {
                    double dot = 0.0;
                    for (int64_t i = 0; i < dim; ++i) dot += f(q.view, {r, h, i}) * f(k.view, {s, i});
                    all_neg &= dot <= 0.0;
                    acc += f(w.view, {r, h}) * std::max(0.0, scale * dot);
                }
                want.push_back(acc);
                if (all_neg) {
                    EXPECT_EQ(*logits.view().at<const float>({r, s}), 0.0f) << "ReLU zeros must be exact";
                    ++zeros;
                }
            }
        }
        EXPECT_TRUE(all_close(read_f32(logits), want, kF32Reduction, {n, keys}));
        EXPECT_GT(zeros, 0) << "the case should exercise exact zeros";
    }
}

TEST(RefDsaIndexer, Fp8LogitsMatchNaive) {
    const uint32_t seed = 302;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    const int64_t n = 4, heads = 2, dim = 16, keys = 7;
    Tensor q8 = Tensor::empty({n, heads, dim}, DType::kF8E4M3);
    Tensor k8 = Tensor::empty({keys, dim}, DType::kF8E4M3);
    const auto qv = random_floats(rng, q8.numel(), -300.0f, 300.0f);
    const auto kv = random_floats(rng, k8.numel(), -300.0f, 300.0f);
    for (int64_t i = 0; i < q8.numel(); ++i) q8.ptr<uint8_t>()[i] = float_to_e4m3(qv[static_cast<size_t>(i)]);
    for (int64_t i = 0; i < k8.numel(); ++i) k8.ptr<uint8_t>()[i] = float_to_e4m3(kv[static_cast<size_t>(i)]);
    Tensor w = Tensor::from_f32({n, heads}, random_floats(rng, n * heads));
    Tensor qs = Tensor::from_f32({n, heads}, random_floats(rng, n * heads, 0.01f, 0.1f));
    Tensor ks = Tensor::from_f32({keys}, random_floats(rng, keys, 0.01f, 0.1f));
    Tensor logits = Tensor::empty({n, keys}, DType::kF32);
    const float scale = 0.25f;
    ref::dsa_indexer_logits(
        {.logits = logits, .q = q8, .k = k8, .weights = w, .q_scale = qs, .k_scale = ks, .q_pos = {}, .scale = scale},
        nullptr);
    std::vector<double> want;
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t s = 0; s < keys; ++s) {
            double acc = 0.0;
            for (int64_t h = 0; h < heads; ++h) {
                double dot = 0.0;
                for (int64_t i = 0; i < dim; ++i) {
                    dot += static_cast<double>(e4m3_to_float(*q8.view().at<const uint8_t>({r, h, i}))) *
                           e4m3_to_float(*k8.view().at<const uint8_t>({s, i}));
                }
                acc += std::max(0.0, dot) * f(w, {r, h}) * f(qs, {r, h}) * scale;
            }
            want.push_back(acc * f(ks, {s}));
        }
    }
    EXPECT_TRUE(all_close(read_f32(logits), want, kF32Reduction, {n, keys}));
}

// ------------------------------------------------------------------------------------------------- top-k
std::vector<int32_t> row_of(const Tensor& t, int64_t r) {
    return std::vector<int32_t>(t.ptr<const int32_t>() + r * t.size(1), t.ptr<const int32_t>() + (r + 1) * t.size(1));
}

TEST(RefDsaTopk, CausalMaskInsideSelection) {
    const uint32_t seed = 303;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    const int64_t keys = 40, k = 6;
    const std::vector<int32_t> pos{0, 3, 5, 6, 7, 20, 39};
    const auto n = static_cast<int64_t>(pos.size());
    // Distinct visible values; masked entries hold garbage larger than any visible one (never to be read).
    std::vector<float> vals = random_floats(rng, n * keys);
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t s = pos[static_cast<size_t>(r)] + 1; s < keys; ++s) {
            vals[static_cast<size_t>(r * keys + s)] = (s % 2) ? std::numeric_limits<float>::infinity() : 1e30f;
        }
    }
    Tensor logits = Tensor::from_f32({n, keys}, vals);
    Tensor q_pos = Tensor::from_i32({n}, pos);
    Tensor idx = Tensor::empty({n, k}, DType::kI32);
    ThreadPool pool(2);
    ref::dsa_topk({.indices = idx, .logits = logits, .q_pos = q_pos}, &pool);
    for (int64_t r = 0; r < n; ++r) {
        const int64_t visible = pos[static_cast<size_t>(r)] + 1;
        std::vector<int32_t> want;
        if (visible <= k) {
            for (int32_t s = 0; s < visible; ++s) want.push_back(s);
        } else {
            std::vector<int32_t> order(static_cast<size_t>(visible));
            for (int32_t s = 0; s < visible; ++s) order[static_cast<size_t>(s)] = s;
            std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
                return vals[static_cast<size_t>(r * keys + a)] > vals[static_cast<size_t>(r * keys + b)];
            });
            want.assign(order.begin(), order.begin() + k);
            std::sort(want.begin(), want.end());
        }
        want.resize(static_cast<size_t>(k), -1);
        EXPECT_EQ(row_of(idx, r), want) << "row " << r << " (q_pos " << pos[static_cast<size_t>(r)] << ")";
    }
}

// torch.topk's choice among exactly tied logits, as Hugging Face's indexer sees them (masked entries = finfo.min).
// Expected sets were produced with torch 2.11 on the CPU: row = zeros with the listed values, entries >= visible set
// to finfo(float32).min, then row.topk(k).indices.sort().
struct TieCase {
    int64_t n_keys, torch_row_len, visible, k;
    std::vector<std::pair<int64_t, float>> values;
    std::vector<int32_t> want;
};

TEST(RefDsaTopk, TiesBreakAsTorchTopk) {
    std::vector<std::pair<int64_t, float>> b_vals;  // negatives at every third key, then two positives
    for (int64_t j = 0; j < 50; j += 3) b_vals.emplace_back(j, -1.0f - static_cast<float>(j));
    b_vals.emplace_back(5, 1.0f);
    b_vals.emplace_back(9, 2.0f);
    const std::vector<TieCase> cases{
        // 7 positives then 9 of the 23 tied zeros, row of 40 (nth_element path).
        {40,
         0,
         30,
         16,
         {{3, 0.5f}, {7, 0.25f}, {11, 1.0f}, {15, 2.0f}, {19, 0.125f}, {23, 3.0f}, {27, 0.75f}},
         {3, 7, 11, 15, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29}},
        // The same 50 visible keys in a row of 200 (an unchunked 200-token prompt) and of 50: torch picks different
        // zeros, so the emulated row length matters.
        {50, 200, 50, 16, b_vals, {5, 9, 22, 23, 25, 26, 28, 29, 31, 32, 34, 37, 43, 44, 46, 47}},
        {50, 0, 50, 16, b_vals, {5, 9, 22, 23, 26, 28, 29, 31, 32, 34, 35, 38, 43, 44, 46, 47}},
        // partial_sort path (k * 64 <= row length): all 150 visible keys tied.
        {150, 200, 150, 2, {}, {0, 1}},
    };
    for (const TieCase& c : cases) {
        std::vector<float> vals(static_cast<size_t>(c.n_keys), 0.0f);
        for (const auto& [j, v] : c.values) vals[static_cast<size_t>(j)] = v;
        Tensor logits = Tensor::from_f32({1, c.n_keys}, vals);
        Tensor q_pos = Tensor::from_i32({1}, std::vector<int32_t>{static_cast<int32_t>(c.visible - 1)});
        Tensor idx = Tensor::empty({1, c.k}, DType::kI32);
        ref::dsa_topk({.indices = idx, .logits = logits, .q_pos = q_pos, .torch_row_len = c.torch_row_len}, nullptr);
        EXPECT_EQ(row_of(idx, 0), c.want) << "n_keys " << c.n_keys << " torch_row_len " << c.torch_row_len;
    }
}

// ------------------------------------------------------------------------------------------------- fp8 quantiser
// The test's float emulation of DeepSeek-V3.2's act_quant (block = row, ue8m0 or plain scale).
void emulate_quant(const std::vector<double>& y, bool ue8m0, std::vector<uint8_t>* out, float* scale) {
    double amax = 0.0;
    for (double v : y) amax = std::max(amax, std::fabs(v));
    float s = std::max(static_cast<float>(amax), 1e-4f) / 448.0f;
    if (ue8m0) s = std::exp2(std::ceil(std::log2(s)));
    out->clear();
    for (double v : y) out->push_back(float_to_e4m3(std::clamp(static_cast<float>(v) / s, -448.0f, 448.0f)));
    *scale = s;
}

TEST(RefDsaQuantize, WithoutRotationIsBitExactWithEmulation) {
    const uint32_t seed = 304;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    const int64_t n = 9, dim = 32;
    for (bool ue8m0 : {true, false}) {
        Buffer in = random_buffer(rng, {n, dim}, true, -3.0f, 3.0f);
        write_f32(in.view.slice(0, 4, 5), std::vector<float>(dim, 0.0f));  // all-zero row: scale from the 1e-4 floor
        Tensor out = Tensor::empty({n, dim}, DType::kF8E4M3);
        Tensor scale = Tensor::empty({n}, DType::kF32);
        ref::dsa_quantize_fp8({.out = out, .scale = scale, .in = in.view, .rotate = false, .ue8m0 = ue8m0}, nullptr);
        for (int64_t r = 0; r < n; ++r) {
            std::vector<double> y;
            for (int64_t i = 0; i < dim; ++i) y.push_back(f(in.view, {r, i}));
            std::vector<uint8_t> want;
            float want_scale = 0.0f;
            emulate_quant(y, ue8m0, &want, &want_scale);
            EXPECT_EQ(std::vector<uint8_t>(out.ptr<uint8_t>() + r * dim, out.ptr<uint8_t>() + (r + 1) * dim), want)
                << "row " << r;
            EXPECT_EQ(scale.ptr<float>()[r], want_scale) << "row " << r;
        }
    }
}

TEST(RefDsaQuantize, HadamardRotationMatchesEmulation) {
    const uint32_t seed = 305;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    const int64_t n = 6, dim = 128;
    // Sylvester Hadamard: H[i][j] = (-1)^popcount(i & j).
    const auto h = [](int64_t i, int64_t j) {
        return (__builtin_popcountll(static_cast<uint64_t>(i & j)) % 2) ? -1.0 : 1.0;
    };
    Tensor in = Tensor::from_f32({n, dim}, random_floats(rng, n * dim, -2.0f, 2.0f));
    Tensor out = Tensor::empty({n, dim}, DType::kF8E4M3);
    Tensor scale = Tensor::empty({n}, DType::kF32);
    ref::dsa_quantize_fp8({.out = out, .scale = scale, .in = in, .rotate = true, .ue8m0 = true}, nullptr);
    std::vector<std::vector<double>> rotated;
    for (int64_t r = 0; r < n; ++r) {
        std::vector<double> y(static_cast<size_t>(dim), 0.0);
        for (int64_t i = 0; i < dim; ++i) {
            for (int64_t j = 0; j < dim; ++j) y[static_cast<size_t>(i)] += h(i, j) * f(in, {r, j});
            y[static_cast<size_t>(i)] /= std::sqrt(static_cast<double>(dim));
        }
        std::vector<uint8_t> want;
        float want_scale = 0.0f;
        emulate_quant(y, true, &want, &want_scale);
        EXPECT_EQ(scale.ptr<float>()[r], want_scale) << "row " << r;
        // The f32 butterflies and the double matrix product may round a value across an e4m3 midpoint: compare the
        // dequantised values within one e4m3 step, and the bytes for (nearly) all elements.
        std::vector<float> got;
        std::vector<double> ref;
        int64_t same = 0;
        for (int64_t i = 0; i < dim; ++i) {
            const uint8_t g = out.ptr<uint8_t>()[r * dim + i];
            got.push_back(e4m3_to_float(g) * want_scale);
            ref.push_back(y[static_cast<size_t>(i)]);
            same += g == want[static_cast<size_t>(i)];
        }
        EXPECT_TRUE(all_close(got, ref, kF8E4M3Tol)) << "row " << r;
        EXPECT_GE(same, dim - 2) << "row " << r;
        rotated.push_back(y);
    }
    // Orthonormal: dot products survive the rotation (before quantisation).
    double dot_in = 0.0, dot_rot = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
        dot_in += f(in, {0, i}) * f(in, {1, i});
        dot_rot += rotated[0][static_cast<size_t>(i)] * rotated[1][static_cast<size_t>(i)];
    }
    EXPECT_NEAR(dot_in, dot_rot, 1e-9);
}

// ------------------------------------------------------------------------------------------------- sparse MLA
TEST(RefSparseMla, MatchesNaiveAndSkipsUnused) {
    const uint32_t seed = 306;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    const int64_t n = 4, heads = 3, d_qk = 12, d_v = 8, slots = 20, k = 5;
    Buffer q = random_buffer(rng, {n, heads, d_qk}, true);
    Buffer kv = random_buffer(rng, {slots, d_qk}, true);
    const std::vector<int32_t> idx{3,  17, -1, 0,  9,   // a -1 in the middle
                                   -1, -1, -1, -1, -1,  // no key: out 0, lse -inf
                                   19, 18, 2,  5,  11, 7, -1, -1, -1, -1};
    Tensor indices = Tensor::from_i32({n, k}, idx);
    Tensor out = Tensor::empty({n, heads, d_v}, DType::kF32);
    Tensor lse = Tensor::empty({n, heads}, DType::kF32);
    const float scale = 0.3f;
    ThreadPool pool(2);
    ref::sparse_mla_attention({.out = out,
                               .lse = lse,
                               .q = q.view,
                               .kv = kv.view,
                               .v = kv.view.slice(1, 0, d_v),
                               .indices = indices,
                               .scale = scale},
                              &pool);
    std::vector<double> want_out, want_lse;
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t hh = 0; hh < heads; ++hh) {
            std::vector<double> s;
            std::vector<int32_t> used;
            for (int64_t j = 0; j < k; ++j) {
                const int32_t slot = idx[static_cast<size_t>(r * k + j)];
                if (slot < 0) continue;
                double dot = 0.0;
                for (int64_t i = 0; i < d_qk; ++i) dot += f(q.view, {r, hh, i}) * f(kv.view, {slot, i});
                s.push_back(scale * dot);
                used.push_back(slot);
            }
            if (used.empty()) {
                for (int64_t i = 0; i < d_v; ++i) want_out.push_back(0.0);
                want_lse.push_back(-std::numeric_limits<double>::infinity());
                continue;
            }
            const double m = *std::max_element(s.begin(), s.end());
            double sum = 0.0;
            for (double x : s) sum += std::exp(x - m);
            for (int64_t i = 0; i < d_v; ++i) {
                double acc = 0.0;
                for (size_t j = 0; j < used.size(); ++j) acc += std::exp(s[j] - m) / sum * f(kv.view, {used[j], i});
                want_out.push_back(acc);
            }
            want_lse.push_back(m + std::log(sum));
        }
    }
    EXPECT_TRUE(all_close(read_f32(out), want_out, kF32Reduction, {n, heads, d_v}));
    EXPECT_TRUE(all_close(read_f32(lse), want_lse, kF32Reduction, {n, heads}));
}

// Selecting every visible key in ascending order is the dense causal attention, bit for bit.
TEST(RefSparseMla, AllVisibleKeysEqualDenseAttentionBitForBit) {
    const uint32_t seed = 307;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    const int64_t n = 6, heads = 4, d_qk = 10, d_v = 6, prefix = 3, keys = prefix + n, k = 16;
    Buffer q = random_buffer(rng, {n, heads, d_qk}, false);
    Buffer kv = random_buffer(rng, {keys, d_qk}, false);
    std::vector<int32_t> idx;
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t j = 0; j < k; ++j) idx.push_back(j <= prefix + r ? static_cast<int32_t>(j) : -1);
    }
    Tensor indices = Tensor::from_i32({n, k}, idx);
    Tensor out_s = Tensor::empty({n, heads, d_v}, DType::kF32);
    Tensor lse_s = Tensor::empty({n, heads}, DType::kF32);
    ref::sparse_mla_attention({.out = out_s,
                               .lse = lse_s,
                               .q = q.view,
                               .kv = kv.view,
                               .v = kv.view.slice(1, 0, d_v),
                               .indices = indices,
                               .scale = 0.4f},
                              nullptr);
    Tensor out_d = Tensor::empty({n, heads, d_v}, DType::kF32);
    Tensor lse_d = Tensor::empty({n, heads}, DType::kF32);
    const TensorView k3 = kv.view.as_strided(0, {keys, 1, d_qk}, {d_qk, d_qk, 1});
    Tensor cu_q = i32_tensor({0, static_cast<int32_t>(n)});
    Tensor cu_k = i32_tensor({0, static_cast<int32_t>(keys)});
    Tensor q_pos0 = i32_tensor({static_cast<int32_t>(prefix)});
    Tensor k_pos0 = i32_tensor({0});
    ref::attention({.out = out_d,
                    .lse = lse_d,
                    .q = q.view,
                    .k = k3,
                    .v = k3.slice(2, 0, d_v),
                    .cu_seqlens_q = cu_q,
                    .cu_seqlens_k = cu_k,
                    .q_pos0 = q_pos0,
                    .k_pos0 = k_pos0,
                    .scale = 0.4f,
                    .causal = true},
                   nullptr);
    EXPECT_TRUE(same_bits(read_f32(out_s), read_f32(out_d)));
    EXPECT_TRUE(same_bits(read_f32(lse_s), read_f32(lse_d)));
}

}  // namespace
}  // namespace penstock::test
