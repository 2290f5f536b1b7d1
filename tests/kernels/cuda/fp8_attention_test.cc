// FP8 attention on the GPU (kernels/ops.h AttentionParams with e4m3 q / k / v / out; Fp8TensorScaleParams) against the
// CPU reference:
//  - cuda::fp8_quantize_tensor / fp8_dequantize_tensor bit-exact with the reference (scale and every byte) on the
//    views FP8 attention feeds them: contiguous bf16 (16-byte packs), a strided MLA v slice, padded strides that
//    force the element-wise path, f32, and an all-zero tensor;
//  - cuda::attention with FP8 inputs and output against ref::attention on the same e4m3 bytes and descales: cuDNN's
//    FP8 SDPA (one sequence, ragged batches with the equal_lengths hint, the MLA MHA layout with v a strided view,
//    16 and 128 heads, d 192 / 128) and the bf16 fallback (a cached prefix: unequal lengths), with Penstock's FP8
//    wgmma kernel switched off. out_descale must be exact; the dequantised outputs agree to FP8 accuracy (kFp8Attn
//    below), and the test checks which path ran;
//  - the FP8 wgmma kernel (attention_fp8_wgmma.h), bf16 and e4m3 out, over the cases it covers.
// One "[conf] ..." line per output. Skips without a GPU; the cuDNN cases skip in a build without cuDNN.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_fp8_wgmma.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ref/ref_ops.h"
#include "tests/kernels/cuda/conformance_log.h"
#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {
namespace {

// Dequantised FP8 attention outputs (device: probabilities rounded to e4m3 by cuDNN; reference: exact softmax) agree
// to about two e4m3 steps: each output is rounded to e4m3 (1/16 relative) on both sides, and the probabilities'
// rounding moves each term p_j v_j by up to 1/16 of itself, which for an output near zero (terms cancelling) is an
// absolute error up to ~1/16 of the v range: atol is 0.1 of it (v is uniform in [-1, 1] here). The relative RMS error
// over the whole output, the tighter check, must stay under 5%.
constexpr Tolerance kFp8Attn{.atol = 1e-1, .rtol = 1.5e-1};

std::vector<uint8_t> bytes_of(const Tensor& host) {
    std::vector<uint8_t> b(static_cast<size_t>(host.nbytes()));
    std::memcpy(b.data(), host.view().data, b.size());
    return b;
}

// Scales compared bit for bit, every NaN as one pattern (a NaN scale's payload is the platform's).
std::vector<uint32_t> scale_bits(const std::vector<float>& v) {
    std::vector<uint32_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        b[i] = std::isnan(v[i]) ? 0x7fc00000u : std::bit_cast<uint32_t>(v[i]);
    }
    return b;
}

float scalar_of(const Tensor& dev, const cuda::Stream& stream) {
    const Tensor h = cuda::to_host(dev, stream);
    return h.ptr<float>()[0];
}

// An e4m3 tensor quantised on both sides (Fp8AttentionTest::quantize_both): the device tensor and its device scale,
// and the host ones (contiguous).
struct Quantized {
    Tensor dev, dev_scale, host, host_scale;
};

class Fp8AttentionTest : public CudaTest {
protected:
    Tensor dev_empty(const Shape& shape, DType dt) { return Tensor::empty(shape, dt, alloc()); }

    // Quantises `x` (a Pair's device and host views) on both sides; checks scale and bytes; returns the device e4m3
    // tensor, its device scale, and the host ones (contiguous [x's shape]).
    Quantized quantize_both(const std::string& name, const TensorView& dv, const TensorView& hv) {
        Shape shape;
        for (int d = 0; d < dv.ndim; ++d) shape.push_back(dv.size(d));
        Quantized q{dev_empty(shape, DType::kF8E4M3), dev_empty({1}, DType::kF32), Tensor::empty(shape, DType::kF8E4M3),
                    Tensor::empty({1}, DType::kF32)};
        cuda::fp8_quantize_tensor({.out = q.dev, .scale = q.dev_scale, .in = dv}, raw_stream());
        // The reference reads the same rounded values: a host copy in the device dtype.
        ref::fp8_quantize_tensor({.out = q.host, .scale = q.host_scale, .in = hv}, nullptr);
        conf_exact("fp8_quantize_tensor", name + " bytes", bytes_of(cuda::to_host(q.dev, stream())), bytes_of(q.host));
        conf_exact("fp8_quantize_tensor", name + " scale", scale_bits({scalar_of(q.dev_scale, stream())}),
                   scale_bits({q.host_scale.ptr<float>()[0]}));
        return q;
    }

    // The same with fp8_quantize_heads: x = [dv ; dtail] (dtail may be empty) per head in blocks of `block` rows of
    // each sequence of cu (empty: one sequence); checks every byte and every [n, H] scale bit for bit.
    Quantized quantize_heads_both(const std::string& name, const TensorView& dv, const TensorView& hv,
                                  const TensorView& dtail, const TensorView& htail, const std::vector<int32_t>& cu,
                                  int32_t block) {
        const int64_t n = dv.size(0), h = dv.size(1), d = dv.size(2) + (dtail.data != nullptr ? dtail.size(2) : 0);
        Quantized q{dev_empty({n, h, d}, DType::kF8E4M3), dev_empty({n, h}, DType::kF32),
                    Tensor::empty({n, h, d}, DType::kF8E4M3), Tensor::empty({n, h}, DType::kF32)};
        const Tensor cu_d = cu.empty() ? Tensor{} : dev_i32(cu, alloc(), stream());
        const Tensor cu_h = cu.empty() ? Tensor{} : Tensor::from_i32({static_cast<int64_t>(cu.size())}, cu);
        cuda::fp8_quantize_heads({.out = q.dev,
                                  .scale = q.dev_scale,
                                  .in = dv,
                                  .in_tail = dtail,
                                  .cu_seqlens = cu.empty() ? TensorView{} : cu_d.view(),
                                  .block = block},
                                 raw_stream());
        ref::fp8_quantize_heads({.out = q.host,
                                 .scale = q.host_scale,
                                 .in = hv,
                                 .in_tail = htail,
                                 .cu_seqlens = cu.empty() ? TensorView{} : cu_h.view(),
                                 .block = block},
                                nullptr);
        conf_exact("fp8_quantize_heads", name + " bytes", bytes_of(cuda::to_host(q.dev, stream())), bytes_of(q.host));
        conf_exact("fp8_quantize_heads", name + " scales", scale_bits(read_f32(cuda::to_host(q.dev_scale, stream()))),
                   scale_bits(read_f32(q.host_scale)));
        return q;
    }
};

// A host view holding `p`'s values in the device dtype (bf16 values are already rounded in the Pair's f32 host copy,
// so the f32 host view reads the same numbers).
TEST_F(Fp8AttentionTest, TensorQuantizeMatchesReferenceBitExact) {
    constexpr uint32_t kSeed = 3100;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    // Contiguous bf16 (16-byte packs), padded strides (element-wise path), f32, and the MLA v slice of a kv_b output.
    const Pair a = random_pair(rng, {300, 16, 192}, DType::kBF16, /*strided=*/false, alloc(), stream());
    quantize_both("bf16_contiguous", a.dv, a.hv);
    const Pair b = random_pair(rng, {65, 3, 40}, DType::kBF16, /*strided=*/true, alloc(), stream());
    quantize_both("bf16_padded", b.dv, b.hv);
    const Pair c = random_pair(rng, {33, 5, 24}, DType::kF32, /*strided=*/false, alloc(), stream());
    const Quantized qc = quantize_both("f32", c.dv, c.hv);
    const Pair kvb = random_pair(rng, {129, 8, 256}, DType::kBF16, /*strided=*/false, alloc(), stream());
    const Quantized qv = quantize_both("mla_v_slice", kvb.dv.slice(2, 128, 256), kvb.hv.slice(2, 128, 256));
    const Pair z = make_pair_from(std::vector<float>(64, 0.0f), {4, 16}, DType::kBF16, false, alloc(), stream());
    quantize_both("zeros", z.dv, z.hv);
    // Amax or 1 / s not finite (the software rounding's branch): an infinity, a NaN, an amax so small that 1 / s
    // overflows (every quotient infinite or NaN: 0x7f, where the hardware cast would saturate); and one just above
    // that (1 / s finite: the hardware cast's branch).
    for (const auto& [label, special] :
         std::vector<std::pair<std::string, float>>{{"inf", std::numeric_limits<float>::infinity()},
                                                    {"nan", std::numeric_limits<float>::quiet_NaN()},
                                                    {"tiny_amax", 1e-37f},
                                                    {"small_amax", 1e-35f}}) {
        std::vector<float> vals = random_floats(rng, 3 * 64, -1.0f, 1.0f);
        const bool scaled = label == "tiny_amax" || label == "small_amax";
        if (scaled) {
            for (float& x : vals) x *= special;
        }
        vals[77] = special;  // (scaled: the amax itself)
        for (const DType dt : {DType::kBF16, DType::kF32}) {
            const Pair sp = make_pair_from(vals, {3, 4, 16}, dt, false, alloc(), stream());
            quantize_both("special_" + label + "_" + std::string(dtype_name(dt)), sp.dv, sp.hv);
        }
    }

    // Dequantise to bf16 and f32: bit-exact.
    for (DType dt : {DType::kBF16, DType::kF32}) {
        Tensor d = dev_empty({129, 8, 128}, dt);
        cuda::fp8_dequantize_tensor({.out = d, .scale = qv.dev_scale, .in = qv.dev}, raw_stream());
        Tensor h = Tensor::empty({129, 8, 128}, dt);
        ref::fp8_dequantize_tensor({.out = h, .scale = qv.host_scale, .in = qv.host}, nullptr);
        conf_exact("fp8_dequantize_tensor", std::string("mla_v_") + std::string(dtype_name(dt)),
                   bytes_of(cuda::to_host(d, stream())), bytes_of(h));
    }
    Tensor d = dev_empty({33, 5, 24}, DType::kF32);
    cuda::fp8_dequantize_tensor({.out = d, .scale = qc.dev_scale, .in = qc.dev}, raw_stream());
    Tensor h = Tensor::empty({33, 5, 24}, DType::kF32);
    ref::fp8_dequantize_tensor({.out = h, .scale = qc.host_scale, .in = qc.host}, nullptr);
    conf_exact("fp8_dequantize_tensor", "f32", bytes_of(cuda::to_host(d, stream())), bytes_of(h));
}

// fp8_quantize_heads (FP8 attention's per-row q and per-block k scales) bit-exact with the reference: per row (block 1)
// over contiguous bf16 (16-byte packs) and padded strides (the element-wise path); per 128-key block of ragged
// sequences (blocks ending mid-sequence, a sequence shorter than a block, an empty one) with the MLA K pieces, k_nope
// a slice of a wider buffer and k_pe a stride-0 broadcast over the heads; block_quant_kernel's 3- and 4-pack lane
// shapes and head_quant_kernel's walk for a block too large for it; f32 with blocks of 3 rows and no sequences; an
// all-zero block (scale 1); units with infinities, NaNs and tiny amaxes.
TEST_F(Fp8AttentionTest, HeadQuantizeMatchesReferenceBitExact) {
    constexpr uint32_t kSeed = 3150;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    const Pair a = random_pair(rng, {200, 16, 192}, DType::kBF16, /*strided=*/false, alloc(), stream(), -4.0f, 4.0f);
    quantize_heads_both("per_row_bf16", a.dv, a.hv, TensorView{}, TensorView{}, {}, 1);
    const Pair b = random_pair(rng, {37, 3, 40}, DType::kBF16, /*strided=*/true, alloc(), stream());
    quantize_heads_both("per_row_padded", b.dv, b.hv, TensorView{}, TensorView{}, {}, 1);
    // MLA K: k_nope = columns [0, 128) of a [n, 8, 256] kv_b output, k_pe = one [n, 64] row broadcast over 8 heads.
    const std::vector<int32_t> cu = {0, 300, 300, 317, 573};
    const Pair kvb = random_pair(rng, {573, 8, 256}, DType::kBF16, /*strided=*/false, alloc(), stream());
    const Pair pe = random_pair(rng, {573, 1, 64}, DType::kBF16, /*strided=*/false, alloc(), stream(), -8.0f, 8.0f);
    auto bcast = [](const TensorView& v) { return v.as_strided(0, {v.size(0), 8, 64}, {v.stride(0), 0, 1}); };
    quantize_heads_both("mla_k_blocks", kvb.dv.slice(2, 0, 128), kvb.hv.slice(2, 0, 128), bcast(pe.dv), bcast(pe.hv),
                        cu, kernels::kFp8AttnKeyBlock);
    // Per 128-key block on block_quant_kernel's other shapes: 12 bf16 packs per row (4 lanes x 3, two passes of 64
    // rows) over ragged sequences; and f32 [128 ; 64] (48 packs per row: 16 lanes a row, 64 rows in 4 passes, too few
    // for a block: head_quant_kernel's walk).
    const Pair e = random_pair(rng, {300, 4, 96}, DType::kBF16, /*strided=*/false, alloc(), stream(), -3.0f, 3.0f);
    quantize_heads_both("blocks_bf16_96", e.dv, e.hv, TensorView{}, TensorView{}, {0, 130, 130, 300},
                        kernels::kFp8AttnKeyBlock);
    const Pair f = random_pair(rng, {200, 2, 128}, DType::kF32, /*strided=*/false, alloc(), stream());
    const Pair ft = random_pair(rng, {200, 2, 64}, DType::kF32, /*strided=*/false, alloc(), stream());
    quantize_heads_both("blocks_f32_walk", f.dv, f.hv, ft.dv, ft.hv, {0, 77, 200}, kernels::kFp8AttnKeyBlock);
    const Pair c = random_pair(rng, {10, 4, 24}, DType::kF32, /*strided=*/false, alloc(), stream());
    const Pair ct = random_pair(rng, {10, 4, 8}, DType::kF32, /*strided=*/false, alloc(), stream());
    quantize_heads_both("f32_tail_block3", c.dv, c.hv, ct.dv, ct.hv, {}, 3);
    const Pair z =
        make_pair_from(std::vector<float>(6 * 2 * 16, 0.0f), {6, 2, 16}, DType::kBF16, false, alloc(), stream());
    const Quantized qz = quantize_heads_both("zeros", z.dv, z.hv, TensorView{}, TensorView{}, {0, 6}, 4);
    EXPECT_EQ(read_f32(qz.host_scale), std::vector<float>(12, 1.0f));
    // Units whose amax or 1 / s is not finite take the software rounding (an infinity, a NaN, an amax so small that
    // 1 / s overflows), beside units that take the hardware cast (one just above that, and plain ones): 8 rows x 2
    // heads x 32 or 48 columns (block_quant_kernel with 4 or 3 packs per lane), per row (bf16 and f32) and per block
    // of 4 rows of two sequences.
    for (const int cols : {32, 48}) {
        std::vector<float> vals = random_floats(rng, 8 * 2 * cols, -2.0f, 2.0f);
        auto unit = [&](int row, int head) { return vals.begin() + (row * 2 + head) * cols; };
        unit(1, 0)[5] = std::numeric_limits<float>::infinity();
        unit(2, 1)[31] = -std::numeric_limits<float>::infinity();
        unit(3, 0)[0] = std::numeric_limits<float>::quiet_NaN();
        for (int c = 0; c < cols; ++c) unit(5, 1)[c] *= 1e-37f;  // 1 / s overflows
        for (int c = 0; c < cols; ++c) unit(6, 0)[c] *= 1e-35f;  // 1 / s finite
        for (const DType dt : {DType::kBF16, DType::kF32}) {
            const Pair sp = make_pair_from(vals, {8, 2, cols}, dt, false, alloc(), stream());
            const std::string tag = std::string(dtype_name(dt)) + "_" + std::to_string(cols);
            quantize_heads_both("special_per_row_" + tag, sp.dv, sp.hv, TensorView{}, TensorView{}, {}, 1);
            quantize_heads_both("special_blocks_" + tag, sp.dv, sp.hv, TensorView{}, TensorView{}, {0, 3, 8}, 4);
        }
    }
}

// fp8_quantize_heads with the fused RoPE (FP8 attention's q, Fp8HeadQuantParams::rope) is bit for bit cuda::rope on a
// copy's rope columns followed by the plain op, both on the GPU (rope.cuh's arithmetic is shared): the fused kernel on
// DeepSeek-V3's q rows (192 columns, the last 64 rotated; interleaved or not; bf16 with positions past 2^16, and f32),
// rope columns in the middle of the row, and the composed fallback (rope columns that are not whole packs). Against the
// reference, whose cos / sin are the host's, it stays within one e4m3 step.
TEST_F(Fp8AttentionTest, HeadQuantizeWithRopeIsRopeThenQuantize) {
    constexpr uint32_t kSeed = 3170;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    struct Case {
        std::string name;
        int64_t n, h, d, col, half;
        DType dt;
        bool interleaved;
    };
    const std::vector<Case> cases = {
        {"dsv3_q_interleaved", 300, 16, 192, 128, 32, DType::kBF16, true},
        {"dsv3_q_halves", 300, 16, 192, 128, 32, DType::kBF16, false},
        {"mid_row_f32", 65, 5, 96, 32, 16, DType::kF32, true},
        {"unaligned_fallback", 33, 4, 40, 6, 9, DType::kBF16, false},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        const Pair x = random_pair(rng, {c.n, c.h, c.d}, c.dt, /*strided=*/false, alloc(), stream(), -4.0f, 4.0f);
        std::vector<int32_t> pos(static_cast<size_t>(c.n));
        for (int64_t i = 0; i < c.n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i * 331 + (i % 3) * 70000);
        std::vector<float> freq(static_cast<size_t>(c.half));
        for (int64_t i = 0; i < c.half; ++i) {
            freq[static_cast<size_t>(i)] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / (2.0f * c.half));
        }
        const Tensor pos_d = dev_i32(pos, alloc(), stream()), pos_h = Tensor::from_i32({c.n}, pos);
        const Tensor freq_h = Tensor::from_f32({c.half}, freq);
        const Tensor freq_d = cuda::to_device(freq_h, alloc(), stream());
        const kernels::RopeParams rope_d{
            .x = {}, .positions = pos_d, .inv_freq = freq_d, .attention_factor = 0.75f, .interleaved = c.interleaved};
        kernels::RopeParams rope_h = rope_d;
        rope_h.positions = pos_h;
        rope_h.inv_freq = freq_h;
        Tensor fused = dev_empty({c.n, c.h, c.d}, DType::kF8E4M3), fused_s = dev_empty({c.n, c.h}, DType::kF32);
        cuda::fp8_quantize_heads({.out = fused, .scale = fused_s, .in = x.dv, .rope = rope_d, .rope_col = c.col},
                                 raw_stream());
        // the composition on the GPU
        Tensor copy = dev_empty({c.n, c.h, c.d}, c.dt);
        cuda::copy({.out = copy, .in = x.dv}, raw_stream());
        kernels::RopeParams on_copy = rope_d;
        on_copy.x = copy.view().slice(2, c.col, c.col + 2 * c.half);
        cuda::rope(on_copy, raw_stream());
        Tensor comp = dev_empty({c.n, c.h, c.d}, DType::kF8E4M3), comp_s = dev_empty({c.n, c.h}, DType::kF32);
        cuda::fp8_quantize_heads({.out = comp, .scale = comp_s, .in = copy}, raw_stream());
        const std::vector<uint8_t> got = bytes_of(cuda::to_host(fused, stream()));
        conf_exact("fp8_quantize_heads_rope", c.name + " bytes vs rope + quantize", got,
                   bytes_of(cuda::to_host(comp, stream())));
        const std::vector<float> got_s = read_f32(cuda::to_host(fused_s, stream()));
        conf_exact("fp8_quantize_heads_rope", c.name + " scales vs rope + quantize", scale_bits(got_s),
                   scale_bits(read_f32(cuda::to_host(comp_s, stream()))));
        // the reference: within one e4m3 code of each byte (host cos / sin), scales within a bf16 / f32 rounding
        Tensor ref_q = Tensor::empty({c.n, c.h, c.d}, DType::kF8E4M3), ref_s = Tensor::empty({c.n, c.h}, DType::kF32);
        ref::fp8_quantize_heads({.out = ref_q, .scale = ref_s, .in = x.hv, .rope = rope_h, .rope_col = c.col}, nullptr);
        int64_t off = 0, far = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            const uint8_t g = got[i], r = ref_q.ptr<uint8_t>()[i];
            if (g == r) continue;
            ++off;
            const bool same_sign = (g & 0x80) == (r & 0x80);
            if (!same_sign || std::abs(static_cast<int>(g & 0x7f) - static_cast<int>(r & 0x7f)) > 1) ++far;
        }
        double worst_scale = 0.0;
        for (int64_t i = 0; i < c.n * c.h; ++i) {
            const double r = ref_s.ptr<float>()[i];
            worst_scale = std::max(worst_scale, std::fabs(got_s[static_cast<size_t>(i)] - r) / r);
        }
        const bool pass = far == 0 && off * 100 <= static_cast<int64_t>(got.size()) && worst_scale <= 1e-2;
        std::printf(
            "[conf] fp8_quantize_heads_rope | %s vs reference | bytes off by one %lld of %zu, farther %lld, "
            "scales rel %.2g | one e4m3 step | %s\n",
            c.name.c_str(), static_cast<long long>(off), got.size(), static_cast<long long>(far), worst_scale,
            pass ? "PASS" : "FAIL");
        EXPECT_TRUE(pass) << c.name;
    }
}

struct Seq {
    int32_t len_q, len_k, q_pos0, k_pos0;
};

// A batch's metadata: cumulative lengths, start positions and the longest sequence.
struct SeqMeta {
    std::vector<int32_t> cu_q{0}, cu_k{0}, qp, kp;
    int32_t max_q = 0, max_k = 0;
};

// The metadata of a SeqMeta as host tensors (what the reference reads).
struct HostMeta {
    Tensor cu_q, cu_k, qp, kp;
};

HostMeta host_meta(const SeqMeta& m) {
    return {i32_tensor(m.cu_q), i32_tensor(m.cu_k), i32_tensor(m.qp), i32_tensor(m.kp)};
}

// The reference's twin of device call `dp`: the same e4m3 bytes and descales (the Quantized host copies), the host
// metadata, and the caller's host outputs (an empty lse or out_descale: none).
kernels::AttentionParams host_twin(const kernels::AttentionParams& dp, const HostMeta& hm, const Quantized& q8,
                                   const Quantized& k8, const Quantized& v8, const TensorView& out,
                                   const TensorView& lse, const TensorView& out_descale) {
    kernels::AttentionParams hp = dp;
    hp.out = out;
    hp.lse = lse;
    hp.q = q8.host;
    hp.k = k8.host;
    hp.v = v8.host;
    hp.cu_seqlens_q = hm.cu_q;
    hp.cu_seqlens_k = hm.cu_k;
    hp.q_pos0 = hm.qp;
    hp.k_pos0 = hm.kp;
    hp.q_descale = q8.host_scale;
    hp.k_descale = k8.host_scale;
    hp.v_descale = v8.host_scale;
    hp.out_descale = out_descale;
    return hp;
}

SeqMeta meta_of(const std::vector<Seq>& seqs) {
    SeqMeta m;
    for (const Seq& s : seqs) {
        m.cu_q.push_back(m.cu_q.back() + s.len_q);
        m.cu_k.push_back(m.cu_k.back() + s.len_k);
        m.qp.push_back(s.q_pos0);
        m.kp.push_back(s.k_pos0);
        m.max_q = std::max(m.max_q, s.len_q);
        m.max_k = std::max(m.max_k, s.len_k);
    }
    return m;
}

// n short sequences (1-5 rows, every key its own) and one of `long_len` rows in their middle.
std::vector<Seq> many_short_seqs(int n, int32_t long_len) {
    std::vector<Seq> seqs;
    for (int i = 0; i < n; ++i) {
        const int32_t len = i == n / 2 ? long_len : 1 + i % 5;
        seqs.push_back({len, len, 0, 0});
    }
    return seqs;
}

struct Fp8Case {
    std::string name;
    int64_t n_heads, d_qk, d_v;
    std::vector<Seq> seqs;
    bool mla_layout;       // v = columns [d_qk - 64, + d_v) of a [T, H, d_qk - 64 + d_v] kv_b output
    bool equal_lengths;    // the hint (true only where it holds)
    bool want_cudnn;       // the path cuda::attention should take when the build has cuDNN
    bool with_lse = true;  // false: lse left empty (a one-round prefill's call)
};

// cuDNN's FP8 SDPA and the bf16 fallback: PENSTOCK_FP8_ATTENTION_KERNEL=cudnn keeps cuda::attention off the FP8 wgmma
// kernel (WgmmaKernelMatchesReference tests that one).
TEST_F(Fp8AttentionTest, AttentionMatchesReference) {
    setenv("PENSTOCK_FP8_ATTENTION_KERNEL", "cudnn", /*overwrite=*/1);
    struct Unset {
        ~Unset() { unsetenv("PENSTOCK_FP8_ATTENTION_KERNEL"); }
    } unset;
    const std::vector<Fp8Case> cases = {
        {"one_seq_h16", 16, 192, 128, {{300, 300, 0, 0}}, false, false, true},
        {"ragged_equal_h16",
         16,
         192,
         128,
         {{1, 1, 0, 0}, {17, 17, 0, 0}, {64, 64, 0, 0}, {130, 130, 0, 0}},
         false,
         true,
         true},
        {"mla_layout_h128", 128, 192, 128, {{65, 65, 0, 0}, {200, 200, 0, 0}}, true, true, true},
        {"d64_h4", 4, 64, 64, {{100, 100, 0, 0}}, false, true, true},
        {"prefix_fallback", 16, 192, 128, {{17, 40, 23, 0}, {65, 65, 0, 0}}, true, false, false},
        {"one_seq_h16_no_lse", 16, 192, 128, {{300, 300, 0, 0}}, true, false, true, false},
        {"prefix_fallback_no_lse", 16, 192, 128, {{17, 40, 23, 0}}, false, false, false, false},
    };
    uint32_t seed = 3200;
    for (const Fp8Case& c : cases) {
        SCOPED_TRACE(c.name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const SeqMeta m = meta_of(c.seqs);
        const std::vector<int32_t>&cu_q = m.cu_q, &cu_k = m.cu_k, &qp = m.qp, &kp = m.kp;
        const int32_t max_q = m.max_q, max_k = m.max_k;
        const int64_t tq = cu_q.back(), tk = cu_k.back();
        const Pair q = random_pair(rng, {tq, c.n_heads, c.d_qk}, DType::kBF16, false, alloc(), stream());
        const Pair k = random_pair(rng, {tk, c.n_heads, c.d_qk}, DType::kBF16, false, alloc(), stream());
        const int64_t nope = c.d_qk - 64;
        const Pair vsrc = random_pair(rng, {tk, c.n_heads, c.mla_layout ? nope + c.d_v : c.d_v}, DType::kBF16, false,
                                      alloc(), stream());
        const TensorView vd = c.mla_layout ? vsrc.dv.slice(2, nope, nope + c.d_v) : vsrc.dv;
        const TensorView vh = c.mla_layout ? vsrc.hv.slice(2, nope, nope + c.d_v) : vsrc.hv;
        const Quantized q8 = quantize_both(c.name + " q", q.dv, q.hv);
        const Quantized k8 = quantize_both(c.name + " k", k.dv, k.hv);
        const Quantized v8 = quantize_both(c.name + " v", vd, vh);

        const Tensor cu_q_d = dev_i32(cu_q, alloc(), stream()), cu_k_d = dev_i32(cu_k, alloc(), stream());
        const Tensor qp_d = dev_i32(qp, alloc(), stream()), kp_d = dev_i32(kp, alloc(), stream());
        Tensor out_d = dev_empty({tq, c.n_heads, c.d_v}, DType::kF8E4M3);
        Tensor lse_d = dev_empty({tq, c.n_heads}, DType::kF32);
        Tensor od_d = dev_empty({1}, DType::kF32);
        const float scale = 2.0f / std::sqrt(static_cast<float>(c.d_qk));
        kernels::AttentionParams dp{.out = out_d,
                                    .lse = c.with_lse ? lse_d.view() : TensorView{},
                                    .q = q8.dev,
                                    .k = k8.dev,
                                    .v = v8.dev,
                                    .cu_seqlens_q = cu_q_d,
                                    .cu_seqlens_k = cu_k_d,
                                    .q_pos0 = qp_d,
                                    .k_pos0 = kp_d,
                                    .scale = scale,
                                    .causal = true,
                                    .max_seqlen_q = max_q,
                                    .max_seqlen_k = max_k,
                                    .mask_kind = kernels::AttentionMaskKind::kCausalBottomRight,
                                    .equal_lengths = c.equal_lengths,
                                    .q_descale = q8.dev_scale,
                                    .k_descale = k8.dev_scale,
                                    .v_descale = v8.dev_scale,
                                    .out_descale = od_d};
        // Which path: cuDNN's FP8 SDPA takes the call exactly when expected (it needs out_descale and 1 / it on the
        // device first, as cuda::attention prepares them).
        if (cuda::attention_cudnn_built()) {
            const float od = v8.host_scale.ptr<float>()[0] * kernels::kFp8AttnOutHeadroom;
            const Tensor od_h = Tensor::from_f32({2}, std::vector<float>{od, 1.0f / od});
            const Tensor od_pair = cuda::to_device(od_h, alloc(), stream());
            kernels::AttentionParams probe = dp;
            probe.out_descale = od_pair.view().slice(0, 0, 1);
            const bool taken = cuda::attention_cudnn(probe, raw_stream(), od_pair.ptr<float>() + 1);
            EXPECT_EQ(taken, c.want_cudnn) << "cuDNN FP8 path";
            std::printf("[conf] attention_fp8 | %s | cudnn %s\n", c.name.c_str(), taken ? "taken" : "declined");
        }
        cuda::fill_bytes_async(out_d, 0xff, stream());
        cuda::attention(dp, raw_stream());

        Tensor out_h = Tensor::empty({tq, c.n_heads, c.d_v}, DType::kF8E4M3);
        Tensor lse_h = Tensor::empty({tq, c.n_heads}, DType::kF32);
        Tensor od_h = Tensor::empty({1}, DType::kF32);
        ref::attention(host_twin(dp, host_meta(m), q8, k8, v8, out_h, c.with_lse ? lse_h.view() : TensorView{}, od_h),
                       nullptr);

        conf_exact("attention_fp8", c.name + " out_descale", std::vector<float>{scalar_of(od_d, stream())},
                   std::vector<float>{od_h.ptr<float>()[0]});
        auto widened = [&](const Tensor& o8_host, float descale) {
            std::vector<float> f(static_cast<size_t>(o8_host.numel()));
            for (size_t i = 0; i < f.size(); ++i) f[i] = e4m3_to_float(o8_host.ptr<uint8_t>()[i]) * descale;
            return f;
        };
        const float od = od_h.ptr<float>()[0];
        const std::vector<float> got = widened(cuda::to_host(out_d, stream()), od), want = widened(out_h, od);
        conf_close("attention_fp8", c.name + " out", got, want, kFp8Attn, {tq, c.n_heads, c.d_v});
        // The output's relative RMS error against the reference: FP8 accuracy, a few percent at most.
        double err = 0.0, ref_sq = 0.0;
        for (size_t i = 0; i < got.size(); ++i) {
            err += (got[i] - want[i]) * (got[i] - want[i]);
            ref_sq += want[i] * want[i];
        }
        const double rel = std::sqrt(err / std::max(ref_sq, 1e-30));
        std::printf("[conf] attention_fp8 | %s out relative RMS | %.4f | < 0.05 | %s\n", c.name.c_str(), rel,
                    rel < 0.05 ? "PASS" : "FAIL");
        EXPECT_LT(rel, 0.05);
        if (c.with_lse) {
            conf_close("attention_fp8", c.name + " lse", read_f32(cuda::to_host(lse_d, stream())), read_f32(lse_h),
                       Tolerance{.atol = 5e-2, .rtol = 1e-2}, {tq, c.n_heads});
        }
        if (HasFatalFailure()) return;
    }
}

// Penstock's FP8 wgmma kernel (attention_fp8_wgmma.h) through cuda::attention, which tries it first: bf16 and e4m3
// out, with and without lse, against the reference on the same e4m3 bytes and descales. The cases cover what the kernel
// promises beyond cuDNN's FP8 SDPA: key prefixes (len_k > len_q, bottom-right diagonal), rows before the diagonal
// (len_k < len_q: out 0, lse -inf), no mask (kAllVisible), GQA, every (d_qk, d_v) it takes, ragged batches whose
// sequences end mid-tile, several 128-key tiles per row (the online softmax's rescaling), and the MLA v slice.
TEST_F(Fp8AttentionTest, WgmmaKernelMatchesReference) {
    struct C {
        std::string name;
        int64_t heads, kv_heads, d_qk, d_v;
        std::vector<Seq> seqs;
        bool mla_layout;
        kernels::AttentionMaskKind mask;
    };
    using kernels::AttentionMaskKind;
    const std::vector<C> cases = {
        {"one_seq_mla", 16, 16, 192, 128, {{300, 300, 0, 0}}, true, AttentionMaskKind::kCausalBottomRight},
        {"ragged_equal",
         8,
         8,
         192,
         128,
         {{1, 1, 0, 0}, {17, 17, 0, 0}, {128, 128, 0, 0}, {130, 130, 0, 0}, {257, 257, 0, 0}},
         false,
         AttentionMaskKind::kCausalBottomRight},
        {"prefix",
         8,
         8,
         192,
         128,
         {{17, 40, 23, 0}, {65, 65, 0, 0}, {200, 1000, 800, 0}},
         true,
         AttentionMaskKind::kCausalBottomRight},
        {"rows_before_diagonal",
         4,
         4,
         192,
         128,
         {{300, 144, 100, 256}, {17, 17, 0, 0}},
         false,
         AttentionMaskKind::kCausalBottomRight},
        {"all_visible", 4, 4, 128, 128, {{100, 333, 0, 0}, {5, 1, 0, 0}}, false, AttentionMaskKind::kAllVisible},
        {"gqa_d128",
         16,
         2,
         128,
         128,
         {{129, 129, 0, 0}, {260, 260, 0, 0}},
         false,
         AttentionMaskKind::kCausalBottomRight},
        {"d64", 4, 4, 64, 64, {{100, 100, 0, 0}, {3, 70, 67, 0}}, false, AttentionMaskKind::kCausalBottomRight},
        {"d256_v128", 4, 2, 256, 128, {{190, 190, 0, 0}}, false, AttentionMaskKind::kCausalBottomRight},
        {"long_1500", 4, 4, 192, 128, {{1500, 1500, 0, 0}}, true, AttentionMaskKind::kCausalBottomRight},
        // The persistent kernel's work items: sequences without query rows (or without anything) between others,
        // and more sequences than the kernel's item prefix takes (the dense grid of items, most past their
        // sequence, skipped by the producer).
        {"empty_q_seqs",
         4,
         4,
         192,
         128,
         {{0, 5, 5, 0}, {130, 130, 0, 0}, {0, 0, 0, 0}, {40, 90, 50, 0}, {0, 7, 7, 0}},
         false,
         AttentionMaskKind::kCausalBottomRight},
        {"many_seqs_dense", 2, 2, 128, 128, many_short_seqs(1030, 300), false, AttentionMaskKind::kCausalBottomRight},
    };
    uint32_t seed = 3400;
    for (const C& c : cases) {
        for (const DType out_dt : {DType::kBF16, DType::kF8E4M3}) {
            for (const bool with_lse : {true, false}) {
                // The e4m3-out runs take the kernel's other schedule (PENSTOCK_FP8_ATTN_PINGPONG) and q from shared
                // memory (PENSTOCK_FP8_ATTN_QREGS=0), the bf16 ones the defaults. The four runs of a case split the
                // softmax's exponentials between the special-function unit and the FMA pipes in each way the kernel
                // offers (PENSTOCK_FP8_ATTN_EXP_FMA: the default 6, 0, 4 and 8 of 16 column blocks on the FMA pipes).
                const bool other = out_dt == DType::kF8E4M3;
                if (other) {
                    setenv("PENSTOCK_FP8_ATTN_PINGPONG", "1", /*overwrite=*/1);
                    setenv("PENSTOCK_FP8_ATTN_QREGS", "0", /*overwrite=*/1);
                }
                const char* exp_fma = other ? (with_lse ? "4" : "8") : (with_lse ? nullptr : "0");
                if (exp_fma != nullptr) setenv("PENSTOCK_FP8_ATTN_EXP_FMA", exp_fma, /*overwrite=*/1);
                const std::string name = c.name + (out_dt == DType::kBF16 ? " bf16" : " e4m3 pingpong q_smem") +
                                         (with_lse ? "" : " no_lse") + " exp_fma " + (exp_fma ? exp_fma : "default") +
                                         ((out_dt == DType::kBF16) != with_lse ? " per_row_scales" : "");
                SCOPED_TRACE(name);
                PENSTOCK_SEEDED(seed);
                std::mt19937 rng(seed++);
                const SeqMeta m = meta_of(c.seqs);
                const int64_t tq = m.cu_q.back(), tk = m.cu_k.back();
                const Pair q = random_pair(rng, {tq, c.heads, c.d_qk}, DType::kBF16, false, alloc(), stream());
                const Pair k = random_pair(rng, {tk, c.kv_heads, c.d_qk}, DType::kBF16, false, alloc(), stream());
                const int64_t nope = c.d_qk - 64;
                const Pair vsrc = random_pair(rng, {tk, c.kv_heads, c.mla_layout ? nope + c.d_v : c.d_v}, DType::kBF16,
                                              false, alloc(), stream());
                const TensorView vd = c.mla_layout ? vsrc.dv.slice(2, nope, nope + c.d_v) : vsrc.dv;
                const TensorView vh = c.mla_layout ? vsrc.hv.slice(2, nope, nope + c.d_v) : vsrc.hv;
                // Half of the runs (bf16 out without lse, e4m3 out with it) take q's descales per row and k's per
                // 128-key block (fp8_quantize_heads, k as two column pieces when d_qk > 64), the others per tensor.
                const bool per_row = (out_dt == DType::kBF16) != with_lse;
                const int64_t kn = c.d_qk > 64 ? c.d_qk - 64 : c.d_qk;
                auto cols = [](const TensorView& x, int64_t c0, int64_t c1) {
                    return c0 < c1 ? x.slice(2, c0, c1) : TensorView{};
                };
                const Quantized q8 =
                    per_row ? quantize_heads_both(name + " q", q.dv, q.hv, TensorView{}, TensorView{}, {}, 1)
                            : quantize_both(name + " q", q.dv, q.hv);
                const Quantized k8 = per_row
                                         ? quantize_heads_both(name + " k", k.dv.slice(2, 0, kn), k.hv.slice(2, 0, kn),
                                                               cols(k.dv, kn, c.d_qk), cols(k.hv, kn, c.d_qk), m.cu_k,
                                                               kernels::kFp8AttnKeyBlock)
                                         : quantize_both(name + " k", k.dv, k.hv);
                const Quantized v8 = quantize_both(name + " v", vd, vh);
                const Tensor cu_q_d = dev_i32(m.cu_q, alloc(), stream()), cu_k_d = dev_i32(m.cu_k, alloc(), stream());
                const Tensor qp_d = dev_i32(m.qp, alloc(), stream()), kp_d = dev_i32(m.kp, alloc(), stream());
                Tensor out_d = dev_empty({tq, c.heads, c.d_v}, out_dt);
                Tensor lse_d = dev_empty({tq, c.heads}, DType::kF32);
                Tensor od_d = dev_empty({1}, DType::kF32);
                const bool causal = c.mask == AttentionMaskKind::kCausalBottomRight;
                kernels::AttentionParams dp{.out = out_d,
                                            .lse = with_lse ? lse_d.view() : TensorView{},
                                            .q = q8.dev,
                                            .k = k8.dev,
                                            .v = v8.dev,
                                            .cu_seqlens_q = cu_q_d,
                                            .cu_seqlens_k = cu_k_d,
                                            .q_pos0 = qp_d,
                                            .k_pos0 = kp_d,
                                            .scale = 3.0f / std::sqrt(static_cast<float>(c.d_qk)),
                                            .causal = causal,
                                            .max_seqlen_q = m.max_q,
                                            .max_seqlen_k = m.max_k,
                                            .mask_kind = c.mask,
                                            .q_descale = q8.dev_scale,
                                            .k_descale = k8.dev_scale,
                                            .v_descale = v8.dev_scale,
                                            .out_descale = out_dt == DType::kF8E4M3 ? od_d.view() : TensorView{},
                                            .k_descale_block = per_row ? kernels::kFp8AttnKeyBlock : 0};
                const bool covered = cuda::attention_fp8_wgmma_covers(dp);
                EXPECT_TRUE(covered) << "the FP8 wgmma kernel declined";
                std::printf("[conf] attention_fp8_wgmma | %s | %s\n", name.c_str(), covered ? "taken" : "declined");
                cuda::fill_bytes_async(out_d, 0xff, stream());
                cuda::fill_bytes_async(lse_d, 0xff, stream());
                cuda::attention(dp, raw_stream());
                unsetenv("PENSTOCK_FP8_ATTN_PINGPONG");
                unsetenv("PENSTOCK_FP8_ATTN_QREGS");
                unsetenv("PENSTOCK_FP8_ATTN_EXP_FMA");

                // (the reference writes f32 or e4m3)
                Tensor out_h = Tensor::empty({tq, c.heads, c.d_v}, out_dt == DType::kF8E4M3 ? out_dt : DType::kF32);
                Tensor lse_h = Tensor::empty({tq, c.heads}, DType::kF32);
                Tensor od_h = Tensor::empty({1}, DType::kF32);
                ref::attention(host_twin(dp, host_meta(m), q8, k8, v8, out_h, with_lse ? lse_h.view() : TensorView{},
                                         out_dt == DType::kF8E4M3 ? od_h.view() : TensorView{}),
                               nullptr);

                std::vector<float> got, want;
                const Tensor got_h = cuda::to_host(out_d, stream());
                if (out_dt == DType::kF8E4M3) {
                    conf_exact("attention_fp8_wgmma", name + " out_descale",
                               std::vector<float>{scalar_of(od_d, stream())}, std::vector<float>{od_h.ptr<float>()[0]});
                    const float od = od_h.ptr<float>()[0];
                    for (int64_t i = 0; i < got_h.numel(); ++i) {
                        got.push_back(e4m3_to_float(got_h.ptr<uint8_t>()[i]) * od);
                        want.push_back(e4m3_to_float(out_h.ptr<uint8_t>()[i]) * od);
                    }
                } else {
                    got = read_f32(to_f32(got_h));
                    want = read_f32(out_h);
                }
                conf_close("attention_fp8_wgmma", name + " out", got, want, kFp8Attn, {tq, c.heads, c.d_v});
                double err = 0.0, ref_sq = 0.0;
                for (size_t i = 0; i < got.size(); ++i) {
                    err += (got[i] - want[i]) * (got[i] - want[i]);
                    ref_sq += want[i] * want[i];
                }
                const double rel = std::sqrt(err / std::max(ref_sq, 1e-30));
                std::printf("[conf] attention_fp8_wgmma | %s out relative RMS | %.4f | < 0.05 | %s\n", name.c_str(),
                            rel, rel < 0.05 ? "PASS" : "FAIL");
                EXPECT_LT(rel, 0.05);
                if (with_lse) {
                    conf_close("attention_fp8_wgmma", name + " lse", read_f32(cuda::to_host(lse_d, stream())),
                               read_f32(lse_h), Tolerance{.atol = 5e-2, .rtol = 1e-2}, {tq, c.heads});
                }
                if (HasFatalFailure()) return;
            }
        }
    }
}

// FP8 q / k / v with an f32 out: no FP8 kernel takes it (the wgmma kernel writes bf16 or e4m3, cuDNN e4m3), so the
// fallback widens the inputs to f32 and runs the f32 attention: the reference's result to f32 accuracy. Per-tensor
// descales, then per-row q and k descales with k's in blocks of 2 keys and no k_descale_block promise (which the FP8
// kernel declines even for a bf16 out).
TEST_F(Fp8AttentionTest, F32OutFallbackMatchesReference) {
    for (const bool per_row : {false, true}) {
        SCOPED_TRACE(per_row ? "per-row descales" : "per-tensor descales");
        const uint32_t kSeed = per_row ? 3501 : 3500;
        PENSTOCK_SEEDED(kSeed);
        std::mt19937 rng(kSeed);
        const std::vector<Seq> seqs = {{70, 70, 0, 0}, {20, 45, 25, 0}};
        const SeqMeta m = meta_of(seqs);
        const int64_t tq = m.cu_q.back(), tk = m.cu_k.back(), h = 4, d = 64;
        const Pair q = random_pair(rng, {tq, h, d}, DType::kBF16, false, alloc(), stream());
        const Pair k = random_pair(rng, {tk, h, d}, DType::kBF16, false, alloc(), stream());
        const Pair v = random_pair(rng, {tk, h, d}, DType::kBF16, false, alloc(), stream());
        const std::string tag = per_row ? "f32_out_per_row" : "f32_out";
        const Quantized q8 = per_row ? quantize_heads_both(tag + " q", q.dv, q.hv, TensorView{}, TensorView{}, {}, 1)
                                     : quantize_both(tag + " q", q.dv, q.hv);
        const Quantized k8 = per_row
                                 ? quantize_heads_both(tag + " k", k.dv, k.hv, TensorView{}, TensorView{}, m.cu_k, 2)
                                 : quantize_both(tag + " k", k.dv, k.hv);
        const Quantized v8 = quantize_both(tag + " v", v.dv, v.hv);
        const Tensor cu_q_d = dev_i32(m.cu_q, alloc(), stream()), cu_k_d = dev_i32(m.cu_k, alloc(), stream());
        const Tensor qp_d = dev_i32(m.qp, alloc(), stream()), kp_d = dev_i32(m.kp, alloc(), stream());
        const Pair out = poisoned_pair({tq, h, d}, DType::kF32, false, alloc(), stream());
        kernels::AttentionParams dp{.out = out.dv,
                                    .lse = TensorView{},
                                    .q = q8.dev,
                                    .k = k8.dev,
                                    .v = v8.dev,
                                    .cu_seqlens_q = cu_q_d,
                                    .cu_seqlens_k = cu_k_d,
                                    .q_pos0 = qp_d,
                                    .k_pos0 = kp_d,
                                    .scale = 0.2f,
                                    .causal = true,
                                    .max_seqlen_q = m.max_q,
                                    .max_seqlen_k = m.max_k,
                                    .mask_kind = kernels::AttentionMaskKind::kCausalBottomRight,
                                    .q_descale = q8.dev_scale,
                                    .k_descale = k8.dev_scale,
                                    .v_descale = v8.dev_scale};
        EXPECT_FALSE(cuda::attention_fp8_wgmma_covers(dp)) << "an f32 out is not the FP8 kernel's";
        if (per_row) {
            kernels::AttentionParams b = dp;
            Tensor ob = dev_empty({tq, h, d}, DType::kBF16);
            b.out = ob;
            EXPECT_FALSE(cuda::attention_fp8_wgmma_covers(b)) << "per-row k descales without the block promise";
        }
        cuda::attention(dp, raw_stream());
        ref::attention(host_twin(dp, host_meta(m), q8, k8, v8, out.hv, TensorView{}, TensorView{}), nullptr);
        conf_pair("attention_fp8", tag + "_fallback out", out, out.hv, kF32Tol, stream());
    }
}

// bf16 attention with no lse wanted (models/mla.cc's one-round MHA call): cuDNN's graph without the Stats output, or
// the kernels with a scratch lse, give the reference's out.
TEST_F(Fp8AttentionTest, Bf16WithoutLseMatchesReference) {
    struct C {
        std::string name;
        std::vector<Seq> seqs;
        bool want_cudnn;
        kernels::AttentionMaskKind mask;
    };
    const std::vector<C> cases = {
        {"one_seq", {{300, 300, 0, 0}}, true, kernels::AttentionMaskKind::kCausalBottomRight},
        {"ragged_prefix", {{17, 40, 23, 0}, {65, 65, 0, 0}}, true, kernels::AttentionMaskKind::kCausalBottomRight},
        // a key piece [256, 400) of a chunk at [100, 400): rows before position 256 see no key (out 0, no lse write)
        {"ragged_empty_rows",
         {{300, 144, 100, 256}, {17, 17, 0, 0}},
         true,
         kernels::AttentionMaskKind::kCausalBottomRight},
        {"no_promise_kernel", {{33, 33, 0, 0}}, false, kernels::AttentionMaskKind::kGeneral},
    };
    uint32_t seed = 3300;
    for (const C& c : cases) {
        SCOPED_TRACE(c.name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const SeqMeta m = meta_of(c.seqs);
        const std::vector<int32_t>&cu_q = m.cu_q, &cu_k = m.cu_k, &qp = m.qp, &kp = m.kp;
        const int32_t max_q = m.max_q, max_k = m.max_k;
        const int64_t tq = cu_q.back(), tk = cu_k.back();
        const Pair q = random_pair(rng, {tq, 16, 192}, DType::kBF16, false, alloc(), stream());
        const Pair k = random_pair(rng, {tk, 16, 192}, DType::kBF16, false, alloc(), stream());
        const Pair v = random_pair(rng, {tk, 16, 128}, DType::kBF16, false, alloc(), stream());
        const Pair out = poisoned_pair({tq, 16, 128}, DType::kBF16, false, alloc(), stream());
        const Tensor cu_q_d = dev_i32(cu_q, alloc(), stream()), cu_k_d = dev_i32(cu_k, alloc(), stream());
        const Tensor qp_d = dev_i32(qp, alloc(), stream()), kp_d = dev_i32(kp, alloc(), stream());
        kernels::AttentionParams dp{.out = out.dv,
                                    .lse = TensorView{},
                                    .q = q.dv,
                                    .k = k.dv,
                                    .v = v.dv,
                                    .cu_seqlens_q = cu_q_d,
                                    .cu_seqlens_k = cu_k_d,
                                    .q_pos0 = qp_d,
                                    .k_pos0 = kp_d,
                                    .scale = 0.1f,
                                    .causal = true,
                                    .max_seqlen_q = max_q,
                                    .max_seqlen_k = max_k,
                                    .mask_kind = c.mask};
        if (cuda::attention_cudnn_built()) {
            EXPECT_EQ(cuda::attention_cudnn(dp, raw_stream()), c.want_cudnn) << "cuDNN path without lse";
        }
        cuda::attention(dp, raw_stream());
        const Tensor cu_q_h = i32_tensor(cu_q), cu_k_h = i32_tensor(cu_k), qp_h = i32_tensor(qp), kp_h = i32_tensor(kp);
        kernels::AttentionParams hp = dp;
        hp.out = out.hv;
        hp.q = q.hv;
        hp.k = k.hv;
        hp.v = v.hv;
        hp.cu_seqlens_q = cu_q_h;
        hp.cu_seqlens_k = cu_k_h;
        hp.q_pos0 = qp_h;
        hp.k_pos0 = kp_h;
        ref::attention(hp, nullptr);
        conf_pair("attention_no_lse", c.name + " out", out, out.hv, kBF16Tol, stream());
    }
}

// out_scale (kernels/ops.h): the FP8 kernel's per-row-and-head e4m3 epilogue against the same kernel's bf16 out
// followed by fp8_act_quant, bit for bit (bytes, scales in the transposed layout the FP8 GEMMs read, lse); then the
// composed paths (PENSTOCK_FP8_ATTENTION_KERNEL=cudnn: cuDNN's FP8 SDPA or the fallback, then fp8_act_quant; and
// out_scale_from f32: the f32 fallback) against the same compositions written out, and the reference's values to FP8
// accuracy. Cases: MLA's 192 / 128 with
// 16 heads, ragged sequences, rows before the diagonal (no key: the 1e-4 floor), GQA at d 128 and d_qk 256;
// q / k descales per row (k per 128-key block) on every other case.
TEST_F(Fp8AttentionTest, RowBlockOutIsActQuantOfTheResult) {
    struct C {
        std::string name;
        int64_t heads, kv_heads, d_qk;
        std::vector<Seq> seqs;
    };
    const std::vector<C> cases = {
        {"mla_16_heads", 16, 16, 192, {{300, 300, 0, 0}}},
        {"ragged", 8, 8, 192, {{1, 1, 0, 0}, {17, 17, 0, 0}, {130, 130, 0, 0}, {257, 257, 0, 0}}},
        {"rows_before_diagonal", 4, 4, 192, {{300, 144, 100, 256}, {17, 17, 0, 0}}},
        {"gqa_d128", 12, 2, 128, {{129, 129, 0, 0}, {60, 60, 0, 0}}},
        {"d256", 4, 2, 256, {{190, 190, 0, 0}}},
    };
    uint32_t seed = 3600;
    int index = 0;
    for (const C& c : cases) {
        for (const bool with_lse : {true, false}) {
            const bool per_row = (index++ % 2) == 0;
            const std::string name = c.name + (with_lse ? "" : " no_lse") + (per_row ? " per_row_scales" : "");
            SCOPED_TRACE(name);
            PENSTOCK_SEEDED(seed);
            std::mt19937 rng(seed++);
            const SeqMeta m = meta_of(c.seqs);
            const int64_t tq = m.cu_q.back(), tk = m.cu_k.back(), h = c.heads, kn = c.d_qk - 64;
            const Pair q = random_pair(rng, {tq, h, c.d_qk}, DType::kBF16, false, alloc(), stream());
            const Pair k = random_pair(rng, {tk, c.kv_heads, c.d_qk}, DType::kBF16, false, alloc(), stream());
            const Pair v = random_pair(rng, {tk, c.kv_heads, 128}, DType::kBF16, false, alloc(), stream());
            const Quantized q8 = per_row ? quantize_heads_both(name + " q", q.dv, q.hv, {}, {}, {}, 1)
                                         : quantize_both(name + " q", q.dv, q.hv);
            const Quantized k8 = per_row ? quantize_heads_both(name + " k", k.dv.slice(2, 0, kn), k.hv.slice(2, 0, kn),
                                                               k.dv.slice(2, kn, c.d_qk), k.hv.slice(2, kn, c.d_qk),
                                                               m.cu_k, kernels::kFp8AttnKeyBlock)
                                         : quantize_both(name + " k", k.dv, k.hv);
            const Quantized v8 = quantize_both(name + " v", v.dv, v.hv);
            const Tensor cu_q_d = dev_i32(m.cu_q, alloc(), stream()), cu_k_d = dev_i32(m.cu_k, alloc(), stream());
            const Tensor qp_d = dev_i32(m.qp, alloc(), stream()), kp_d = dev_i32(m.kp, alloc(), stream());
            Tensor lse_bf = dev_empty({tq, h}, DType::kF32);
            const kernels::AttentionParams base{.out = TensorView{},
                                                .lse = with_lse ? lse_bf.view() : TensorView{},
                                                .q = q8.dev,
                                                .k = k8.dev,
                                                .v = v8.dev,
                                                .cu_seqlens_q = cu_q_d,
                                                .cu_seqlens_k = cu_k_d,
                                                .q_pos0 = qp_d,
                                                .k_pos0 = kp_d,
                                                .scale = 3.0f / std::sqrt(static_cast<float>(c.d_qk)),
                                                .causal = true,
                                                .max_seqlen_q = m.max_q,
                                                .max_seqlen_k = m.max_k,
                                                .mask_kind = kernels::AttentionMaskKind::kCausalBottomRight,
                                                .q_descale = q8.dev_scale,
                                                .k_descale = k8.dev_scale,
                                                .v_descale = v8.dev_scale,
                                                .k_descale_block = per_row ? kernels::kFp8AttnKeyBlock : 0};
            // (composed: the bf16 attention, then fp8_act_quant of its rows into scales [tq, h] with strides {1, tq})
            struct Out {
                std::vector<uint8_t> bytes;
                std::vector<float> scales, lse;
            };
            auto read = [&](const Tensor& o8, const Tensor& scale_store, const Tensor& lse) {
                Out r{bytes_of(cuda::to_host(o8, stream())), read_f32(cuda::to_host(scale_store, stream())), {}};
                if (with_lse) r.lse = read_f32(cuda::to_host(lse, stream()));
                return r;
            };
            auto composed = [&](DType from) {
                Tensor o = dev_empty({tq, h, 128}, from);
                cuda::fill_bytes_async(o, 0xff, stream());
                cuda::fill_bytes_async(lse_bf, 0xff, stream());
                kernels::AttentionParams b = base;
                b.out = o;
                cuda::attention(b, raw_stream());
                Tensor o8 = dev_empty({tq, h * 128}, DType::kF8E4M3), ss = dev_empty({h * tq}, DType::kF32);
                cuda::fp8_act_quant({.out = o8,
                                     .scale = ss.view().as_strided(0, {tq, h}, {1, tq}),
                                     .in = o.view().reshape({tq, h * 128})},
                                    raw_stream());
                return read(o8, ss, lse_bf);
            };
            auto fused = [&](DType from, bool expect_kernel) {
                Tensor o8 = dev_empty({tq, h, 128}, DType::kF8E4M3), ss = dev_empty({h * tq}, DType::kF32);
                Tensor lse = dev_empty({tq, h}, DType::kF32);
                cuda::fill_bytes_async(o8, 0xff, stream());
                cuda::fill_bytes_async(ss, 0xff, stream());
                cuda::fill_bytes_async(lse, 0xff, stream());
                kernels::AttentionParams f = base;
                f.out = o8;
                f.lse = with_lse ? lse.view() : TensorView{};
                f.out_scale = ss.view().as_strided(0, {tq, h}, {1, tq});
                f.out_scale_from = from;
                EXPECT_EQ(cuda::attention_fp8_wgmma_covers(f), expect_kernel);
                cuda::attention(f, raw_stream());
                return read(o8, ss, lse);
            };
            // bf16 through the kernel's epilogue, bf16 composed (the kernel switched off), f32 (always composed: the
            // f32 attention is the fallback's)
            for (const int variant : {0, 1, 2}) {
                const bool kernel = variant == 0;
                const DType from = variant == 2 ? DType::kF32 : DType::kBF16;
                if (variant == 1) setenv("PENSTOCK_FP8_ATTENTION_KERNEL", "cudnn", /*overwrite=*/1);
                const std::string path = variant == 0   ? " [bf16, FP8 kernel epilogue]"
                                         : variant == 1 ? " [bf16, composed]"
                                                        : " [f32, composed]";
                const Out want = composed(from);
                const Out got = fused(from, kernel);
                unsetenv("PENSTOCK_FP8_ATTENTION_KERNEL");
                conf_exact("attention_fp8_out_scale", name + path + " bytes", got.bytes, want.bytes);
                conf_exact("attention_fp8_out_scale", name + path + " scales", got.scales, want.scales);
                if (with_lse) conf_exact("attention_fp8_out_scale", name + path + " lse", got.lse, want.lse);
                // and the values against the reference's f32 result, to FP8 accuracy
                Tensor ref_out = Tensor::empty({tq, h, 128}, DType::kF32);
                ref::attention(host_twin(base, host_meta(m), q8, k8, v8, ref_out, TensorView{}, TensorView{}), nullptr);
                std::vector<float> deq(got.bytes.size());
                for (size_t i = 0; i < deq.size(); ++i) {
                    const size_t row = i / static_cast<size_t>(h * 128), head = (i / 128) % static_cast<size_t>(h);
                    deq[i] = e4m3_to_float(got.bytes[i]) * got.scales[head * static_cast<size_t>(tq) + row];
                }
                conf_close("attention_fp8_out_scale", name + path + " values", deq, read_f32(ref_out), kFp8Attn,
                           {tq, h, 128});
                if (HasFatalFailure()) return;
            }
        }
    }
}

}  // namespace
}  // namespace penstock::test
