// The bf16 paths of the memory-bound K3 ops on the GPU (rows_vec.cuh kernels) against the CPU reference run in bf16
// on the same bf16 inputs (kBF16OneUlp: both round once) and in f32 on the widened inputs (kBF16Tol):
//  - situ_mul (both bf16 arithmetic variants, cuda::SituMath) and silu_mul in place on gate, gate and up the two halves
//  of one [rows, 2P] GEMM output, P = I (up
//    aligned for 16-byte access only when I % 8 == 0) or I rounded up to 8 (vector path with a partial last chunk):
//    I = 1, 3, 8, 2048, 2059, 3072 at 1 to 999 rows; the up half and the padding must come back bit-identical.
//  - sigmoid_gate: bf16 in / out, gate f32 or bf16, in place and not, every row shape of kda_op_test plus aligned
//    widths 2056 and 12288 (vector path) and a width-2051 view of 2056-wide rows (vector path with a tail).
//  - gated_rms_norm: f32 in / gate, bf16 out (1 to 1001 rows of 1 / 128 / 129, strided).
//  - attn_res_mix: bf16 partial / out, bank bf16 or f32, 0 to 16 bank rows, hidden 256 / 1000 / 2048 / 7168 / 9000 /
//    16384, 7171 (scalar path) and 7171 in 7176-wide rows (vector path with a tail), strided views, in place, up to
//    2000 tokens (the warp-specialised kernel's ring of row slots cycled many times; kBF16OneUlpF32Sums).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_ops_kda.h"
#include "kernels/ops.h"
#include "kernels/ops_kda.h"
#include "tests/kernels/cuda/conformance_log.h"
#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {
namespace {

std::string dims(const std::string& base, const std::vector<int64_t>& d) {
    std::string s = base;
    for (int64_t x : d) s.append("_").append(std::to_string(x));
    return s;
}

// The Pair's host staging copy (its dtype, the device's layout) viewed as the Pair's view: what the bf16 reference
// reads and writes. Call after the stream has synchronised (the upload reads the staging copy).
TensorView staged(const Pair& p) {
    const int64_t offset =
        (static_cast<const char*>(p.hv.data) - static_cast<const char*>(p.host.view().data)) / sizeof(float);
    TensorView v = p.hv;
    v.dtype = p.dtype;
    v.data = static_cast<char*>(p.staging.view().data) + offset * static_cast<int64_t>(dtype_bytes(p.dtype, 1));
    return v;
}

// Every backing element of a device tensor / a host tensor as f32.
std::vector<float> device_backing(const Tensor& dev, const cuda::Stream& stream) {
    const Tensor f = to_f32(cuda::to_host(dev, stream));
    return std::vector<float>(f.ptr<float>(), f.ptr<float>() + f.numel());
}

std::vector<float> host_backing(const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = element_f32(t.view().data, t.dtype(), i);
    return v;
}

// The elements of view `v` of a tensor whose whole backing (`base`, row major) is `backing`.
std::vector<float> view_of(const std::vector<float>& backing, const TensorView& base, const TensorView& v) {
    std::vector<float> out;
    const int64_t off0 = (static_cast<const char*>(v.data) - static_cast<const char*>(base.data)) /
                         static_cast<int64_t>(dtype_bytes(v.dtype, 1));
    for_each_index(v.shape_vec(), [&](const std::vector<int64_t>& idx) {
        out.push_back(backing[static_cast<size_t>(off0 + offset_of(v, idx))]);
    });
    return out;
}

// Elements of the backing (`base`) outside view `v` of a poisoned (NaN) output that are no longer NaN.
int64_t touched_outside(const std::vector<float>& backing, const TensorView& base, const TensorView& v) {
    std::vector<char> inside(backing.size(), 0);
    const int64_t off0 = (static_cast<const char*>(v.data) - static_cast<const char*>(base.data)) /
                         static_cast<int64_t>(dtype_bytes(v.dtype, 1));
    for_each_index(v.shape_vec(),
                   [&](const std::vector<int64_t>& idx) { inside[static_cast<size_t>(off0 + offset_of(v, idx))] = 1; });
    int64_t touched = 0;
    for (size_t i = 0; i < backing.size(); ++i) touched += !inside[i] && !std::isnan(backing[i]);
    return touched;
}

class KdaBf16OpTest : public CudaTest {
protected:
    kernels::Context gpu() {
        return {.device = Device::kCUDA, .pool = nullptr, .stream = raw_stream(), .alloc = &alloc()};
    }
    static kernels::Context cpu() { return {}; }
};

// kSitu: situ_mul (the default arithmetic, cuda::kDefaultSituMath); kSituRational / kSituTanhApprox: each variant
// through cuda::situ_mul_variant on the GPU (the reference is the same).
enum class Glu { kSitu, kSituRational, kSituTanhApprox, kSilu };

void run_glu(Glu glu, const TensorView& gate, const TensorView& up, const kernels::Context& ctx) {
    const kernels::SituMulParams situ{.out = gate, .gate = gate, .up = up, .beta = 4.0f, .linear_beta = 25.0f};
    switch (glu) {
        case Glu::kSitu:
            kernels::situ_mul(situ, ctx);
            return;
        case Glu::kSituRational:
        case Glu::kSituTanhApprox:
            if (ctx.device == Device::kCPU) {
                kernels::situ_mul(situ, ctx);
            } else {
                cuda::situ_mul_variant(
                    situ, glu == Glu::kSituRational ? cuda::SituMath::kRational : cuda::SituMath::kTanhApprox,
                    ctx.stream);
            }
            return;
        case Glu::kSilu:
            kernels::silu_mul({.out = gate, .gate = gate, .up = up}, ctx);
            return;
    }
}

const char* glu_name(Glu glu) {
    switch (glu) {
        case Glu::kSitu:
            return "situ_mul_bf16";
        case Glu::kSituRational:
            return "situ_mul_bf16_rational";
        case Glu::kSituTanhApprox:
            return "situ_mul_bf16_tanh_approx";
        case Glu::kSilu:
            return "silu_mul_bf16";
    }
    return "";
}

TEST_F(KdaBf16OpTest, GluInPlaceOnFusedGateUpMatchesReference) {
    uint32_t seed = 7100;
    struct Case {
        int64_t rows, inter;
        bool pad;  // halves start at multiples of 8 columns
    };
    for (const Case& c : std::vector<Case>{{1, 1, false},
                                           {7, 3, false},
                                           {7, 3, true},
                                           {3, 8, false},
                                           {65, 2048, false},
                                           {129, 2059, false},
                                           {129, 2059, true},
                                           {999, 3072, false}}) {
        for (const Glu glu : {Glu::kSitu, Glu::kSituRational, Glu::kSituTanhApprox, Glu::kSilu}) {
            const std::string op = glu_name(glu);
            const int64_t half = c.pad ? (c.inter + 7) / 8 * 8 : c.inter;
            const std::string name = dims("rows_I", {c.rows, c.inter}) + (c.pad ? "_padded" : "_fused");
            SCOPED_TRACE(op + " " + name);
            PENSTOCK_SEEDED(seed);
            std::mt19937 rng(seed++);
            const float hi = glu == Glu::kSilu ? 8.0f : 40.0f;
            Pair gu = random_pair(rng, {c.rows, 2 * half}, DType::kBF16, false, alloc(), stream(), -hi, hi);
            stream().synchronize();
            const TensorView sv = staged(gu);
            // f32 reference on the widened values, into its own buffer
            Tensor want32 = Tensor::empty({c.rows, c.inter}, DType::kF32);  // f32 reference on the widened values
            const TensorView g32 = gu.hv.slice(1, 0, c.inter), u32 = gu.hv.slice(1, half, half + c.inter);
            if (glu == Glu::kSilu) {
                kernels::silu_mul({.out = want32, .gate = g32, .up = u32}, cpu());
            } else {
                kernels::situ_mul({.out = want32, .gate = g32, .up = u32, .beta = 4.0f, .linear_beta = 25.0f}, cpu());
            }
            run_glu(glu, gu.dv.slice(1, 0, c.inter), gu.dv.slice(1, half, half + c.inter), gpu());
            run_glu(glu, sv.slice(1, 0, c.inter), sv.slice(1, half, half + c.inter), cpu());
            const std::vector<float> got = device_backing(gu.dev, stream());
            const std::vector<float> ref = host_backing(gu.staging);
            const TensorView gate_v = gu.dv.slice(1, 0, c.inter);
            conf_close(op, name + "_vs_bf16_ref", view_of(got, gu.dev.view(), gate_v),
                       view_of(ref, gu.dev.view(), gate_v), kBF16OneUlp, {c.rows, c.inter});
            conf_close(op, name + "_vs_f32_ref", view_of(got, gu.dev.view(), gate_v), read_f32(want32), kBF16Tol,
                       {c.rows, c.inter});
            // everything right of the gate half (up, padding) is untouched
            const TensorView rest = gu.dv.slice(1, c.inter, 2 * half);
            EXPECT_TRUE(same_bits(view_of(got, gu.dev.view(), rest), view_of(ref, gu.dev.view(), rest)))
                << op << " " << name;
            if (HasFatalFailure()) return;
        }
    }
}

TEST_F(KdaBf16OpTest, SigmoidGateMatchesReference) {
    uint32_t seed = 7200;
    struct Case {
        int64_t rows, dim;
        bool strided;
        int64_t width;  // > dim: a [rows, dim] view of contiguous [rows, width] rows
        DType gate;
        bool in_place;
    };
    const std::vector<Case> cases{
        {1, 1, false, 1, DType::kF32, false},         {1, 128, true, 128, DType::kF32, false},
        {63, 127, false, 127, DType::kF32, true},     {65, 129, false, 129, DType::kBF16, false},
        {128, 3, false, 3, DType::kF32, false},       {129, 2049, true, 2049, DType::kF32, true},
        {129, 2056, false, 2056, DType::kF32, true},  {33, 12288, false, 12288, DType::kBF16, false},
        {17, 12288, false, 12288, DType::kF32, true}, {31, 2051, false, 2056, DType::kF32, false}};
    for (const Case& c : cases) {
        const std::string name = dims("rows_dim", {c.rows, c.dim}) + (c.strided ? "_strided" : "") +
                                 (c.width > c.dim ? "_in_" + std::to_string(c.width) : "") + "_gate_" +
                                 std::string(dtype_name(c.gate)) + (c.in_place ? "_inplace" : "");
        SCOPED_TRACE(name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const Shape shape{c.rows, c.width};
        Pair x = random_pair(rng, shape, DType::kBF16, c.strided, alloc(), stream(), -4.0f, 4.0f);
        const Pair g = random_pair(rng, shape, c.gate, c.strided, alloc(), stream(), -30.0f, 30.0f);
        Pair out = c.in_place ? x : poisoned_pair(shape, DType::kBF16, c.strided, alloc(), stream());
        stream().synchronize();
        auto cut = [&](const TensorView& v) { return v.slice(1, 0, c.dim); };
        Tensor want32 = Tensor::empty({c.rows, c.dim}, DType::kF32);
        kernels::sigmoid_gate({.out = want32, .in = cut(x.hv), .gate = cut(g.hv)}, cpu());
        kernels::sigmoid_gate({.out = cut(out.dv), .in = cut(x.dv), .gate = cut(g.dv)}, gpu());
        kernels::sigmoid_gate({.out = cut(staged(out)), .in = cut(staged(x)), .gate = cut(staged(g))}, cpu());
        const std::vector<float> got = device_backing(out.dev, stream());
        const std::vector<float> ref = host_backing(out.staging);
        conf_close("sigmoid_gate_bf16", name + "_vs_bf16_ref", view_of(got, out.dev.view(), cut(out.dv)),
                   view_of(ref, out.dev.view(), cut(out.dv)), kBF16OneUlp, {c.rows, c.dim});
        conf_close("sigmoid_gate_bf16", name + "_vs_f32_ref", view_of(got, out.dev.view(), cut(out.dv)),
                   read_f32(want32), kBF16Tol, {c.rows, c.dim});
        if (!c.in_place) {
            EXPECT_EQ(touched_outside(got, out.dev.view(), cut(out.dv)), 0) << "elements written outside the view";
        }
        if (HasFatalFailure()) return;
    }
}

// gated_rms_norm from f32 in / gate into a bf16 out (K3 KDA's o_proj input): [n_tokens * heads, 128] rows, a strided
// odd case, against the bf16 reference (one rounding each) and the f32 reference.
TEST_F(KdaBf16OpTest, GatedRmsNormBf16OutMatchesReference) {
    uint32_t seed = 7250;
    for (const auto& [rows, dim, strided] : std::vector<std::tuple<int64_t, int64_t, bool>>{
             {1, 1, false}, {65, 129, true}, {3 * 96, 128, false}, {1001, 128, false}}) {
        const std::string name = dims("rows_dim", {rows, dim}) + (strided ? "_strided" : "");
        SCOPED_TRACE(name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const Pair x = random_pair(rng, {rows, dim}, DType::kF32, strided, alloc(), stream(), -3.0f, 3.0f);
        const Pair g = random_pair(rng, {rows, dim}, DType::kF32, strided, alloc(), stream(), -6.0f, 6.0f);
        const Pair w = random_pair(rng, {dim}, DType::kF32, false, alloc(), stream(), 0.5f, 1.5f);
        Pair out = poisoned_pair({rows, dim}, DType::kBF16, strided, alloc(), stream());
        stream().synchronize();
        Tensor want32 = Tensor::empty({rows, dim}, DType::kF32);
        kernels::gated_rms_norm({.out = want32, .in = x.hv, .gate = g.hv, .weight = w.hv, .eps = 1e-5f}, cpu());
        kernels::gated_rms_norm({.out = out.dv, .in = x.dv, .gate = g.dv, .weight = w.dv, .eps = 1e-5f}, gpu());
        kernels::gated_rms_norm({.out = staged(out), .in = x.hv, .gate = g.hv, .weight = w.hv, .eps = 1e-5f}, cpu());
        const std::vector<float> got = device_backing(out.dev, stream());
        const std::vector<float> ref = host_backing(out.staging);
        conf_close("gated_rms_norm_bf16_out", name + "_vs_bf16_ref", view_of(got, out.dev.view(), out.dv),
                   view_of(ref, out.dev.view(), out.dv), kBF16OneUlp, {rows, dim});
        conf_close("gated_rms_norm_bf16_out", name + "_vs_f32_ref", view_of(got, out.dev.view(), out.dv),
                   read_f32(want32), kBF16Tol, {rows, dim});
        EXPECT_EQ(touched_outside(got, out.dev.view(), out.dv), 0) << "elements written outside the view";
        if (HasFatalFailure()) return;
    }
}

TEST_F(KdaBf16OpTest, AttnResMixMatchesReference) {
    uint32_t seed = 7300;
    struct Case {
        int64_t tokens, blocks, hidden;
        bool strided;
        int64_t width;  // > hidden: views of contiguous width-long rows
        DType bank;
        bool in_place;
    };
    const std::vector<Case> cases{
        {1, 0, 256, false, 256, DType::kBF16, false},
        {17, 1, 7168, false, 7168, DType::kBF16, false},
        {65, 7, 256, true, 256, DType::kBF16, true},
        {3, 7, 7168, false, 7168, DType::kF32, false},
        {64, 3, 1000, false, 1000, DType::kBF16, true},
        {5, 2, 7171, false, 7171, DType::kBF16, false},
        {33, 1, 7171, false, 7176, DType::kBF16, false},
        {9, 3, 7171, false, 7176, DType::kF32, true},
        // the warp-specialised kernel (bf16 bank, hidden % 8 == 0, <= 16 candidates, a ring of row slots in shared
        // memory): K3's widest bank (9 rows of a 14-slot ring: the next token waits for slots), the ring cycled many
        // times in place, strided rows, the most candidates and one more than that (the two-pass kernel), 2 and 4
        // chunks per consumer thread
        {600, 8, 7168, false, 7168, DType::kBF16, false},
        {2000, 1, 7168, false, 7168, DType::kBF16, true},
        {700, 3, 1000, true, 1000, DType::kBF16, false},
        {50, 15, 2048, false, 2048, DType::kBF16, false},
        {50, 16, 2048, false, 2048, DType::kBF16, true},
        {300, 5, 9000, false, 9000, DType::kBF16, false},
        {40, 2, 16384, false, 16384, DType::kBF16, true}};
    for (const Case& c : cases) {
        const std::string name = dims("T_blocks_hidden", {c.tokens, c.blocks, c.hidden}) +
                                 (c.strided ? "_strided" : "") +
                                 (c.width > c.hidden ? "_in_" + std::to_string(c.width) : "") + "_bank_" +
                                 std::string(dtype_name(c.bank)) + (c.in_place ? "_inplace" : "");
        SCOPED_TRACE(name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const Pair bank = random_pair(rng, {c.tokens, c.blocks, c.width}, c.bank, c.strided, alloc(), stream(), -2, 2);
        Pair partial = random_pair(rng, {c.tokens, c.width}, DType::kBF16, c.strided, alloc(), stream(), -2, 2);
        const Pair query = random_pair(rng, {c.hidden}, DType::kF32, false, alloc(), stream(), -0.1f, 0.1f);
        const Pair w = random_pair(rng, {c.hidden}, DType::kF32, false, alloc(), stream(), 0.5f, 1.5f);
        Pair out =
            c.in_place ? partial : poisoned_pair({c.tokens, c.width}, DType::kBF16, c.strided, alloc(), stream());
        stream().synchronize();
        auto rows = [&](const TensorView& v) { return v.slice(1, 0, c.hidden); };
        auto bank_rows = [&](const TensorView& v) { return v.slice(2, 0, c.hidden); };
        Tensor want32 = Tensor::empty({c.tokens, c.hidden}, DType::kF32);
        kernels::attn_res_mix({.out = want32,
                               .bank = bank_rows(bank.hv),
                               .partial = rows(partial.hv),
                               .query = query.hv,
                               .norm_weight = w.hv,
                               .eps = 1e-5f},
                              cpu());
        kernels::attn_res_mix({.out = rows(out.dv),
                               .bank = bank_rows(bank.dv),
                               .partial = rows(partial.dv),
                               .query = query.dv,
                               .norm_weight = w.dv,
                               .eps = 1e-5f},
                              gpu());
        kernels::attn_res_mix({.out = rows(staged(out)),
                               .bank = bank_rows(staged(bank)),
                               .partial = rows(staged(partial)),
                               .query = query.hv,
                               .norm_weight = w.hv,
                               .eps = 1e-5f},
                              cpu());
        const std::vector<float> got = device_backing(out.dev, stream());
        const std::vector<float> ref = host_backing(out.staging);
        conf_close("attn_res_mix_bf16", name + "_vs_bf16_ref", view_of(got, out.dev.view(), rows(out.dv)),
                   view_of(ref, out.dev.view(), rows(out.dv)), kBF16OneUlpF32Sums, {c.tokens, c.hidden});
        conf_close("attn_res_mix_bf16", name + "_vs_f32_ref", view_of(got, out.dev.view(), rows(out.dv)),
                   read_f32(want32), kBF16Tol, {c.tokens, c.hidden});
        if (!c.in_place) {
            EXPECT_EQ(touched_outside(got, out.dev.view(), rows(out.dv)), 0) << "elements written outside the view";
        }
        if (HasFatalFailure()) return;
    }
}

}  // namespace
}  // namespace penstock::test
