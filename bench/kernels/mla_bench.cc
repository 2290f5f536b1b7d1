// MLA absorbed-form attention at real dims, bf16: the tensor-core kernels (kernels/cuda/mla_tc.cu) beside the
// CUDA-core kernels they replace, in the same run on the same inputs.
//  - sparse (DSA, GLM-5.3: 64 heads, d_qk 576 = kv_lora 512 + rope 64, d_v 512): T = 4096 query tokens at positions
//    prefix + i, top-k 2048 per token (one random key per stratum of the visible range: distinct, ascending, spread
//    like the indexer's picks), a latent cache of prefix + T rows; prefixes 16K / 64K / 128K, and 128 heads at 64K.
//    The old kernel is f32-only: timed at prefix 16K on f32 copies of the same inputs.
//  - dense (cuda::attention): T = 4096 causal tokens without a prefix, 64 and 128 heads, k = the latent [T, 1, 576],
//    v = k[..., :512]. The old kernel is timed on the same bf16 data with v a separate copy (so the dispatch keeps
//    it on the CUDA cores).
// Each old/new pair is also compared element-wise at the perf shape (max |new - old|, in the record). FLOPs:
// 2 (d_qk + d_v) per visible (row, head, key); tflops and pct_of_bf16_peak (989 TFLOP/s dense bf16) per record.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench/kernels/bench_harness.h"
#include "bench/layer/random_fill.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_dsa.h"
#include "kernels/cuda/mla_tc.h"

namespace penstock::bench {

namespace {

constexpr int64_t kDqk = 576;
constexpr int64_t kDv = 512;
constexpr double kBf16PeakTflops = 989.0;
constexpr int kOldWarmup = 1;
constexpr int kOldReps = 3;

using cuda::MlaTcVariant;
const std::pair<const char*, MlaTcVariant> kVariants[] = {{"mla_tc mma.sync", MlaTcVariant::kMmaSync},
                                                          {"mla_tc wgmma", MlaTcVariant::kWgmma},
                                                          {"mla_tc wgmma-ws", MlaTcVariant::kWgmmaWs},
                                                          {"mla_tc wgmma-pair", MlaTcVariant::kWgmmaPair},
                                                          {"mla_tc wgmma-pair-full", MlaTcVariant::kWgmmaPairFull}};

Tensor dev_i32(const std::vector<int32_t>& v, const Shape& shape, Allocator& alloc, const cuda::Stream& stream) {
    const Tensor h = Tensor::from_i32(shape, v);
    Tensor d = cuda::to_device(h, alloc, stream);
    stream.synchronize();
    return d;
}

Tensor random_dev(const Shape& shape, DType dtype, uint64_t seed, BenchContext& ctx) {
    Tensor t = Tensor::empty(shape, dtype, ctx.alloc());
    fill_uniform(t, seed, /*mean=*/0.0f, /*stddev=*/1.0f, ctx.stream().handle());
    return t;
}

Tensor to_f32_dev(const Tensor& x, BenchContext& ctx) {
    Tensor y = Tensor::empty(x.view().shape_vec(), DType::kF32, ctx.alloc());
    cuda::copy({.out = y, .in = x}, ctx.stream().handle());
    return y;
}

// max |a - b| and max |b| over two device tensors of the same shape (f32 or bf16).
std::pair<double, double> max_diff(const Tensor& a, const Tensor& b, const cuda::Stream& stream) {
    const Tensor ha = to_f32(cuda::to_host(a, stream));
    const Tensor hb = to_f32(cuda::to_host(b, stream));
    double d = 0, m = 0;
    for (int64_t i = 0; i < ha.numel(); ++i) {
        const double x = ha.ptr<float>()[i], y = hb.ptr<float>()[i];
        d = std::max(d, std::isnan(x) || std::isnan(y) ? INFINITY : std::fabs(x - y));
        m = std::max(m, std::fabs(y));
    }
    return {d, m};
}

void add_rate(nlohmann::json& record, double flops, const Timing& t) {
    const double tflops = flops / (t.median_us * 1e-6) / 1e12;
    record["tflops"] = tflops;
    record["pct_of_bf16_peak"] = 100.0 * tflops / kBf16PeakTflops;
}

void sparse_case(BenchContext& ctx, int64_t prefix, int64_t heads, bool with_old, uint64_t seed) {
    const int64_t T = 4096, top_k = 2048, n_slots = prefix + T;
    const Tensor q = random_dev({T, heads, kDqk}, DType::kBF16, seed, ctx);
    const Tensor kv = random_dev({n_slots, kDqk}, DType::kBF16, seed + 1, ctx);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::vector<int32_t> idx(static_cast<size_t>(T * top_k));
    for (int64_t r = 0; r < T; ++r) {
        const int64_t visible = prefix + r + 1;  // >= top_k here
        for (int64_t j = 0; j < top_k; ++j) {
            const int64_t lo = j * visible / top_k, hi = (j + 1) * visible / top_k;
            idx[static_cast<size_t>(r * top_k + j)] = static_cast<int32_t>(lo + static_cast<int64_t>(rng() % (hi - lo)));
        }
    }
    const Tensor idx_d = dev_i32(idx, {T, top_k}, ctx.alloc(), ctx.stream());
    const Tensor out = Tensor::empty({T, heads, kDv}, DType::kBF16, ctx.alloc());
    const Tensor lse = Tensor::empty({T, heads}, DType::kF32, ctx.alloc());
    const float scale = 1.0f / std::sqrt(256.0f);  // GLM-5.3: qk_head_dim 192 + 64
    const kernels::SparseMlaAttentionParams p{.out = out, .lse = lse, .q = q, .kv = kv,
                                              .v = kv.view().slice(1, 0, kDv), .indices = idx_d, .scale = scale};
    const double flops = 2.0 * static_cast<double>(T * heads * top_k) * static_cast<double>(kDqk + kDv);
    const double gathered = static_cast<double>(T * ((heads + 63) / 64) * top_k * kDqk * 2);
    nlohmann::json base = ctx.base_record("mla_sparse");
    base["dtype"] = "bf16";
    base["tokens"] = T;
    base["heads"] = heads;
    base["prefix"] = prefix;
    base["top_k"] = top_k;
    Timing to{};
    Tensor out32, lse32, out_new32;
    if (with_old) {
        // The CUDA-core kernel (f32 only) on f32 copies of the same values; outputs compared in f32.
        const Tensor q32 = to_f32_dev(q, ctx), kv32 = to_f32_dev(kv, ctx);
        out32 = Tensor::empty({T, heads, kDv}, DType::kF32, ctx.alloc());
        out_new32 = Tensor::empty({T, heads, kDv}, DType::kF32, ctx.alloc());
        lse32 = Tensor::empty({T, heads}, DType::kF32, ctx.alloc());
        const kernels::SparseMlaAttentionParams po{.out = out32, .lse = lse32, .q = q32, .kv = kv32,
                                                   .v = kv32.view().slice(1, 0, kDv), .indices = idx_d,
                                                   .scale = scale};
        to = ctx.time([&] { cuda::sparse_mla_attention(po, ctx.stream().handle()); }, kOldWarmup, kOldReps);
        nlohmann::json old = base;
        old["kernel"] = "old (f32 CUDA cores)";
        old["dtype"] = "f32";
        add_rate(old, flops, to);
        ctx.report(old, to, gathered * 2);
    }
    for (const auto& [name, variant] : kVariants) {
        const MlaTcVariant v = variant;
        const Timing t = ctx.time([&] { cuda::mla_tc_sparse_attention(p, v, ctx.stream().handle()); });
        nlohmann::json rec = base;
        rec["kernel"] = name;
        add_rate(rec, flops, t);
        if (with_old) {
            kernels::SparseMlaAttentionParams pn = p;
            pn.out = out_new32;
            cuda::mla_tc_sparse_attention(pn, v, ctx.stream().handle());
            const auto [d, m] = max_diff(out_new32, out32, ctx.stream());
            const auto [dl, ml] = max_diff(lse, lse32, ctx.stream());
            rec["max_abs_diff_vs_old"] = d;
            rec["max_abs_old"] = m;
            rec["lse_max_abs_diff_vs_old"] = dl;
            rec["speedup_vs_old"] = to.median_us / t.median_us;
        }
        ctx.report(rec, t, gathered + static_cast<double>(T * heads * (kDqk + kDv) * 2));
    }
}

void dense_case(BenchContext& ctx, int64_t heads, bool with_old, uint64_t seed) {
    const int64_t T = 4096;
    const Tensor q = random_dev({T, heads, kDqk}, DType::kBF16, seed, ctx);
    const Tensor latent = random_dev({T, 1, kDqk}, DType::kBF16, seed + 1, ctx);
    const Tensor out = Tensor::empty({T, heads, kDv}, DType::kBF16, ctx.alloc());
    const Tensor lse = Tensor::empty({T, heads}, DType::kF32, ctx.alloc());
    const Tensor cu = dev_i32({0, static_cast<int32_t>(T)}, {2}, ctx.alloc(), ctx.stream());
    const Tensor pos0 = dev_i32({0}, {1}, ctx.alloc(), ctx.stream());
    const kernels::AttentionParams p{.out = out,
                                     .lse = lse,
                                     .q = q,
                                     .k = latent,
                                     .v = latent.view().slice(2, 0, kDv),
                                     .cu_seqlens_q = cu,
                                     .cu_seqlens_k = cu,
                                     .q_pos0 = pos0,
                                     .k_pos0 = pos0,
                                     .scale = 1.0f / std::sqrt(192.0f),  // DeepSeek-V3: qk_head_dim 128 + 64
                                     .causal = true};
    PENSTOCK_CHECK(cuda::mla_tc_attention_supported(p)) << "mla bench: the dense case must take the tensor cores";
    // Causal: T (T + 1) / 2 visible (row, key) pairs per head.
    const double flops = static_cast<double>(T) * static_cast<double>(T + 1) / 2.0 * static_cast<double>(heads) * 2.0 *
                         static_cast<double>(kDqk + kDv);
    const double bytes = static_cast<double>(T * heads * (kDqk + kDv) * 2 + T * kDqk * 2);
    nlohmann::json base = ctx.base_record("mla_dense");
    base["dtype"] = "bf16";
    base["tokens"] = T;
    base["heads"] = heads;
    Timing to{};
    Tensor out_old, lse_old;
    if (with_old) {
        // Same values; v a separate [T, 1, 512] copy, which the tensor-core dispatch declines.
        const Tensor v = Tensor::empty({T, 1, kDv}, DType::kBF16, ctx.alloc());
        cuda::copy({.out = v, .in = latent.view().slice(2, 0, kDv)}, ctx.stream().handle());
        out_old = Tensor::empty({T, heads, kDv}, DType::kBF16, ctx.alloc());
        lse_old = Tensor::empty({T, heads}, DType::kF32, ctx.alloc());
        kernels::AttentionParams po = p;
        po.out = out_old;
        po.lse = lse_old;
        po.v = v;
        PENSTOCK_CHECK(!cuda::mla_tc_attention_supported(po)) << "mla bench: the old path must stay on CUDA cores";
        to = ctx.time([&] { cuda::attention(po, ctx.stream().handle()); }, kOldWarmup, kOldReps);
        nlohmann::json old = base;
        old["kernel"] = "old (bf16 CUDA cores)";
        add_rate(old, flops, to);
        ctx.report(old, to, bytes);
    }
    for (const auto& [name, variant] : kVariants) {
        if (variant == MlaTcVariant::kWgmmaWs || variant == MlaTcVariant::kWgmmaPair ||
            variant == MlaTcVariant::kWgmmaPairFull) {
            continue;  // sparse only
        }
        const MlaTcVariant v = variant;
        const Timing t = ctx.time([&] { cuda::mla_tc_attention(p, v, ctx.stream().handle()); });
        nlohmann::json rec = base;
        rec["kernel"] = name;
        add_rate(rec, flops, t);
        if (with_old) {
            const auto [d, m] = max_diff(out, out_old, ctx.stream());
            const auto [dl, ml] = max_diff(lse, lse_old, ctx.stream());
            rec["max_abs_diff_vs_old"] = d;
            rec["max_abs_old"] = m;
            rec["lse_max_abs_diff_vs_old"] = dl;
            rec["speedup_vs_old"] = to.median_us / t.median_us;
        }
        ctx.report(rec, t, bytes);
    }
}

}  // namespace

void run_mla_bench(BenchContext& ctx) {
    sparse_case(ctx, /*prefix=*/16384, /*heads=*/64, /*with_old=*/true, /*seed=*/100);
    sparse_case(ctx, /*prefix=*/65536, /*heads=*/64, /*with_old=*/false, /*seed=*/200);
    sparse_case(ctx, /*prefix=*/131072, /*heads=*/64, /*with_old=*/false, /*seed=*/300);
    sparse_case(ctx, /*prefix=*/65536, /*heads=*/128, /*with_old=*/false, /*seed=*/400);
    dense_case(ctx, /*heads=*/64, /*with_old=*/true, /*seed=*/500);
    dense_case(ctx, /*heads=*/128, /*with_old=*/false, /*seed=*/600);
}

}  // namespace penstock::bench
