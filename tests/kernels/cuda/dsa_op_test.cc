// The DSA ops on the GPU (kernels::dsa_* through a CUDA Context, i.e. the ops_dsa.cc dispatch) against the CPU
// reference on the same seeded inputs.
//  - dsa_indexer_logits: f32, and fp8 (e4m3 q/k + scales) on both variants (tensor-core mma where it applies, CUDA
//    cores forced), 1 row / 1 key, key counts at page edges (63/64/65,
//    127/128/129), row counts off the 16-row tile, 3 / 4 / 96 heads, strided q / k / weights / logits; and causal
//    calls with q_pos (1 row, prefix keys, keys off the tile, 32 / 64 / 3 heads, head_dim 128 / 64) on the wgmma
//    kernel and every fallback, comparing the visible keys.
//  - dsa_topk: indices compared exactly (same set, same ascending order, same -1 padding): distinct logits at page
//    edges with q_pos around top_k and past n_keys / negative; tie-heavy rows (ReLU zeros, few distinct levels) on
//    both libstdc++ paths (nth_element, partial_sort), emulated torch row lengths > n_keys, NaN / -inf logits, a row
//    longer than the shared-memory replay queue, and the reference test's torch-verified tie cases; at scale (rows of
//    5K-60K keys, top_k 2048) rows in and beyond the select kernel's shared memory, rows below top_k, boundary ties
//    in and beyond the replay's shared memory, logits over 60 binades, NaN / -inf / -FLT_MAX rows whose masked
//    entries take part, boundaries in a dense cluster. Every case runs on each top-k variant (kAuto, kRangeRadix with
//    its tied-row count, kRangeRadixScalarCompact, kLegacy).
//  - dsa_quantize_fp8: bit-exact bytes and scales, rotated (dims 64/128) and plain, ue8m0 on and off, tiny rows; dim
//  128
//    with aligned rows takes the eight-lanes-per-row kernel (4099 rows: a grid tail), strided / other dims the block
//    one; ue8m0 scales at the edges of that kernel's exponent shortcut (mantissa fields 0, 1 .. 63, 64 and up), with
//    16- and 4-byte aligned out rows.
//  - sparse_mla_attention: paged latent cache 576/512 with v a view of kv, index lists at page edges with -1 holes
//    and an all -1 row, 3 / 16 / 96 heads, strided q.
// PENSTOCK_CUDA_PERF=1 adds timing at model-like shapes (DsaPerf).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/cuda_ops_dsa.h"
#include "kernels/cuda/dsa_indexer_wgmma.h"
#include "kernels/ops_dsa.h"
#include "tests/kernels/cuda/conformance_log.h"
#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {
namespace {

// A 1-byte tensor (fp8 bytes) held on host and device with the same layout; strided as make_pair_from does.
struct BytePair {
    Tensor host, dev;
    TensorView hv, dv;
};

BytePair byte_pair(const std::vector<uint8_t>& bytes, const Shape& shape, bool strided,
                   cuda::CudaCachingAllocator& alloc, const cuda::Stream& stream) {
    const Shape padded = padded_shape(shape, strided);
    BytePair p;
    p.host = Tensor::empty(padded, DType::kF8E4M3);
    PENSTOCK_CHECK_EQ(static_cast<int64_t>(bytes.size()), p.host.numel());
    std::copy(bytes.begin(), bytes.end(), p.host.ptr<uint8_t>());
    p.dev = cuda::to_device(p.host, alloc, stream);
    stream.synchronize();
    p.hv = p.host.view();
    p.dv = p.dev.view();
    if (strided) {
        for (size_t d = 1; d < shape.size(); ++d) {
            p.hv = p.hv.slice(static_cast<int>(d), 1, 1 + shape[d]);
            p.dv = p.dv.slice(static_cast<int>(d), 1, 1 + shape[d]);
        }
    }
    return p;
}

std::vector<uint8_t> random_e4m3(std::mt19937& rng, int64_t n, float amp) {
    std::vector<uint8_t> b(static_cast<size_t>(n));
    const std::vector<float> f = random_floats(rng, n, -amp, amp);
    for (size_t i = 0; i < b.size(); ++i) b[i] = float_to_e4m3(f[i]);
    return b;
}

std::string shape_name(const std::string& base, const std::vector<int64_t>& dims) {
    std::string s = base;
    for (int64_t d : dims) s.append("_").append(std::to_string(d));
    return s;
}

class DsaOpTest : public CudaTest {
protected:
    kernels::Context gpu() {
        return {.device = Device::kCUDA, .pool = nullptr, .stream = raw_stream(), .alloc = &alloc()};
    }
};

// ------------------------------------------------------------------------------------------------ indexer logits
struct LogitsCase {
    const char* name;
    int64_t n_rows, n_heads, head_dim, n_keys;
    bool strided;
};

std::vector<LogitsCase> logits_cases() {
    return {
        {"one_row_one_key", 1, 3, 64, 1, false},
        {"keys63", 17, 3, 128, 63, false},
        {"keys64", 17, 3, 128, 64, true},
        {"keys65", 17, 4, 128, 65, false},
        {"keys127", 33, 4, 128, 127, true},
        {"keys128", 16, 4, 128, 128, false},
        {"keys129", 31, 3, 128, 129, true},
        {"heads96", 9, 96, 128, 70, false},
        {"head_dim64_rows1", 1, 32, 64, 200, true},
        {"rows40_keys700_heads32", 40, 32, 128, 700, false},
        {"rows20_keys1100_heads64", 20, 64, 128, 1100, false},
        {"rows300_keys333_heads5_dim96", 300, 5, 96, 333, false},  // several row tiles, the last one partial
        {"rows1100_keys300_heads32", 1100, 32, 128, 300, false},   // enough rows for kAuto's TF32 kernel on an H200
        {"rows3_keys2000_heads64", 3, 64, 128, 2000, false},       // the tf32 wgmma kernel's key split, a partial tile
        {"rows530_keys129_heads64", 530, 64, 128, 129, false},
    };
}

TEST_F(DsaOpTest, IndexerLogitsMatchReference) {
    uint32_t seed = 4100;
    // f32 through the dispatch (kMmaTf32 for calls of many rows, else the register-tiled kernel, which is also forced
    // and checked bit for bit against the per-element kernel) and forced to the per-element kernel; fp8 through the
    // dispatch (kAuto: tensor cores where they apply) and forced to the CUDA-core variant. Modes 4 / 5: f32 forced to
    // the TF32 tensor-core variants where they apply (mma.sync kMmaTf32, Hopper's wgmma kWgmmaTf32; the reference's
    // tolerance only).
    for (const int mode : {0, 1, 2, 3, 4, 5, 6}) {
        const bool fp8 = mode == 1 || mode == 2;
        for (const LogitsCase& c : logits_cases()) {
            std::string name = std::string(fp8 ? "fp8 " : "f32 ") + c.name;
            SCOPED_TRACE(name);
            PENSTOCK_SEEDED(seed);
            std::mt19937 rng(seed++);
            Pair weights = random_pair(rng, {c.n_rows, c.n_heads}, DType::kF32, c.strided, alloc(), stream());
            Pair logits = poisoned_pair({c.n_rows, c.n_keys}, DType::kF32, c.strided, alloc(), stream());
            const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
            kernels::DsaIndexerLogitsParams gp, hp;
            Pair qf, kf, qs, ks;
            BytePair q8, k8;
            if (fp8) {
                const Shape qshape{c.n_rows, c.n_heads, c.head_dim}, kshape{c.n_keys, c.head_dim};
                q8 = byte_pair(random_e4m3(rng, numel_of(padded_shape(qshape, c.strided)), 8.0f), qshape, c.strided,
                               alloc(), stream());
                k8 = byte_pair(random_e4m3(rng, numel_of(padded_shape(kshape, c.strided)), 8.0f), kshape, c.strided,
                               alloc(), stream());
                qs = random_pair(rng, {c.n_rows, c.n_heads}, DType::kF32, c.strided, alloc(), stream(), 0.01f, 0.1f);
                ks = random_pair(rng, {c.n_keys}, DType::kF32, false, alloc(), stream(), 0.01f, 0.1f);
                gp = {.logits = logits.dv,
                      .q = q8.dv,
                      .k = k8.dv,
                      .weights = weights.dv,
                      .q_scale = qs.dv,
                      .k_scale = ks.dv,
                      .q_pos = {},
                      .scale = scale};
                hp = {.logits = logits.hv,
                      .q = q8.hv,
                      .k = k8.hv,
                      .weights = weights.hv,
                      .q_scale = qs.hv,
                      .k_scale = ks.hv,
                      .q_pos = {},
                      .scale = scale};
            } else {
                qf = random_pair(rng, {c.n_rows, c.n_heads, c.head_dim}, DType::kF32, c.strided, alloc(), stream());
                kf = random_pair(rng, {c.n_keys, c.head_dim}, DType::kF32, c.strided, alloc(), stream());
                gp = {.logits = logits.dv,
                      .q = qf.dv,
                      .k = kf.dv,
                      .weights = weights.dv,
                      .q_scale = {},
                      .k_scale = {},
                      .q_pos = {},
                      .scale = scale};
                hp = {.logits = logits.hv,
                      .q = qf.hv,
                      .k = kf.hv,
                      .weights = weights.hv,
                      .q_scale = {},
                      .k_scale = {},
                      .q_pos = {},
                      .scale = scale};
            }
            // Modes 4-6 also run causally (q_pos[r] = n_keys - n_rows + r): the keys each row sees are checked
            // against the reference's full logits below, and none may be left unwritten.
            std::vector<int32_t> tf32_pos;
            Tensor tf32_pos_d;
            Pair tf32_causal;
            if (mode >= 4) {
                const bool wg = mode >= 5;
                if (!(wg ? cuda::dsa_indexer_wgmma_tf32_supported(gp) : cuda::dsa_indexer_tf32_supported(gp))) continue;
                const cuda::IndexerVariant tv = mode == 6 ? cuda::IndexerVariant::kWgmmaF16x3
                                                : wg      ? cuda::IndexerVariant::kWgmmaTf32
                                                          : cuda::IndexerVariant::kMmaTf32;
                name += mode == 6 ? " [wgmma f16x3]" : wg ? " [wgmma tf32]" : " [tf32]";
                cuda::dsa_indexer_logits(gp, tv, raw_stream());
                tf32_pos.resize(static_cast<size_t>(c.n_rows));
                for (int64_t r = 0; r < c.n_rows; ++r)
                    tf32_pos[static_cast<size_t>(r)] = static_cast<int32_t>(c.n_keys - c.n_rows + r);
                tf32_pos_d = dev_i32(tf32_pos, alloc(), stream());
                tf32_causal = poisoned_pair({c.n_rows, c.n_keys}, DType::kF32, c.strided, alloc(), stream());
                kernels::DsaIndexerLogitsParams ct = gp;
                ct.q_pos = tf32_pos_d;
                ct.logits = tf32_causal.dv;
                cuda::dsa_indexer_logits(ct, tv, raw_stream());
            } else if (mode == 2 || mode == 3) {
                name += " [cuda-core]";
                cuda::dsa_indexer_logits(gp, cuda::IndexerVariant::kCudaCore, raw_stream());
            } else if (!fp8 && cuda::dsa_indexer_f32_tiled_supported(gp)) {
                // The dispatch (kMmaTf32 for calls of many rows, else kF32Tiled) is held to the reference below; the
                // tiled kernel, forced, bit for bit to the per-element kernel.
                name += " [auto]";
                kernels::dsa_indexer_logits(gp, gpu());
                Pair tiled = poisoned_pair({c.n_rows, c.n_keys}, DType::kF32, c.strided, alloc(), stream());
                Pair per_element = poisoned_pair({c.n_rows, c.n_keys}, DType::kF32, c.strided, alloc(), stream());
                kernels::DsaIndexerLogitsParams pe = gp;
                pe.logits = tiled.dv;
                cuda::dsa_indexer_logits(pe, cuda::IndexerVariant::kF32Tiled, raw_stream());
                pe.logits = per_element.dv;
                cuda::dsa_indexer_logits(pe, cuda::IndexerVariant::kCudaCore, raw_stream());
                conf_exact("dsa_indexer_logits", name + " tiled vs per-element",
                           read_pair(tiled, stream(), false).values, read_pair(per_element, stream(), false).values);
                // Causal (q_pos: row r sees keys <= n_keys - n_rows + r, some rows none): the keys each row sees,
                // bit for bit (the kernels skip different all-masked tiles, whose logits are unspecified).
                std::vector<int32_t> pos(static_cast<size_t>(c.n_rows));
                for (int64_t r = 0; r < c.n_rows; ++r)
                    pos[static_cast<size_t>(r)] = static_cast<int32_t>(c.n_keys - c.n_rows + r);
                const Tensor pos_d = dev_i32(pos, alloc(), stream());
                Pair causal_t = poisoned_pair({c.n_rows, c.n_keys}, DType::kF32, c.strided, alloc(), stream());
                Pair causal_e = poisoned_pair({c.n_rows, c.n_keys}, DType::kF32, c.strided, alloc(), stream());
                kernels::DsaIndexerLogitsParams ct = gp;
                ct.q_pos = pos_d;
                ct.logits = causal_t.dv;
                cuda::dsa_indexer_logits(ct, cuda::IndexerVariant::kF32Tiled, raw_stream());
                ct.logits = causal_e.dv;
                cuda::dsa_indexer_logits(ct, cuda::IndexerVariant::kCudaCore, raw_stream());
                const std::vector<float> vt = read_pair(causal_t, stream(), false).values;
                const std::vector<float> ve = read_pair(causal_e, stream(), false).values;
                std::vector<float> seen_t, seen_e;
                for (int64_t r = 0; r < c.n_rows; ++r) {
                    for (int64_t key = 0; key <= pos[static_cast<size_t>(r)] && key < c.n_keys; ++key) {
                        seen_t.push_back(vt[static_cast<size_t>(r * c.n_keys + key)]);
                        seen_e.push_back(ve[static_cast<size_t>(r * c.n_keys + key)]);
                    }
                }
                conf_exact("dsa_indexer_logits", name + " causal tiled vs per-element", seen_t, seen_e);
            } else {
                if (fp8) {
                    name += cuda::dsa_indexer_wgmma_supported(gp) ? " [wgmma]"
                            : cuda::dsa_indexer_mma_supported(gp) ? " [mma]"
                                                                  : " [cuda-core]";
                }
                kernels::dsa_indexer_logits(gp, gpu());
            }
            kernels::dsa_indexer_logits(hp, kernels::Context{});
            conf_pair("dsa_indexer_logits", name, logits, logits.hv, kF32IndexerLogits, stream());
            if (mode >= 4) {
                const std::vector<float> got = read_pair(tf32_causal, stream(), false).values;
                const std::vector<float> full = read_f32(logits.hv);
                std::vector<float> seen_got, seen_ref;
                int64_t unwritten = 0;
                for (int64_t r = 0; r < c.n_rows; ++r) {
                    for (int64_t key = 0; key <= tf32_pos[static_cast<size_t>(r)] && key < c.n_keys; ++key) {
                        const auto i = static_cast<size_t>(r * c.n_keys + key);
                        unwritten += std::isnan(got[i]) ? 1 : 0;  // the 0xff poison
                        seen_got.push_back(got[i]);
                        seen_ref.push_back(full[i]);
                    }
                }
                conf_close("dsa_indexer_logits", name + " causal", seen_got, seen_ref, kF32IndexerLogits);
                EXPECT_EQ(unwritten, 0) << name << ": visible logits left unwritten";
            }
            if (HasFatalFailure()) return;
        }
    }
}

// The f16 three-product kernel scales each key and each (row, head) q vector by its own power of two: vectors whose
// magnitudes span 2^-12 .. 2^12 (within-vector values uniform) match the reference to the f32 tolerance, as the tf32
// kernel does on the same inputs.
TEST_F(DsaOpTest, IndexerLogitsThreeProductsOverWideMagnitudes) {
    uint32_t seed = 4900;
    for (const int64_t heads : {32, 64}) {
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const int64_t rows = 37, keys = 333, d = 128;
        std::uniform_real_distribution<float> u(-1.0f, 1.0f), ex(-12.0f, 12.0f);
        std::vector<float> qv(static_cast<size_t>(rows * heads * d)), kv(static_cast<size_t>(keys * d));
        for (int64_t v = 0; v < rows * heads; ++v) {
            const float m = std::exp2(std::round(ex(rng)));
            for (int64_t i = 0; i < d; ++i) qv[static_cast<size_t>(v * d + i)] = m * u(rng);
        }
        for (int64_t v = 0; v < keys; ++v) {
            const float m = std::exp2(std::round(ex(rng)));
            for (int64_t i = 0; i < d; ++i) kv[static_cast<size_t>(v * d + i)] = m * u(rng);
        }
        const Pair q = make_pair_from(qv, {rows, heads, d}, DType::kF32, false, alloc(), stream());
        const Pair k = make_pair_from(kv, {keys, d}, DType::kF32, false, alloc(), stream());
        // Positive gates: a logit is then a sum of non-negative terms (no cancellation across heads, which no f32
        // method meets the relative tolerance through at these magnitudes).
        const Pair w = random_pair(rng, {rows, heads}, DType::kF32, false, alloc(), stream(), 0.01f, 1.0f);
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        for (const auto variant : {cuda::IndexerVariant::kWgmmaF16x3, cuda::IndexerVariant::kWgmmaTf32}) {
            const std::string name = std::string(variant == cuda::IndexerVariant::kWgmmaF16x3 ? "f16x3" : "tf32") +
                                     " wide magnitudes heads" + std::to_string(heads);
            Pair logits = poisoned_pair({rows, keys}, DType::kF32, false, alloc(), stream());
            const kernels::DsaIndexerLogitsParams gp{.logits = logits.dv,
                                                     .q = q.dv,
                                                     .k = k.dv,
                                                     .weights = w.dv,
                                                     .q_scale = {},
                                                     .k_scale = {},
                                                     .q_pos = {},
                                                     .scale = scale};
            if (!cuda::dsa_indexer_wgmma_tf32_supported(gp)) GTEST_SKIP() << "needs an sm_90 device";
            cuda::dsa_indexer_logits(gp, variant, raw_stream());
            kernels::dsa_indexer_logits({.logits = logits.hv,
                                         .q = q.hv,
                                         .k = k.hv,
                                         .weights = w.hv,
                                         .q_scale = {},
                                         .k_scale = {},
                                         .q_pos = {},
                                         .scale = scale},
                                        kernels::Context{});
            conf_pair("dsa_indexer_logits", name, logits, logits.hv, kF32IndexerLogits, stream());
            if (HasFatalFailure()) return;
        }
    }
}

// Causal fp8 calls as the model makes them (kernels/ops_dsa.h q_pos: only keys s <= q_pos[r] are specified, so
// only those are compared; the rest stay unchecked, writes outside the view are still caught): the wgmma kernel
// where it applies (32 / 64 heads x 128, 16-byte aligned strides) with 1 row, keys off the 64-key tile, prefix keys
// (n_keys > n_rows), more key tiles than ring stages, positions past n_keys and negative, no q_pos, strided q / k /
// logits; then the fallbacks (3 heads, head_dim 64) through kAuto and each forced variant where it applies. The
// opt-in kWgmmaFp8 (Hopper's reduced-precision fp8 accumulation) is held to its own kFp8AccumIndexerLogits.
struct CausalCase {
    const char* name;
    int64_t n_rows, n_heads, head_dim, n_keys;
    int64_t prefix;  // q_pos[r] = prefix + r (-1: no q_pos, every key scored)
    bool pad;        // q / k rows padded to 16-byte multiples (aligned strides), logits strided
};

std::vector<CausalCase> causal_cases() {
    return {
        {"wg_one_row_one_key", 1, 32, 128, 1, 0, false},
        {"wg_one_row_prefix300", 1, 32, 128, 301, 300, false},
        {"wg_square37", 37, 32, 128, 37, 0, false},
        {"wg_square130", 130, 32, 128, 130, 0, false},
        {"wg_prefix333_rows50", 50, 32, 128, 383, 333, false},
        {"wg_prefix700_rows200", 200, 32, 128, 900, 700, false},  // 15 key tiles > 8 ring stages
        {"wg_no_qpos_rows20_keys200", 20, 32, 128, 200, -1, false},
        {"wg_heads64_prefix137_rows13", 13, 64, 128, 150, 137, false},
        {"wg_heads64_square100", 100, 64, 128, 100, 0, false},
        {"wg_padded_prefix70_rows24", 24, 32, 128, 94, 70, true},
        {"fallback_heads3_prefix90_rows17", 17, 3, 128, 107, 90, false},
        {"fallback_head_dim64_prefix100_rows33", 33, 32, 64, 133, 100, false},
        {"fallback_heads32_unaligned_strides", 21, 32, 128, 90, 69, true},
    };
}

TEST_F(DsaOpTest, IndexerLogitsCausalMatchesReference) {
    uint32_t seed = 4150;
    for (const CausalCase& c : causal_cases()) {
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const bool causal = c.prefix >= 0;
        // Padded rows: 16 extra bytes per head / key row and one extra head per query row (aligned strides); the
        // unaligned case pads by 4 bytes (strides fine for mma.sync, not for TMA, so the wgmma kernel declines).
        const bool aligned_pad = c.pad && std::string(c.name).rfind("wg_", 0) == 0;
        const int64_t dpad = c.pad ? (aligned_pad ? c.head_dim + 16 : c.head_dim + 4) : c.head_dim;
        const int64_t hpad = c.pad ? c.n_heads + 1 : c.n_heads;
        const BytePair q8 =
            byte_pair(random_e4m3(rng, c.n_rows * hpad * dpad, 8.0f), {c.n_rows, hpad, dpad}, false, alloc(), stream());
        const BytePair k8 =
            byte_pair(random_e4m3(rng, c.n_keys * dpad, 8.0f), {c.n_keys, dpad}, false, alloc(), stream());
        const auto q_view = [&](TensorView v) { return v.slice(1, 0, c.n_heads).slice(2, 0, c.head_dim); };
        const auto k_view = [&](TensorView v) { return v.slice(1, 0, c.head_dim); };
        const Pair weights = random_pair(rng, {c.n_rows, c.n_heads}, DType::kF32, c.pad, alloc(), stream());
        const Pair qs = random_pair(rng, {c.n_rows, c.n_heads}, DType::kF32, false, alloc(), stream(), 0.01f, 0.1f);
        const Pair ks = random_pair(rng, {c.n_keys}, DType::kF32, false, alloc(), stream(), 0.01f, 0.1f);
        std::vector<int32_t> pos(static_cast<size_t>(c.n_rows));
        for (int64_t r = 0; r < c.n_rows; ++r) pos[static_cast<size_t>(r)] = static_cast<int32_t>(c.prefix + r);
        const Tensor pos_d = dev_i32(pos, alloc(), stream());
        const Tensor pos_h = i32_tensor(pos);
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
        kernels::DsaIndexerLogitsParams hp{.logits = {},
                                           .q = q_view(q8.hv),
                                           .k = k_view(k8.hv),
                                           .weights = weights.hv,
                                           .q_scale = qs.hv,
                                           .k_scale = ks.hv,
                                           .q_pos = {},
                                           .scale = scale};
        if (causal) hp.q_pos = pos_h;
        Pair ref_logits = poisoned_pair({c.n_rows, c.n_keys}, DType::kF32, c.pad, alloc(), stream());
        hp.logits = ref_logits.hv;
        kernels::dsa_indexer_logits(hp, kernels::Context{});
        std::vector<float> want = read_f32(ref_logits.hv);
        // 0: kAuto through the op dispatch; 1..4: forced kWgmma / kMma / kCudaCore / kWgmmaFp8 where they apply;
        // 5 and 6: the f16 / e4m3 wgmma kernels with the ping-pong (WgmmaIndexerOptions::ping_pong; both variants
        // free-run their consumers by default); 7 and 8: with the ping-pong hand-over after the wgmmas retired
        // (hand_over_after_wait); 9: kAuto through the op dispatch with fp8_accumulate set, which must take the
        // e4m3-accumulate kernel where the wgmma kernels apply (bit for bit the forced kWgmmaFp8) and stay exact
        // elsewhere; 10, 11 and 12: the e4m3 kernel with the kChains4, kChains4FaddAbs and kChains2FaddAbs epilogues
        // (WgmmaIndexerOptions::epilogue), each against the reference, 11 bit for bit 10 and 12 bit for bit kChains2.
        std::vector<float> chains4;  // mode 10's visible logits
        for (int mode = 0; mode < 13; ++mode) {
            Pair logits = poisoned_pair({c.n_rows, c.n_keys}, DType::kF32, c.pad, alloc(), stream());
            kernels::DsaIndexerLogitsParams gp = hp;
            gp.logits = logits.dv;
            gp.q = q_view(q8.dv);
            gp.k = k_view(k8.dv);
            gp.weights = weights.dv;
            gp.q_scale = qs.dv;
            gp.k_scale = ks.dv;
            gp.q_pos = causal ? pos_d.view() : TensorView{};
            std::string name = std::string("fp8 causal ") + c.name;
            if (mode == 0) {
                name += cuda::dsa_indexer_wgmma_supported(gp) ? " [auto: wgmma]"
                        : cuda::dsa_indexer_mma_supported(gp) ? " [auto: mma]"
                                                              : " [auto: cuda-core]";
                kernels::dsa_indexer_logits(gp, gpu());
            } else if (mode == 1) {
                if (!cuda::dsa_indexer_wgmma_supported(gp)) continue;
                name += " [wgmma]";
                cuda::dsa_indexer_logits(gp, cuda::IndexerVariant::kWgmma, raw_stream());
            } else if (mode == 2) {
                if (!cuda::dsa_indexer_mma_supported(gp)) continue;
                name += " [mma]";
                cuda::dsa_indexer_logits(gp, cuda::IndexerVariant::kMma, raw_stream());
            } else if (mode == 3) {
                name += " [cuda-core]";
                cuda::dsa_indexer_logits(gp, cuda::IndexerVariant::kCudaCore, raw_stream());
            } else if (mode == 4) {
                if (!cuda::dsa_indexer_wgmma_supported(gp)) continue;
                name += " [wgmma-fp8-accumulate]";
                cuda::dsa_indexer_logits(gp, cuda::IndexerVariant::kWgmmaFp8, raw_stream());
            } else if (mode == 9) {
                gp.fp8_accumulate = true;
                name += cuda::dsa_indexer_wgmma_supported(gp) ? " [auto, fp8_accumulate: wgmma-fp8-accumulate]"
                                                              : " [auto, fp8_accumulate: exact kernel]";
                kernels::dsa_indexer_logits(gp, gpu());
                if (cuda::dsa_indexer_wgmma_supported(gp)) {
                    Pair forced = poisoned_pair({c.n_rows, c.n_keys}, DType::kF32, c.pad, alloc(), stream());
                    kernels::DsaIndexerLogitsParams fp = gp;
                    fp.logits = forced.dv;
                    cuda::dsa_indexer_logits(fp, cuda::IndexerVariant::kWgmmaFp8, raw_stream());
                    const std::vector<float> got = read_pair(logits, stream(), false).values;
                    const std::vector<float> want_fp8 = read_pair(forced, stream(), false).values;
                    int64_t differ = 0;
                    for (int64_t r = 0; r < c.n_rows; ++r) {
                        for (int64_t s = 0; s <= (causal ? std::min<int64_t>(pos[static_cast<size_t>(r)], c.n_keys - 1)
                                                         : c.n_keys - 1);
                             ++s) {
                            const auto i = static_cast<size_t>(r * c.n_keys + s);
                            differ += std::memcmp(&got[i], &want_fp8[i], sizeof(float)) != 0 ? 1 : 0;
                        }
                    }
                    EXPECT_EQ(differ, 0) << name << ": not bit for bit the forced kWgmmaFp8 kernel";
                }
            } else if (mode >= 10) {
                if (!cuda::dsa_indexer_wgmma_supported(gp)) continue;
                using E = cuda::IndexerEpilogue;
                const E form = mode == 10 ? E::kChains4 : mode == 11 ? E::kChains4FaddAbs : E::kChains2FaddAbs;
                name += mode == 10   ? " [wgmma-fp8-accumulate, kChains4]"
                        : mode == 11 ? " [wgmma-fp8-accumulate, kChains4FaddAbs]"
                                     : " [wgmma-fp8-accumulate, kChains2FaddAbs]";
                const auto visible = [&](E e) {  // the form's logits, the unspecified ones (past q_pos) zeroed
                    cuda::dsa_indexer_logits_wgmma(gp, {.fp8_accumulate = true, .epilogue = e}, raw_stream());
                    std::vector<float> v = read_pair(logits, stream(), false).values;
                    for (int64_t r = 0; causal && r < c.n_rows; ++r) {
                        for (int64_t s = pos[static_cast<size_t>(r)] + 1; s < c.n_keys; ++s) {
                            v[static_cast<size_t>(r * c.n_keys + s)] = 0.0f;
                        }
                    }
                    return v;
                };
                // Mode 12's twin first (kChains2), so that the checks below read the form's own logits.
                const std::vector<float> twin = mode == 12 ? visible(E::kChains2) : chains4;
                const std::vector<float> got = visible(form);
                if (mode == 10) {
                    chains4 = got;
                } else if (twin.size() == got.size()) {
                    int64_t differ = 0;
                    for (size_t i = 0; i < got.size(); ++i) {
                        differ += std::memcmp(&got[i], &twin[i], sizeof(float)) != 0 ? 1 : 0;
                    }
                    EXPECT_EQ(differ, 0) << name << (mode == 11 ? ": not bit for bit the kChains4 epilogue"
                                                                : ": not bit for bit the kChains2 epilogue");
                }
            } else {
                if (!cuda::dsa_indexer_wgmma_supported(gp)) continue;
                const bool fp8_acc = mode == 6 || mode == 8;
                const bool after_wait = mode >= 7;
                name += fp8_acc ? " [wgmma-fp8-accumulate" : " [wgmma";
                name += after_wait ? ", hand-over after wait]" : ", ping-pong]";
                cuda::dsa_indexer_logits_wgmma(gp,
                                               {.fp8_accumulate = fp8_acc,
                                                .ping_pong = true,
                                                .mma_only = false,
                                                .hand_over_after_wait = after_wait},
                                               raw_stream());
            }
            SCOPED_TRACE(name);
            Readback rb = read_pair(logits, stream(), /*check_padding=*/true);
            std::vector<float> ref = want;
            int64_t unwritten_visible = 0;
            for (int64_t r = 0; r < c.n_rows; ++r) {
                for (int64_t s = 0; s < c.n_keys; ++s) {
                    const auto i = static_cast<size_t>(r * c.n_keys + s);
                    if (causal && s > pos[static_cast<size_t>(r)]) {
                        rb.values[i] = ref[i] = 0.0f;  // unspecified
                    } else if (std::isnan(rb.values[i])) {
                        ++unwritten_visible;  // the 0xff poison (random inputs give no NaN)
                    }
                }
            }
            const bool fp8_sums = mode == 4 || mode == 6 || mode == 8 || mode >= 10 ||
                                  (mode == 9 && cuda::dsa_indexer_wgmma_supported(gp));
            const Tolerance tol = fp8_sums ? kFp8AccumIndexerLogits : kF32IndexerLogits;
            conf_close("dsa_indexer_logits", name, rb.values, ref, tol, {c.n_rows, c.n_keys});
            EXPECT_EQ(unwritten_visible, 0) << name << ": visible logits left unwritten";
            EXPECT_EQ(rb.touched_padding, 0) << name << ": elements written outside the view";
            if (HasFatalFailure()) return;
        }
    }
}

// ------------------------------------------------------------------------------------------------ top-k
struct TopkCase {
    std::string name;
    int64_t n_keys, top_k, torch_row_len;
    std::vector<int32_t> q_pos;
    std::vector<float> logits;  // [n_rows * n_keys]
    bool strided = false;
    bool expect_tied = false;  // some row's boundary is tied: the range-radix variant must take its replay
    // The stream kernel (kRangeRadixStream) on rows longer than its candidate capacity: -1 no expectation, 0 every
    // such row takes the sampled bound (none selected from global memory), 1 some row falls back to global memory.
    int expect_global = -1;
};

// Every variant against the reference: kAuto through the Context dispatch, kRangeRadix through the tied-row
// diagnostic (which also returns how many rows took the replay), kRangeRadixScalarCompact, kRangeRadixRowSmem,
// kRangeRadixStream through dsa_topk_diagnose (how many rows it selected from global memory),
// kRangeRadixSerialReplay, kLegacy. The output is
// poisoned before each run.
void run_topk(const TopkCase& c, cuda::CudaCachingAllocator& alloc, const cuda::Stream& stream,
              const kernels::Context& gpu) {
    SCOPED_TRACE(c.name);
    const auto n_rows = static_cast<int64_t>(c.q_pos.size());
    std::vector<float> padded = c.logits;
    if (c.strided) {  // rows padded by 3 (values never read: masked or beyond n_keys), view starting at column 1
        padded.assign(static_cast<size_t>(n_rows * (c.n_keys + 3)), 1e30f);
        for (int64_t r = 0; r < n_rows; ++r) {
            std::copy_n(c.logits.begin() + r * c.n_keys, c.n_keys, padded.begin() + r * (c.n_keys + 3) + 1);
        }
    }
    const Pair logits = make_pair_from(padded, {n_rows, c.n_keys}, DType::kF32, c.strided, alloc, stream);
    const Tensor q_pos_d = dev_i32(c.q_pos, alloc, stream);
    const Tensor q_pos_h = i32_tensor(c.q_pos);
    Tensor idx_d = Tensor::empty({n_rows, c.top_k}, DType::kI32, alloc);
    Tensor idx_h = Tensor::empty({n_rows, c.top_k}, DType::kI32);
    kernels::dsa_topk({.indices = idx_h, .logits = logits.hv, .q_pos = q_pos_h, .torch_row_len = c.torch_row_len},
                      kernels::Context{});
    const std::vector<int32_t> want(idx_h.ptr<int32_t>(), idx_h.ptr<int32_t>() + idx_h.numel());
    const kernels::DsaTopkParams p{
        .indices = idx_d, .logits = logits.dv, .q_pos = q_pos_d, .torch_row_len = c.torch_row_len};
    for (const char* variant : {"auto", "range_radix", "range_radix_scalar_compact", "range_radix_row_smem",
                                "range_radix_stream", "range_radix_serial_replay", "legacy"}) {
        cuda::fill_bytes_async(idx_d.view(), 0x7f, stream);
        int64_t tied = -1;
        if (std::strcmp(variant, "auto") == 0) {
            kernels::dsa_topk(p, gpu);
        } else if (std::strcmp(variant, "range_radix") == 0) {
            tied = cuda::dsa_topk_tied_rows(p, alloc, stream.handle());
        } else if (std::strcmp(variant, "range_radix_scalar_compact") == 0) {
            cuda::dsa_topk(p, cuda::TopkVariant::kRangeRadixScalarCompact, alloc, stream.handle());
        } else if (std::strcmp(variant, "range_radix_serial_replay") == 0) {
            cuda::dsa_topk(p, cuda::TopkVariant::kRangeRadixSerialReplay, alloc, stream.handle());
        } else if (std::strcmp(variant, "range_radix_row_smem") == 0) {
            cuda::dsa_topk(p, cuda::TopkVariant::kRangeRadixRowSmem, alloc, stream.handle());
        } else if (std::strcmp(variant, "range_radix_stream") == 0) {
            const cuda::TopkDiagnosis d =
                cuda::dsa_topk_diagnose(p, cuda::TopkVariant::kRangeRadixStream, alloc, stream.handle());
            if (c.expect_tied) {
                EXPECT_GT(d.tied_rows, 0) << c.name << ": no row took the replay (stream kernel)";
            }
            if (c.expect_global == 0) {
                EXPECT_EQ(d.global_rows, 0) << c.name << ": the sampled bound missed";
            } else if (c.expect_global == 1) {
                EXPECT_GT(d.global_rows, 0) << c.name << ": no row took the global-memory fallback";
            }
        } else {
            cuda::dsa_topk(p, cuda::TopkVariant::kLegacy, alloc, stream.handle());
        }
        conf_exact("dsa_topk", c.name + "/" + variant, read_i32(idx_d, stream), want);
        if (tied >= 0 && c.expect_tied) {
            EXPECT_GT(tied, 0) << c.name << ": no row took the replay";
        }
    }
}

std::vector<float> distinct_logits(std::mt19937& rng, int64_t n) { return random_floats(rng, n, -4.0f, 4.0f); }

// ReLU-like rows: most entries exactly 0, a few positive, some values repeated (ties at the boundary).
std::vector<float> tied_logits(std::mt19937& rng, int64_t n, float positive_fraction, int levels) {
    std::vector<float> v(static_cast<size_t>(n), 0.0f);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::uniform_int_distribution<int> lv(1, levels);
    for (float& x : v) {
        if (u(rng) < positive_fraction) x = 0.25f * static_cast<float>(lv(rng));
    }
    return v;
}

std::vector<int32_t> positions_around(int64_t n_keys, int64_t top_k) {
    std::vector<int32_t> p{0,
                           -1,
                           static_cast<int32_t>(top_k - 1),
                           static_cast<int32_t>(top_k),
                           static_cast<int32_t>(top_k + 1),
                           static_cast<int32_t>(n_keys - 2),
                           static_cast<int32_t>(n_keys - 1),
                           static_cast<int32_t>(n_keys + 5)};
    for (int32_t& x : p) x = std::max<int32_t>(x, -1);
    return p;
}

TEST_F(DsaOpTest, TopkMatchesReferenceExactly) {
    uint32_t seed = 4200;
    std::vector<TopkCase> cases;
    // Distinct logits at page edges (unique sets: the radix-select path).
    for (const int64_t n_keys : {1, 63, 64, 65, 127, 128, 129}) {
        for (const int64_t k : {int64_t{1}, int64_t{16}, int64_t{64}}) {
            std::mt19937 rng(seed++);
            TopkCase c{shape_name("distinct_keys_k", {n_keys, k}), n_keys, k, 0, positions_around(n_keys, k), {}};
            c.logits = distinct_logits(rng, static_cast<int64_t>(c.q_pos.size()) * n_keys);
            c.strided = n_keys % 2 == 1;
            cases.push_back(std::move(c));
        }
    }
    // Tie-heavy rows: nth_element (k * 64 > row_len) and partial_sort (k * 64 <= row_len), row_len = n_keys or more.
    struct TieShape {
        int64_t n_keys, k, row_len;
        float frac;
        int levels;
    };
    for (const TieShape& s : std::vector<TieShape>{{40, 16, 0, 0.2f, 3},
                                                   {129, 16, 0, 0.05f, 2},
                                                   {129, 16, 300, 0.1f, 4},
                                                   {300, 2, 0, 0.0f, 1},
                                                   {300, 4, 0, 0.01f, 2},
                                                   {1000, 8, 2000, 0.005f, 3},
                                                   {3000, 2048, 0, 0.5f, 4},
                                                   {3000, 2048, 4096, 0.3f, 6},
                                                   {25000, 256, 0, 0.005f, 3},
                                                   {25000, 2048, 30000, 0.05f, 5}}) {
        std::mt19937 rng(seed++);
        std::vector<int32_t> pos{static_cast<int32_t>(s.n_keys - 1), static_cast<int32_t>(s.k),
                                 static_cast<int32_t>(s.k + 1), static_cast<int32_t>((s.n_keys + s.k) / 2)};
        TopkCase c{shape_name("tied_keys_k_rowlen", {s.n_keys, s.k, s.row_len}), s.n_keys, s.k, s.row_len, pos, {}};
        c.logits = tied_logits(rng, static_cast<int64_t>(pos.size()) * s.n_keys, s.frac, s.levels);
        cases.push_back(std::move(c));
    }
    // NaN and -inf logits: NaN ranks first; -inf ranks below the masked -FLT_MAX entries, whose picks drop out.
    {
        std::mt19937 rng(seed++);
        TopkCase c{"nan_neg_inf_keys_100_k_16", 100, 16, 150, {99, 50, 20}, {}};
        c.logits = distinct_logits(rng, 300);
        for (int i = 0; i < 300; i += 7) c.logits[static_cast<size_t>(i)] = std::numeric_limits<float>::quiet_NaN();
        for (int i = 3; i < 300; i += 2) c.logits[static_cast<size_t>(i)] = -std::numeric_limits<float>::infinity();
        cases.push_back(std::move(c));
    }
    // The reference test's torch-verified tie cases (tests/kernels/ref_dsa_test.cc, TiesBreakAsTorchTopk).
    {
        std::vector<float> a(40, 0.0f);
        for (const auto& [j, v] : std::vector<std::pair<int, float>>{
                 {3, 0.5f}, {7, 0.25f}, {11, 1.0f}, {15, 2.0f}, {19, 0.125f}, {23, 3.0f}, {27, 0.75f}}) {
            a[static_cast<size_t>(j)] = v;
        }
        cases.push_back({"torch_ties_nth_element", 40, 16, 0, {29}, a});
        std::vector<float> b(50, 0.0f);
        for (int j = 0; j < 50; j += 3) b[static_cast<size_t>(j)] = -1.0f - static_cast<float>(j);
        b[5] = 1.0f;
        b[9] = 2.0f;
        cases.push_back({"torch_ties_row_len_200", 50, 16, 200, {49}, b});
        cases.push_back({"torch_ties_row_len_50", 50, 16, 0, {49}, b});
        cases.push_back({"torch_ties_partial_sort", 150, 2, 200, {149}, std::vector<float>(150, 0.0f)});
    }
    // The range-radix kernel's paths at scale. Launches: n_keys <= 16384 (512 threads, the row in shared memory),
    // n_keys > 16384 (the stream kernel: rows up to its candidate capacity, 5632 at top 2048, held whole, longer rows
    // streamed through a sampled bound, or from global memory when the bound misses; kRangeRadixRowSmem: 1024
    // threads, up to 49152 keys in shared memory, the rest of a longer row read from global). Rows at and around top_k
    // (no select), the last keys, q_pos past n_keys; emulated rows longer than n_keys.
    {
        struct BigShape {
            int64_t n_keys, k, row_len;
            int mode;  // 0 normal, 1 coarse levels (boundary ties), 2 exponents 2^-30..2^30 of both signs,
                       // 3 NaN / -inf / -FLT_MAX / -0 mixed with normal values, 4 only -inf / -FLT_MAX / 1,
                       // 5 uniform on [0, 1000) with `cluster` keys per row in [950, 958), 6 normal with 40% of the
                       // keys 20 (the sampled bound admits more keys than the candidate list holds), 7 rising in
                       // steps of 8 keys along the row, with noise of a few steps
            bool strided, expect_tied;
            int cluster = 0;
            int expect_global = -1;  // TopkCase::expect_global
        };
        for (const BigShape& b : std::vector<BigShape>{{16384, 2048, 0, 0, false, false},
                                                       {16384, 2048, 0, 1, false, true},
                                                       {16384, 2048, 18000, 1, false, true},
                                                       {16384, 2048, 20000, 1, false, true},
                                                       {16384, 2048, 0, 2, false, false},
                                                       {5001, 2048, 0, 0, true, false},
                                                       {5000, 2048, 6000, 3, false, false},
                                                       {5000, 2048, 0, 4, false, true},
                                                       {20000, 2048, 0, 0, false, false, 0, 0},
                                                       {20000, 2048, 0, 1, true, true},
                                                       {20000, 2048, 0, 4, false, true, 0, 1},
                                                       {20000, 2048, 0, 6, false, true, 0, 1},
                                                       {20000, 2048, 0, 0, true, false, 0, 0},
                                                       {60000, 2048, 0, 0, false, false, 0, 0},
                                                       {60000, 16, 0, 0, false, false},
                                                       {60000, 2048, 0, 2, false, false},
                                                       {60000, 2048, 64000, 1, false, true},
                                                       // partial_sort rows (top_k * 64 <= row_len) at GLM-5.3's top
                                                       // 2048: the heap screened chunk by chunk; mode 7's keys rise
                                                       // along the row (most elements enter the heap)
                                                       {60000, 2048, 131072, 1, false, true},
                                                       {140000, 2048, 0, 1, true, true},
                                                       {40000, 2048, 140000, 7, false, true},
                                                       {3000, 8, 0, 7, false, true},
                                                       // rows of over 360K keys: the stream kernel's sample fills
                                                       // both shared buffers (dsa_topk_sample.h)
                                                       {400000, 2048, 0, 0, false, false, 0, 0},
                                                       {400000, 2048, 0, 1, false, true},
                                                       // The boundary in a cluster: its first bin ([896, 960))
                                                       // holds about the candidate list's 4096 keys (the list taken
                                                       // after the first step or the second) or more.
                                                       {20000, 2048, 0, 5, false, false, 2800},
                                                       {20000, 2048, 0, 5, false, false, 3500},
                                                       {20000, 2048, 0, 5, false, false, 4300},
                                                       {60000, 4096, 0, 5, false, false, 9000},
                                                       {16384, 1000, 0, 5, false, false, 400},
                                                       {16384, 1000, 0, 5, false, false, 600}}) {
            std::mt19937 rng(seed++);
            const auto n = static_cast<int32_t>(b.n_keys), k = static_cast<int32_t>(b.k);
            std::vector<int32_t> pos{n - 1, k - 1, k, k + 1, n / 2, n + 5};
            if (n > 49152) pos.insert(pos.end(), {49151, 49152, 49153, n - 2});
            TopkCase c{b.mode == 5 ? shape_name("range_radix_keys_k_rowlen_mode_cluster",
                                                {b.n_keys, b.k, b.row_len, b.mode, b.cluster})
                                   : shape_name(b.strided ? "range_radix_strided_keys_k_rowlen_mode"
                                                          : "range_radix_keys_k_rowlen_mode",
                                                {b.n_keys, b.k, b.row_len, b.mode}),
                       b.n_keys,
                       b.k,
                       b.row_len,
                       pos,
                       {}};
            c.strided = b.strided;
            c.expect_tied = b.expect_tied;
            c.expect_global = b.expect_global;
            std::normal_distribution<float> nd(9.0f, 0.7f);
            std::uniform_int_distribution<int> pick(0, 9);
            std::uniform_real_distribution<float> unit(1.0f, 2.0f);
            std::uniform_real_distribution<float> spread(0.0f, 1000.0f);
            c.logits.resize(pos.size() * static_cast<size_t>(n));
            for (size_t i = 0; i < c.logits.size(); ++i) {
                float& x = c.logits[i];
                switch (b.mode) {
                    case 5:
                        x = spread(rng);
                        break;
                    case 7:
                        x = std::floor(static_cast<float>(i % static_cast<size_t>(n)) / 8.0f) +
                            static_cast<float>(pick(rng) % 4);
                        break;
                    case 0:
                        x = nd(rng);
                        break;
                    case 1:
                        x = std::round(nd(rng) * 16.0f) / 16.0f;
                        break;
                    case 2:
                        x = std::ldexp(unit(rng), pick(rng) * 6 - 30) * (pick(rng) < 5 ? 1.0f : -1.0f);
                        break;
                    case 6:
                        x = pick(rng) < 4 ? 20.0f : nd(rng);
                        break;
                    case 3: {
                        const int v = pick(rng);
                        x = v == 0   ? std::numeric_limits<float>::quiet_NaN()
                            : v < 4  ? -std::numeric_limits<float>::infinity()
                            : v < 6  ? -FLT_MAX
                            : v == 6 ? -0.0f
                                     : nd(rng);
                        break;
                    }
                    default: {
                        const int v = pick(rng);
                        x = v < 6 ? -std::numeric_limits<float>::infinity() : v < 9 ? -FLT_MAX : 1.0f;
                        break;
                    }
                }
            }
            if (b.mode == 5) {  // `cluster` distinct positions of each row
                std::vector<int32_t> cols(static_cast<size_t>(n));
                std::iota(cols.begin(), cols.end(), 0);
                for (size_t r = 0; r < pos.size(); ++r) {
                    std::shuffle(cols.begin(), cols.end(), rng);
                    for (int j = 0; j < b.cluster; ++j) {
                        c.logits[r * static_cast<size_t>(n) + static_cast<size_t>(cols[static_cast<size_t>(j)])] =
                            950.0f + 8.0f * (unit(rng) - 1.0f);
                    }
                }
            }
            cases.push_back(std::move(c));
        }
    }
    for (const TopkCase& c : cases) {
        PENSTOCK_SEEDED(seed);
        run_topk(c, alloc(), stream(), gpu());
        if (HasFatalFailure()) return;
    }
}

// ------------------------------------------------------------------------------------------------ fp8 quantiser
TEST_F(DsaOpTest, QuantizeFp8BitExact) {
    struct QCase {
        int64_t n_rows, dim;
        bool rotate, ue8m0, strided;
    };
    uint32_t seed = 4300;
    for (const QCase& c : std::vector<QCase>{{1, 128, true, true, false},
                                             {63, 128, true, true, true},
                                             {64, 128, true, false, false},
                                             {65, 64, true, true, true},
                                             {129, 128, false, true, false},
                                             {127, 96, false, false, true},
                                             {200, 512, true, true, false},
                                             // the warp-per-row kernel (dim 128, aligned rows): a grid tail, plain
                                             {4099, 128, true, true, false},
                                             {300, 128, false, false, false}}) {
        const std::string name = shape_name(
            std::string(c.rotate ? "rot" : "plain") + (c.ue8m0 ? "_ue8m0" : "_f32s") + (c.strided ? "_strided" : ""),
            {c.n_rows, c.dim});
        SCOPED_TRACE(name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const Shape shape{c.n_rows, c.dim};
        std::vector<float> vals = random_floats(rng, numel_of(padded_shape(shape, c.strided)));
        // Per-row magnitudes from 1e-6 (amax below the 1e-4 floor) to 1e3; one all-zero row.
        const int64_t pitch = c.strided ? c.dim + 3 : c.dim;
        std::uniform_real_distribution<float> ex(-6.0f, 3.0f);
        for (int64_t r = 0; r < c.n_rows; ++r) {
            const float m = r == 1 ? 0.0f : std::pow(10.0f, ex(rng));
            for (int64_t i = 0; i < pitch; ++i) vals[static_cast<size_t>(r * pitch + i)] *= m;
        }
        const Pair in = make_pair_from(vals, shape, DType::kF32, c.strided, alloc(), stream());
        BytePair out =
            byte_pair(std::vector<uint8_t>(static_cast<size_t>(numel_of(padded_shape(shape, c.strided))), 0x55), shape,
                      c.strided, alloc(), stream());
        Tensor scale_d = Tensor::empty({c.n_rows}, DType::kF32, alloc());
        cuda::fill_bytes_async(scale_d.view(), 0xff, stream());
        Tensor scale_h = Tensor::empty({c.n_rows}, DType::kF32);
        kernels::dsa_quantize_fp8({.out = out.dv, .scale = scale_d, .in = in.dv, .rotate = c.rotate, .ue8m0 = c.ue8m0},
                                  gpu());
        kernels::dsa_quantize_fp8({.out = out.hv, .scale = scale_h, .in = in.hv, .rotate = c.rotate, .ue8m0 = c.ue8m0},
                                  kernels::Context{});
        const Tensor got = cuda::to_host(out.dev, stream());
        // Whole backing compared: the padding must keep its 0x55 on both sides.
        conf_exact("dsa_quantize_fp8", name + " bytes",
                   std::vector<uint8_t>(got.ptr<uint8_t>(), got.ptr<uint8_t>() + got.numel()),
                   std::vector<uint8_t>(out.host.ptr<uint8_t>(), out.host.ptr<uint8_t>() + out.host.numel()));
        const Tensor sg = cuda::to_host(scale_d, stream());
        std::vector<uint32_t> sb_got(static_cast<size_t>(c.n_rows)), sb_want(static_cast<size_t>(c.n_rows));
        std::memcpy(sb_got.data(), sg.ptr<float>(), sb_got.size() * 4);
        std::memcpy(sb_want.data(), scale_h.ptr<float>(), sb_want.size() * 4);
        conf_exact("dsa_quantize_fp8", name + " scale bits", sb_got, sb_want);
        if (HasFatalFailure()) return;
    }
}

// The dim-128 kernel's ue8m0 exponent (s = 2^ceil(log2(max(amax, 1e-4) / 448))): rows whose amax puts
// max(amax, 1e-4) / 448 at mantissa fields 0, 1 .. 63 (the reference's own log2 steps), 64 and beyond (the exponent
// shortcut), over exponents from the 1e-4 floor to 2^20, plain and rotated, 16- and 4-byte aligned out rows.
TEST_F(DsaOpTest, QuantizeFp8Ue8m0ExponentEdges) {
    const int64_t dim = 128;
    std::vector<float> amaxes;
    for (const int k : {-22, -20, -13, -5, -1, 0, 1, 3, 20}) {
        for (const uint32_t m : {0u, 1u, 2u, 31u, 62u, 63u, 64u, 65u, 127u, 4096u, 0x7fffffu}) {
            const uint32_t bits = (static_cast<uint32_t>(127 + k) << 23) | m;  // the target s
            float t;
            std::memcpy(&t, &bits, 4);
            amaxes.push_back(t * 448.0f);  // s0 = amax / 448 lands on or next to t
        }
    }
    amaxes.push_back(0.0f);   // below the 1e-4 floor
    amaxes.push_back(3e-5f);  // below the floor
    const auto n_rows = static_cast<int64_t>(amaxes.size());
    std::mt19937 rng(4400);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (const bool rotate : {false, true}) {
        for (const int64_t pitch : {dim, dim + 4}) {  // out rows 16-byte aligned, then 4-byte aligned only
            std::vector<float> vals(static_cast<size_t>(n_rows * dim));
            for (int64_t r = 0; r < n_rows; ++r) {
                const float a = amaxes[static_cast<size_t>(r)];
                for (int64_t i = 0; i < dim; ++i) vals[static_cast<size_t>(r * dim + i)] = a * 0.5f * u(rng);
                vals[static_cast<size_t>(r * dim + r % dim)] = r % 2 == 0 ? a : -a;  // the row's amax, exactly
            }
            const std::string name =
                shape_name(std::string(rotate ? "rot" : "plain") + (pitch == dim ? "_out16" : "_out4"), {n_rows, dim});
            SCOPED_TRACE(name);
            const Pair in = make_pair_from(vals, {n_rows, dim}, DType::kF32, false, alloc(), stream());
            Tensor out_d = Tensor::empty({n_rows, pitch}, DType::kF8E4M3, alloc());
            cuda::fill_bytes_async(out_d.view(), 0x55, stream());
            Tensor out_h = Tensor::empty({n_rows, pitch}, DType::kF8E4M3);
            std::memset(out_h.ptr<uint8_t>(), 0x55, static_cast<size_t>(n_rows * pitch));
            Tensor scale_d = Tensor::empty({n_rows}, DType::kF32, alloc());
            Tensor scale_h = Tensor::empty({n_rows}, DType::kF32);
            const TensorView od = out_d.view().slice(1, 0, dim), oh = out_h.view().slice(1, 0, dim);
            kernels::dsa_quantize_fp8({.out = od, .scale = scale_d, .in = in.dv, .rotate = rotate, .ue8m0 = true},
                                      gpu());
            kernels::dsa_quantize_fp8({.out = oh, .scale = scale_h, .in = in.hv, .rotate = rotate, .ue8m0 = true},
                                      kernels::Context{});
            const Tensor got = cuda::to_host(out_d, stream());
            conf_exact("dsa_quantize_fp8", name + " ue8m0 edges bytes",
                       std::vector<uint8_t>(got.ptr<uint8_t>(), got.ptr<uint8_t>() + got.numel()),
                       std::vector<uint8_t>(out_h.ptr<uint8_t>(), out_h.ptr<uint8_t>() + out_h.numel()));
            const Tensor sg = cuda::to_host(scale_d, stream());
            std::vector<uint32_t> sb_got(static_cast<size_t>(n_rows)), sb_want(static_cast<size_t>(n_rows));
            std::memcpy(sb_got.data(), sg.ptr<float>(), sb_got.size() * 4);
            std::memcpy(sb_want.data(), scale_h.ptr<float>(), sb_want.size() * 4);
            conf_exact("dsa_quantize_fp8", name + " ue8m0 edges scale bits", sb_got, sb_want);
            if (HasFatalFailure()) return;
        }
    }
}

// ------------------------------------------------------------------------------------------------ sparse MLA
struct MlaCase {
    const char* name;
    int64_t n_rows, n_heads, d_qk, d_v, n_pages, top_k;
    bool shared_v;  // v = kv[:, :d_v]
    bool strided_q;
};

TEST_F(DsaOpTest, SparseMlaAttentionMatchesReference) {
    constexpr int64_t kPage = 64;
    uint32_t seed = 4400;
    for (const MlaCase& c : std::vector<MlaCase>{{"one_row_k4", 1, 3, 64, 64, 1, 4, false, false},
                                                 {"k63_heads3", 7, 3, 128, 128, 2, 63, false, true},
                                                 {"k64", 5, 4, 128, 96, 2, 64, true, false},
                                                 {"k65", 9, 3, 192, 128, 3, 65, false, true},
                                                 {"k127_heads16", 4, 16, 576, 512, 3, 127, true, false},
                                                 {"k128_latent576", 6, 16, 576, 512, 3, 128, true, true},
                                                 {"k129_latent576", 3, 16, 576, 512, 4, 129, true, false},
                                                 {"heads96", 3, 96, 64, 64, 2, 70, false, false}}) {
        SCOPED_TRACE(c.name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const int64_t n_slots = c.n_pages * kPage;
        const Pair q = random_pair(rng, {c.n_rows, c.n_heads, c.d_qk}, DType::kF32, c.strided_q, alloc(), stream());
        const Pair kv = random_pair(rng, {n_slots, c.d_qk}, DType::kF32, true, alloc(), stream());
        Pair v_own;
        TensorView v_dev = kv.dv.slice(1, 0, c.d_v), v_host = kv.hv.slice(1, 0, c.d_v);
        if (!c.shared_v) {
            v_own = random_pair(rng, {n_slots, c.d_v}, DType::kF32, false, alloc(), stream());
            v_dev = v_own.dv;
            v_host = v_own.hv;
        }
        // Index lists: distinct random slots; row 0 full, the others with -1 holes (scattered and a tail); the last
        // row of a multi-row case all -1.
        std::vector<int32_t> idx(static_cast<size_t>(c.n_rows * c.top_k), -1);
        std::vector<int32_t> perm(static_cast<size_t>(n_slots));
        std::iota(perm.begin(), perm.end(), 0);
        std::uniform_real_distribution<float> u(0.0f, 1.0f);
        for (int64_t r = 0; r < c.n_rows; ++r) {
            if (c.n_rows > 2 && r == c.n_rows - 1) break;
            std::shuffle(perm.begin(), perm.end(), rng);
            const int64_t used = r == 0 ? c.top_k : c.top_k - (r % 5);
            for (int64_t j = 0; j < std::min(used, n_slots); ++j) {
                if (r > 0 && u(rng) < 0.1f) continue;
                idx[static_cast<size_t>(r * c.top_k + j)] = perm[static_cast<size_t>(j)];
            }
        }
        const Tensor idx_d = dev_i32(idx, alloc(), stream(), {c.n_rows, c.top_k});
        const Tensor idx_h = Tensor::from_i32({c.n_rows, c.top_k}, idx);
        Pair out = poisoned_pair({c.n_rows, c.n_heads, c.d_v}, DType::kF32, true, alloc(), stream());
        Pair lse = poisoned_pair({c.n_rows, c.n_heads}, DType::kF32, false, alloc(), stream());
        const float scale = 2.0f / std::sqrt(static_cast<float>(c.d_qk));
        kernels::sparse_mla_attention(
            {.out = out.dv, .lse = lse.dv, .q = q.dv, .kv = kv.dv, .v = v_dev, .indices = idx_d, .scale = scale},
            gpu());
        kernels::sparse_mla_attention(
            {.out = out.hv, .lse = lse.hv, .q = q.hv, .kv = kv.hv, .v = v_host, .indices = idx_h, .scale = scale},
            kernels::Context{});
        conf_pair("sparse_mla_attention", std::string(c.name) + " out", out, out.hv, kF32Tol, stream());
        conf_pair("sparse_mla_attention", std::string(c.name) + " lse", lse, lse.hv, kF32Tol, stream());
        if (HasFatalFailure()) return;
    }
}

// ------------------------------------------------------------------------------------------------ perf
// Model-like shapes (GLM-5 indexer 32 x 128, top-2048; MLA absorbed 576/512), CUDA events, median of 10 after 3
// warm-ups; inputs are filled once (no L2 flush; the big inputs exceed L2 anyway).
TEST_F(DsaOpTest, Perf) {
    if (!perf_enabled()) GTEST_SKIP() << "set PENSTOCK_CUDA_PERF=1";
    std::mt19937 rng(4500);
    const kernels::Context ctx = gpu();
    {
        const int64_t rows = 2048, keys = 8192, heads = 32, d = 128;
        const Pair q = random_pair(rng, {rows, heads, d}, DType::kF32, false, alloc(), stream());
        const Pair k = random_pair(rng, {keys, d}, DType::kF32, false, alloc(), stream());
        const Pair w = random_pair(rng, {rows, heads}, DType::kF32, false, alloc(), stream());
        Tensor logits = Tensor::empty({rows, keys}, DType::kF32, alloc());
        const std::string shape = "rows 2048, keys 8192, 32 heads x 128";
        const kernels::DsaIndexerLogitsParams pf{.logits = logits,
                                                 .q = q.dv,
                                                 .k = k.dv,
                                                 .weights = w.dv,
                                                 .q_scale = {},
                                                 .k_scale = {},
                                                 .q_pos = {},
                                                 .scale = 0.088f};
        // The f32 kernels: the CUDA-core tiled one and the three-product tensor-core ones (wgmma: sm_90 only).
        const struct {
            const char* label;
            cuda::IndexerVariant variant;
            bool wgmma;
        } f32_kernels[] = {{"tiled", cuda::IndexerVariant::kF32Tiled, false},
                           {"tf32", cuda::IndexerVariant::kMmaTf32, false},
                           {"wgmma tf32", cuda::IndexerVariant::kWgmmaTf32, true},
                           {"wgmma f16x3", cuda::IndexerVariant::kWgmmaF16x3, true}};
        for (const auto& f : f32_kernels) {
            if (f.wgmma && !cuda::dsa_indexer_wgmma_tf32_supported(pf)) continue;
            const std::string label = std::string("dsa_indexer_logits f32 [") + f.label + "]";
            const double us_f =
                perf_time(label, shape, stream(), [&] { cuda::dsa_indexer_logits(pf, f.variant, raw_stream()); });
            std::printf("[perf] %s | %.1f TFLOP/s\n", label.c_str(), 2.0 * rows * keys * heads * d / us_f * 1e-6);
        }
        const BytePair q8 =
            byte_pair(random_e4m3(rng, rows * heads * d, 8.0f), {rows, heads, d}, false, alloc(), stream());
        const BytePair k8 = byte_pair(random_e4m3(rng, keys * d, 8.0f), {keys, d}, false, alloc(), stream());
        const Pair qs = random_pair(rng, {rows, heads}, DType::kF32, false, alloc(), stream(), 0.01f, 0.1f);
        const Pair ks = random_pair(rng, {keys}, DType::kF32, false, alloc(), stream(), 0.01f, 0.1f);
        const kernels::DsaIndexerLogitsParams p8{.logits = logits,
                                                 .q = q8.dv,
                                                 .k = k8.dv,
                                                 .weights = w.dv,
                                                 .q_scale = qs.dv,
                                                 .k_scale = ks.dv,
                                                 .q_pos = {},
                                                 .scale = 0.088f};
        const double us8 = perf_time("dsa_indexer_logits fp8 [cuda-core]", shape, stream(), [&] {
            cuda::dsa_indexer_logits(p8, cuda::IndexerVariant::kCudaCore, raw_stream());
        });
        std::printf("[perf] dsa_indexer_logits fp8 [cuda-core] | %.1f TFLOP/s\n",
                    2.0 * rows * keys * heads * d / us8 * 1e-6);
        const double usm = perf_time("dsa_indexer_logits fp8 [mma]", shape, stream(),
                                     [&] { cuda::dsa_indexer_logits(p8, cuda::IndexerVariant::kMma, raw_stream()); });
        std::printf("[perf] dsa_indexer_logits fp8 [mma] | %.1f TFLOP/s\n", 2.0 * rows * keys * heads * d / usm * 1e-6);
        // The two fp8 variants on the perf shape (blocks past the first 256 keys / 16 rows): GPU vs GPU.
        Tensor logits_cc = Tensor::empty({rows, keys}, DType::kF32, alloc());
        kernels::DsaIndexerLogitsParams pcc = p8;
        pcc.logits = logits_cc;
        cuda::dsa_indexer_logits(pcc, cuda::IndexerVariant::kCudaCore, raw_stream());
        const Tensor hm = cuda::to_host(logits, stream()), hc = cuda::to_host(logits_cc, stream());
        {
            double max_d = 0, max_ref = 0;
            int64_t n_nan = 0, n_zero = 0;
            for (int64_t i = 0; i < hm.numel(); ++i) {
                const double m = hm.ptr<float>()[i], c = hc.ptr<float>()[i];
                if (std::isnan(m)) ++n_nan;
                if (m == 0.0) ++n_zero;
                max_d = std::max(max_d, std::fabs(m - c));
                max_ref = std::max(max_ref, std::fabs(c));
            }
            std::printf(
                "[perf] dsa_indexer_logits fp8 mma vs cuda-core at %lld x %lld: max|d| %.3g (max|x| %.3g), "
                "NaN %lld, zeros %lld\n",
                static_cast<long long>(rows), static_cast<long long>(keys), max_d, max_ref,
                static_cast<long long>(n_nan), static_cast<long long>(n_zero));
            EXPECT_LE(max_d, kF32IndexerLogits.atol + kF32IndexerLogits.rtol * max_ref);
        }
        // top-k over those logits, rows at causal positions 6144..8191 (every row has > 2048 visible keys).
        std::vector<int32_t> pos(static_cast<size_t>(rows));
        std::iota(pos.begin(), pos.end(), static_cast<int32_t>(keys - rows));
        const Tensor pos_d = dev_i32(pos, alloc(), stream());
        Tensor idx = Tensor::empty({rows, 2048}, DType::kI32, alloc());
        perf_time("dsa_topk (mma logits)", "rows 2048, keys 8192, top 2048", stream(), [&] {
            kernels::dsa_topk({.indices = idx, .logits = logits, .q_pos = pos_d, .torch_row_len = 0}, ctx);
        });
        perf_time("dsa_topk (cuda-core logits)", "rows 2048, keys 8192, top 2048", stream(), [&] {
            kernels::dsa_topk({.indices = idx, .logits = logits_cc, .q_pos = pos_d, .torch_row_len = 0}, ctx);
        });
        {
            // Distinct f32 values (no ties anywhere): the radix-select path alone.
            const Pair dl =
                make_pair_from(distinct_logits(rng, rows * keys), {rows, keys}, DType::kF32, false, alloc(), stream());
            perf_time("dsa_topk distinct", "rows 2048, keys 8192, top 2048", stream(), [&] {
                kernels::dsa_topk({.indices = idx, .logits = dl.dv, .q_pos = pos_d, .torch_row_len = 0}, ctx);
            });
        }
        // Tied rows (90% exact zeros, few levels): the serial replay path.
        const int64_t trows = 256;
        const Pair tl = make_pair_from(tied_logits(rng, trows * keys, 0.1f, 4), {trows, keys}, DType::kF32, false,
                                       alloc(), stream());
        std::vector<int32_t> tpos(static_cast<size_t>(trows), static_cast<int32_t>(keys - 1));
        const Tensor tpos_d = dev_i32(tpos, alloc(), stream());
        Tensor tidx = Tensor::empty({trows, 2048}, DType::kI32, alloc());
        perf_time(
            "dsa_topk tied (replay)", "rows 256, keys 8192, top 2048", stream(),
            [&] { kernels::dsa_topk({.indices = tidx, .logits = tl.dv, .q_pos = tpos_d, .torch_row_len = 0}, ctx); }, 1,
            3);
    }
    // 65536 rows (42 MB: in L2) and a GLM-5.3 16K chunk's 16384 x 32 query rows (335 MB).
    for (const int64_t rows : {int64_t{65536}, int64_t{524288}}) {
        const int64_t dim = 128;
        const Pair in = random_pair(rng, {rows, dim}, DType::kF32, false, alloc(), stream());
        Tensor out = Tensor::empty({rows, dim}, DType::kF8E4M3, alloc());
        Tensor sc = Tensor::empty({rows}, DType::kF32, alloc());
        const double us =
            perf_time("dsa_quantize_fp8", "rows " + std::to_string(rows) + " x 128, Hadamard + ue8m0", stream(), [&] {
                kernels::dsa_quantize_fp8({.out = out, .scale = sc, .in = in.dv, .rotate = true, .ue8m0 = true}, ctx);
            });
        std::printf("[perf] dsa_quantize_fp8 rows %lld | %.1f us, %.0f GB/s\n", static_cast<long long>(rows), us,
                    static_cast<double>(rows * (dim * 5 + 4)) / us * 1e-3);
    }
    {
        const int64_t rows = 256, heads = 64, slots = 16384, top_k = 2048;
        const Pair q = random_pair(rng, {rows, heads, 576}, DType::kF32, false, alloc(), stream());
        const Pair kv = random_pair(rng, {slots, 576}, DType::kF32, false, alloc(), stream());
        std::vector<int32_t> idx(static_cast<size_t>(rows * top_k));
        std::vector<int32_t> perm(static_cast<size_t>(slots));
        std::iota(perm.begin(), perm.end(), 0);
        for (int64_t r = 0; r < rows; ++r) {
            std::shuffle(perm.begin(), perm.end(), rng);
            std::sort(perm.begin(), perm.begin() + top_k);
            std::copy_n(perm.begin(), top_k, idx.begin() + r * top_k);
        }
        const Tensor idx_d = dev_i32(idx, alloc(), stream(), {rows, top_k});
        Tensor out = Tensor::empty({rows, heads, 512}, DType::kF32, alloc());
        Tensor lse = Tensor::empty({rows, heads}, DType::kF32, alloc());
        const double us = perf_time("sparse_mla_attention", "rows 256, 64 heads, top 2048, 576/512", stream(), [&] {
            kernels::sparse_mla_attention({.out = out,
                                           .lse = lse,
                                           .q = q.dv,
                                           .kv = kv.dv,
                                           .v = kv.dv.slice(1, 0, 512),
                                           .indices = idx_d,
                                           .scale = 0.0417f},
                                          ctx);
        });
        std::printf("[perf] sparse_mla_attention | %.2f TFLOP/s\n",
                    2.0 * rows * heads * top_k * (576 + 512) / us * 1e-6);
    }
}

}  // namespace
}  // namespace penstock::test
