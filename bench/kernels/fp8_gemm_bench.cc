// Block-scaled FP8 GEMMs at DeepSeek-V3's real dims (penstock_bench_kernels --only fp8), beside the bf16 path of the
// same shapes in the same run; tools/fp8_gemm_baseline.py times torch on the same shapes (and the same expert
// offsets: PENSTOCK_FP8_OFFSETS_DIR=dir writes dir/dsv3_<T>.txt).
//  - fp8_act_quant: bf16 [T, k] -> e4m3 + scales (transposed layout), GB/s against the copy ceiling.
//  - fp8_gemm, dense projections (q_a 7168->1536, kv_a 7168->576, q_b 1536->24576, kv_b 512->32768, o 16384->7168,
//    shared expert gate_up 7168->4096 / down 2048->7168) at T = 4096 and 16384: variants cublaslt, wgmma and
//    wgmma_tma, and bf16 cuda::gemm (cuBLASLt) on the same shapes.
//  - fp8_grouped_gemm, DeepSeek-V3 experts (256, top-8: gate_up 7168->4096, down 2048->7168) at T = 4096 and 16384
//    with simulate_moe_routing's offsets: the wgmma and wgmma_tma kernels, and bf16 cuda::grouped_gemm (default
//    dispatch).
// TFLOP/s and % of the 1979 TFLOP/s dense FP8 datasheet peak; the max |wgmma - cuBLASLt| (dense) or |fp8 - bf16|
// relative to max |bf16| (grouped, a sanity check only: the operands differ by the fp8 rounding) over 16 rows.
// PENSTOCK_FP8_BENCH_SHAPE / PENSTOCK_FP8_BENCH_T restrict the GEMM cases (case_selected), e.g. for Nsight Compute:
//   PENSTOCK_FP8_BENCH_SHAPE="o 16384" PENSTOCK_FP8_BENCH_T=16384 ncu ... penstock_bench_kernels --only fp8
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/kernels/bench_harness.h"
#include "bench/kernels/moe_route.h"
#include "bench/layer/random_fill.h"
#include "core/dtype.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8_gemm.h"

namespace penstock::bench {

namespace {

constexpr double kFp8PeakTflops = 1979.0;  // H200 SXM dense FP8 datasheet
constexpr int kWarmup = 2;
constexpr int kReps = 10;

// PENSTOCK_FP8_SKIP_TMA=1 leaves the TMA kernel out (tools/fp8_gemm_run.sh sets it when its tests failed).
bool skip_tma() {
    const char* e = std::getenv("PENSTOCK_FP8_SKIP_TMA");
    return e != nullptr && e[0] == '1';
}

// PENSTOCK_FP8_BENCH_SHAPE=substring and PENSTOCK_FP8_BENCH_T=tokens keep only the matching GEMM cases (e.g. one
// shape under a profiler); a skipped case still takes its seeds, so the cases that run get the same inputs.
bool case_selected(const char* shape, int64_t tokens) {
    static const char* only_shape = std::getenv("PENSTOCK_FP8_BENCH_SHAPE");
    static const char* only_t = std::getenv("PENSTOCK_FP8_BENCH_T");
    if (only_shape != nullptr && only_shape[0] != '\0' && std::strstr(shape, only_shape) == nullptr) return false;
    return only_t == nullptr || only_t[0] == '\0' || std::atoll(only_t) == tokens;
}

std::vector<float> read_row(const Tensor& t, int64_t row, const cuda::Stream& stream) {
    const Tensor h = cuda::to_host(t.view().slice(0, row, row + 1), stream);
    std::vector<float> f(static_cast<size_t>(h.numel()));
    for (size_t i = 0; i < f.size(); ++i) f[i] = bf16_to_float(h.ptr<uint16_t>()[i]);
    return f;
}

// max |x - y| and max |y| over 16 rows spread over [0, rows).
std::pair<double, double> diff_rows(const Tensor& x, const Tensor& y, int64_t rows, const cuda::Stream& stream) {
    double d = 0.0, ref = 0.0;
    for (int i = 0; i < 16; ++i) {
        const int64_t r = (rows - 1) * i / 15;
        const std::vector<float> a = read_row(x, r, stream), b = read_row(y, r, stream);
        for (size_t j = 0; j < a.size(); ++j) {
            d = std::max(d, std::isnan(a[j]) ? INFINITY : static_cast<double>(std::fabs(a[j] - b[j])));
            ref = std::max(ref, static_cast<double>(std::fabs(b[j])));
        }
    }
    return {d, ref};
}

// Quantised activations: bf16 [rows, k] -> e4m3 + scales in the transposed layout (cuBLASLt's), timed.
struct QuantAct {
    Tensor x, a, scale;
    TensorView scale_v;
};

QuantAct quantize_act(BenchContext& ctx, int64_t rows, int64_t k, uint64_t seed, bool report, const char* name) {
    QuantAct q;
    const int64_t kb = (k + 127) / 128;
    q.x = Tensor::empty({rows, k}, DType::kBF16, ctx.alloc());
    fill_uniform(q.x.view(), seed, 0.0f, 1.0f, ctx.stream().handle());
    q.a = Tensor::empty({rows, k}, DType::kF8E4M3, ctx.alloc());
    q.scale = Tensor::empty({kb * rows}, DType::kF32, ctx.alloc());
    q.scale_v = q.scale.view().as_strided(0, {rows, kb}, {1, rows});
    const kernels::Fp8ActQuantParams p{.out = q.a, .scale = q.scale_v, .in = q.x};
    if (report) {
        const Timing t = ctx.time([&] { cuda::fp8_act_quant(p, ctx.stream().handle()); }, kWarmup, kReps);
        nlohmann::json r = ctx.base_record("fp8_act_quant");
        r["shape"] = name;
        r["rows"] = rows;
        r["k"] = k;
        ctx.report(r, t, static_cast<double>(rows * k * 3 + rows * kb * 4));
    } else {
        cuda::fp8_act_quant(p, ctx.stream().handle());
    }
    return q;
}

// Random e4m3 weights (|w| <= ~260) via a bf16 staging fill, and positive 128 x 128 scales.
void fill_fp8_weight(const TensorView& w, const TensorView& staging_bf16, uint64_t seed, BenchContext& ctx) {
    fill_uniform(staging_bf16, seed, 0.0f, 150.0f, ctx.stream().handle());
    cuda::quantize_e4m3({.out = w, .in = staging_bf16}, ctx.stream().handle());
}

void report_gemm(BenchContext& ctx, const char* bench, const char* variant, const std::string& shape, int64_t tokens,
                 int64_t rows, int64_t n, int64_t k, const Timing& t, double bytes, nlohmann::json extra = {}) {
    nlohmann::json r = ctx.base_record(bench);
    r["variant"] = variant;
    r["shape"] = shape;
    r["tokens"] = tokens;
    r["rows"] = rows;
    r["n"] = n;
    r["k"] = k;
    const double tflops =
        2.0 * static_cast<double>(rows) * static_cast<double>(n) * static_cast<double>(k) / (t.median_us * 1e-6) / 1e12;
    r["tflops"] = tflops;
    r["pct_fp8_peak"] = 100.0 * tflops / kFp8PeakTflops;
    for (auto it = extra.begin(); it != extra.end(); ++it) r[it.key()] = it.value();
    ctx.report(r, t, bytes);
}

// DeepSeek-V3's dense projections (n, k), and whether fp8_act_quant is timed on the input (once per distinct k).
struct Proj {
    const char* name;
    int64_t n, k;
    bool time_quant;
};
constexpr Proj kProjs[] = {
    {"q_a 7168->1536", 1536, 7168, true},        {"kv_a 7168->576", 576, 7168, false},
    {"q_b 1536->24576", 24576, 1536, true},      {"kv_b 512->32768", 32768, 512, true},
    {"o 16384->7168", 7168, 16384, true},        {"shared gate_up 7168->4096", 4096, 7168, false},
    {"shared down 2048->7168", 7168, 2048, true}};

void run_dense(BenchContext& ctx) {
    uint64_t seed = 5000;
    for (const Proj& pr : kProjs) {
        const int64_t nb = (pr.n + 127) / 128, kb = (pr.k + 127) / 128;
        const Tensor w_bf16 = Tensor::empty({pr.n, pr.k}, DType::kBF16, ctx.alloc());
        const Tensor w = Tensor::empty({pr.n, pr.k}, DType::kF8E4M3, ctx.alloc());
        fill_fp8_weight(w, w_bf16, seed++, ctx);
        const Tensor ws = Tensor::empty({nb, kb}, DType::kF32, ctx.alloc());
        fill_uniform(ws.view(), seed++, 1.0f / (448.0f * 90.0f), 0.2f / (448.0f * 90.0f), ctx.stream().handle());
        for (const int64_t T : {int64_t{4096}, int64_t{16384}}) {
            if (!case_selected(pr.name, T)) {
                ++seed;
                continue;
            }
            const QuantAct q = quantize_act(ctx, T, pr.k, seed++, /*report=*/pr.time_quant, pr.name);
            const Tensor out_lt = Tensor::empty({T, pr.n}, DType::kBF16, ctx.alloc());
            const Tensor out_wg = Tensor::empty({T, pr.n}, DType::kBF16, ctx.alloc());
            const Tensor out_tma = Tensor::empty({T, pr.n}, DType::kBF16, ctx.alloc());
            const Tensor out_bf = Tensor::empty({T, pr.n}, DType::kBF16, ctx.alloc());
            const kernels::Fp8GemmParams plt{.out = out_lt, .a = q.a, .a_scale = q.scale_v, .b = w, .b_scale = ws};
            const kernels::Fp8GemmParams pwg{.out = out_wg, .a = q.a, .a_scale = q.scale_v, .b = w, .b_scale = ws};
            const kernels::Fp8GemmParams ptma{.out = out_tma, .a = q.a, .a_scale = q.scale_v, .b = w, .b_scale = ws};
            const double bytes_fp8 = static_cast<double>(T * pr.k + pr.n * pr.k + 2 * T * pr.n);
            ctx.stream().synchronize();
            const bool lt_ok = cuda::fp8_gemm_variant(plt, cuda::Fp8GemmVariant::kCublasLt, ctx.stream().handle());
            const bool wg_ok = cuda::fp8_gemm_variant(pwg, cuda::Fp8GemmVariant::kWgmma, ctx.stream().handle());
            ctx.stream().synchronize();
            Timing tlt{}, twg{};
            if (lt_ok) {
                tlt = ctx.time(
                    [&] { (void)cuda::fp8_gemm_variant(plt, cuda::Fp8GemmVariant::kCublasLt, ctx.stream().handle()); },
                    kWarmup, kReps);
                report_gemm(ctx, "fp8_gemm", "cublaslt", pr.name, T, T, pr.n, pr.k, tlt, bytes_fp8);
            } else {
                std::printf(
                    "{\"bench\":\"fp8_gemm\",\"variant\":\"cublaslt\",\"shape\":\"%s\",\"tokens\":%lld,"
                    "\"error\":\"not taken\"}\n",
                    pr.name, static_cast<long long>(T));
            }
            if (wg_ok) {
                twg = ctx.time(
                    [&] { (void)cuda::fp8_gemm_variant(pwg, cuda::Fp8GemmVariant::kWgmma, ctx.stream().handle()); },
                    kWarmup, kReps);
                nlohmann::json extra;
                if (lt_ok) {
                    const auto [d, ref] = diff_rows(out_wg, out_lt, T, ctx.stream());
                    extra["max_abs_diff_vs_cublaslt_16rows"] = d;
                    extra["max_abs_ref_16rows"] = ref;
                    extra["speedup_vs_cublaslt"] = tlt.median_us / twg.median_us;
                }
                report_gemm(ctx, "fp8_gemm", "wgmma", pr.name, T, T, pr.n, pr.k, twg, bytes_fp8, extra);
            }
            for (const cuda::Fp8GemmVariant v :
                 {cuda::Fp8GemmVariant::kWgmmaTma, cuda::Fp8GemmVariant::kWgmmaTmaWide,
                  cuda::Fp8GemmVariant::kWgmmaTmaPair, cuda::Fp8GemmVariant::kWgmmaTmaN192}) {
                if (skip_tma() || !cuda::fp8_gemm_variant(ptma, v, ctx.stream().handle())) continue;
                const Timing tt =
                    ctx.time([&] { (void)cuda::fp8_gemm_variant(ptma, v, ctx.stream().handle()); }, kWarmup, kReps);
                nlohmann::json extra;
                if (lt_ok) {
                    const auto [d, ref] = diff_rows(out_tma, out_lt, T, ctx.stream());
                    extra["max_abs_diff_vs_cublaslt_16rows"] = d;
                    extra["max_abs_ref_16rows"] = ref;
                    extra["speedup_vs_cublaslt"] = tlt.median_us / tt.median_us;
                }
                report_gemm(ctx, "fp8_gemm", cuda::fp8_gemm_variant_name(v), pr.name, T, T, pr.n, pr.k, tt, bytes_fp8,
                            extra);
            }
            const kernels::GemmParams pb{
                .out = out_bf, .a = q.x, .b = w_bf16, .trans_b = true, .alpha = 1.0f, .beta = 0.0f};
            const Timing tb = ctx.time([&] { cuda::gemm(pb, ctx.stream().handle()); }, kWarmup, kReps);
            report_gemm(ctx, "fp8_gemm", "bf16_cublaslt", pr.name, T, T, pr.n, pr.k, tb,
                        2.0 * static_cast<double>(T * pr.k + pr.n * pr.k + T * pr.n));
        }
    }
}

void run_grouped(BenchContext& ctx) {
    const int experts = 256, topk = 8;
    const char* off_dir = std::getenv("PENSTOCK_FP8_OFFSETS_DIR");
    struct Proj {
        const char* name;
        int64_t n, k;
    };
    const Proj kProjs[] = {{"dsv3 gate_up 7168->4096", 4096, 7168}, {"dsv3 down 2048->7168", 7168, 2048}};
    uint64_t seed = 7000;
    for (const Proj& pr : kProjs) {
        const int64_t nb = (pr.n + 127) / 128, kb = (pr.k + 127) / 128;
        const Tensor b_bf16 = Tensor::empty({experts, pr.n, pr.k}, DType::kBF16, ctx.alloc());
        const Tensor b = Tensor::empty({experts, pr.n, pr.k}, DType::kF8E4M3, ctx.alloc());
        fill_fp8_weight(b, b_bf16, seed++, ctx);
        const Tensor bs = Tensor::empty({experts, nb, kb}, DType::kF32, ctx.alloc());
        // Weight scales 1: the fp8 weights are e4m3(the bf16 weights), so the fp8 and bf16 outputs agree up to the
        // fp8 rounding (a sanity check of the timed kernels, not a tolerance).
        fill_uniform(bs.view(), seed++, 1.0f, 0.0f, ctx.stream().handle());
        for (const int64_t T : {int64_t{4096}, int64_t{16384}}) {
            std::mt19937 rrng(static_cast<uint32_t>(1000 + T + experts));  // grouped_gemm_bench's offsets
            const std::vector<int32_t> off = simulate_moe_routing(T, experts, topk, rrng);
            const int64_t rows = off.back();
            if (off_dir != nullptr && pr.n == 4096) {
                const std::string path = std::string(off_dir) + "/dsv3_" + std::to_string(T) + ".txt";
                if (FILE* f = std::fopen(path.c_str(), "w")) {
                    for (int32_t o : off) std::fprintf(f, "%d\n", o);
                    std::fclose(f);
                }
            }
            if (!case_selected(pr.name, T)) {
                ++seed;
                continue;
            }
            const Tensor off_host = Tensor::from_i32({static_cast<int64_t>(off.size())}, off);
            const Tensor off_dev = cuda::to_device(off_host, ctx.alloc(), ctx.stream());
            const QuantAct q = quantize_act(ctx, rows, pr.k, seed++, /*report=*/false, pr.name);
            const Tensor out = Tensor::empty({rows, pr.n}, DType::kBF16, ctx.alloc());
            const Tensor out_bf = Tensor::empty({rows, pr.n}, DType::kBF16, ctx.alloc());
            const kernels::Fp8GroupedGemmParams p{
                .out = out, .a = q.a, .a_scale = q.scale_v, .b = b, .b_scale = bs, .offsets = off_dev};
            const kernels::GroupedGemmParams pb{.out = out_bf, .a = q.x, .b = b_bf16, .offsets = off_dev};
            ctx.stream().synchronize();
            const Timing tb = ctx.time([&] { cuda::grouped_gemm(pb, ctx.stream().handle()); }, kWarmup, kReps);
            const double bytes = static_cast<double>(rows * pr.k + experts * pr.n * pr.k + 2 * rows * pr.n);
            for (const cuda::Fp8GemmVariant v :
                 {cuda::Fp8GemmVariant::kWgmma, cuda::Fp8GemmVariant::kWgmmaTma, cuda::Fp8GemmVariant::kWgmmaTmaWide,
                  cuda::Fp8GemmVariant::kWgmmaTmaPair, cuda::Fp8GemmVariant::kWgmmaTmaN192}) {
                if (v != cuda::Fp8GemmVariant::kWgmma && skip_tma()) continue;
                cuda::fill_bytes_async(out, 0xff, ctx.stream());
                if (!cuda::fp8_grouped_gemm_variant(p, v, ctx.stream().handle())) continue;
                const Timing t = ctx.time([&] { (void)cuda::fp8_grouped_gemm_variant(p, v, ctx.stream().handle()); },
                                          kWarmup, kReps);
                const auto [d, ref] = diff_rows(out, out_bf, rows, ctx.stream());
                nlohmann::json extra;
                extra["experts"] = experts;
                extra["topk"] = topk;
                extra["speedup_vs_bf16"] = tb.median_us / t.median_us;
                extra["max_abs_diff_vs_bf16_16rows_rel"] = ref > 0 ? d / ref : d;
                report_gemm(ctx, "fp8_grouped_gemm", cuda::fp8_gemm_variant_name(v), pr.name, T, rows, pr.n, pr.k, t,
                            bytes, extra);
            }
            if (pr.n == 4096) {
                // gate_up with the gated activation and the down input's quantisation: the fused epilogue
                // (fp8_grouped_gemm_glu) vs the same three ops in sequence (default GEMM, silu_mul, fp8_act_quant).
                const int64_t inter = pr.n / 2, ikb = (inter + 127) / 128;
                const Tensor act = Tensor::empty({rows, inter}, DType::kF8E4M3, ctx.alloc());
                const Tensor act_scale = Tensor::empty({rows, ikb}, DType::kF32, ctx.alloc());
                const kernels::Fp8GroupedGluGemmParams pg{.out = act,
                                                          .out_scale = act_scale,
                                                          .a = q.a,
                                                          .a_scale = q.scale_v,
                                                          .b = b,
                                                          .b_scale = bs,
                                                          .offsets = off_dev,
                                                          .gate_up = out};
                const Timing tf =
                    ctx.time([&] { cuda::fp8_grouped_gemm_glu(pg, ctx.stream().handle()); }, kWarmup, kReps);
                const TensorView g = out.view().slice(1, 0, inter), u = out.view().slice(1, inter, pr.n);
                const Timing tu = ctx.time(
                    [&] {
                        cuda::fp8_grouped_gemm(p, ctx.stream().handle());
                        cuda::silu_mul({.out = g, .gate = g, .up = u}, ctx.stream().handle());
                        cuda::fp8_act_quant({.out = act, .scale = act_scale, .in = g}, ctx.stream().handle());
                    },
                    kWarmup, kReps);
                nlohmann::json extra;
                extra["experts"] = experts;
                extra["topk"] = topk;
                extra["unfused_us"] = tu.median_us;
                extra["speedup_vs_unfused"] = tu.median_us / tf.median_us;
                report_gemm(ctx, "fp8_grouped_gemm", "glu_fused", pr.name, T, rows, pr.n, pr.k, tf, bytes, extra);
                report_gemm(ctx, "fp8_grouped_gemm", "glu_unfused", pr.name, T, rows, pr.n, pr.k, tu, bytes);
            }
            report_gemm(ctx, "fp8_grouped_gemm", "bf16_grouped_gemm", pr.name, T, rows, pr.n, pr.k, tb,
                        2.0 * static_cast<double>(rows * pr.k + experts * pr.n * pr.k + rows * pr.n));
        }
    }
}

}  // namespace

void run_fp8_gemm_bench(BenchContext& ctx) {
    run_dense(ctx);
    run_grouped(ctx);
}

// fp8_act_quant alone on the projections' inputs (T = 4096 and 16384), a few hundred MB: for memory-bound A/Bs
// without the GEMMs' weights.
void run_fp8_act_quant_bench(BenchContext& ctx) {
    uint64_t seed = 5000;
    for (const Proj& pr : kProjs) {
        if (!pr.time_quant) continue;
        for (const int64_t T : {int64_t{4096}, int64_t{16384}}) quantize_act(ctx, T, pr.k, seed++, true, pr.name);
    }
}

}  // namespace penstock::bench
