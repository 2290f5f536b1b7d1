// KDA gated delta rule (kernels/ops_kda.h GatedDeltaRuleParams) at Kimi K3 dims: 96 heads, head_dim 128 (k = v),
// one sequence of T = 4096, 16384, 65536 tokens (other (T, heads) pairs: PENSTOCK_KDA_BENCH_SHAPES below), fresh
// (zero) state, chunk 64, scale 128^-0.5, f32 as the op requires.
// Inputs seeded random on the device (random_fill.h): q, k uniform then L2-normalised per head (cuda::l2norm, as the
// model does), v uniform (unit variance), g = log decay uniform in [-0.5, 0) per channel (the op's convention: log
// space, <= 0), beta uniform in about [0.015, 0.985). The state is zeroed inside the timed op (a 6 MB memset, a few
// us) so every rep starts fresh. Also times the recurrent (token-by-token) form and reports the max |chunk -
// recurrent| over 16 sampled rows as a sanity check. The chunk form runs three times: fp32 on CUDA cores (precision
// kF32), on tensor cores in one fused kernel (kTensorCore: tf32 products, kda_chunk_tc.cu) and in the split form
// (kTensorCoreSplit: every chunk's parallel part at once, then the state pass on bf16 tensor cores).
// tools/fla_kda_baseline.py times fla's chunk_kda at the same shapes.
//
// FLOP model (the chunked WY/UT algorithm of kda_delta_rule.cu, matmul-equivalent, dense counts, per chunk of C rows
// and head, K = V = head_dim): L = (K e^G)(K e^-G)^T 2C^2K, A = (Q e^G)(K e^-G)^T 2C^2K, W = T(beta K e^G) 2C^2K,
// U = T(beta V) 2C^2V, A V' 2C^2V, V' = U - W S 2CKV, Q S 2CKV, S += K^T V' 2CKV
//   => per token and head: 2C(3K + 2V) + 6KV = 180,224 FLOP at C = 64, K = V = 128.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "bench/kernels/bench_harness.h"
#include "bench/layer/random_fill.h"
#include "core/check.h"
#include "kernels/cuda/cuda_ops_kda.h"

namespace penstock::bench {

namespace {

std::vector<float> read_row(const Tensor& t, int64_t row, const cuda::Stream& stream) {
    const Tensor h = cuda::to_host(t.view().slice(0, row, row + 1), stream);
    return std::vector<float>(h.ptr<float>(), h.ptr<float>() + h.numel());
}

}  // namespace

// (tokens, heads) pairs: Kimi K3's 96 heads at 4K / 16K / 64K, or PENSTOCK_KDA_BENCH_SHAPES="T:H,T:H,..." (e.g.
// "8192:64,32768:96" for the PERF.md range T = 8K-32K, H = 64 / 96).
std::vector<std::pair<int64_t, int64_t>> kda_bench_shapes() {
    std::vector<std::pair<int64_t, int64_t>> shapes;
    if (const char* e = std::getenv("PENSTOCK_KDA_BENCH_SHAPES"); e != nullptr && *e != '\0') {
        std::string spec(e);
        size_t pos = 0;
        while (pos < spec.size()) {
            const size_t end = std::min(spec.find(',', pos), spec.size());
            const std::string item = spec.substr(pos, end - pos);
            const size_t colon = item.find(':');
            const int64_t t = std::stoll(item.substr(0, colon));
            const int64_t h = colon == std::string::npos ? 96 : std::stoll(item.substr(colon + 1));
            PENSTOCK_CHECK(t > 0 && h > 0) << "PENSTOCK_KDA_BENCH_SHAPES: bad item '" << item << "'";
            shapes.emplace_back(t, h);
            pos = end + 1;
        }
    } else {
        shapes = {{4096, 96}, {16384, 96}, {65536, 96}};
    }
    return shapes;
}

void run_kda_bench(BenchContext& ctx) {
    constexpr int64_t kDim = 128, kChunk = 64;
    const double flop_per_token_head =
        2.0 * kChunk * (3.0 * kDim + 2.0 * kDim) + 6.0 * static_cast<double>(kDim) * kDim;
    uint64_t seed = 700;
    for (const auto& [T, kHeads] : kda_bench_shapes()) {
        const Tensor q = Tensor::empty({T, kHeads, kDim}, DType::kF32, ctx.alloc());
        const Tensor k = Tensor::empty({T, kHeads, kDim}, DType::kF32, ctx.alloc());
        const Tensor v = Tensor::empty({T, kHeads, kDim}, DType::kF32, ctx.alloc());
        const Tensor g = Tensor::empty({T, kHeads, kDim}, DType::kF32, ctx.alloc());
        const Tensor beta = Tensor::empty({T, kHeads}, DType::kF32, ctx.alloc());
        const Tensor out = Tensor::empty({T, kHeads, kDim}, DType::kF32, ctx.alloc());
        const Tensor out_rec = Tensor::empty({T, kHeads, kDim}, DType::kF32, ctx.alloc());
        const Tensor out_tc = Tensor::empty({T, kHeads, kDim}, DType::kF32, ctx.alloc());
        const Tensor state = Tensor::empty({1, kHeads, kDim, kDim}, DType::kF32, ctx.alloc());
        void* s = ctx.stream().handle();
        fill_uniform(q.view(), seed++, 0.0f, 1.0f, s);
        fill_uniform(k.view(), seed++, 0.0f, 1.0f, s);
        fill_uniform(v.view(), seed++, 0.0f, 1.0f, s);
        // u in [-sqrt(3), sqrt(3)): mean -0.25, stddev 0.25 / sqrt(3) spans [-0.5, 0).
        fill_uniform(g.view(), seed++, -0.25f, 0.25f / std::sqrt(3.0f), s);
        fill_uniform(beta.view(), seed++, 0.5f, 0.97f * 0.5f / std::sqrt(3.0f), s);
        cuda::l2norm({.out = q.view(), .in = q.view(), .eps = 1e-6f}, s);
        cuda::l2norm({.out = k.view(), .in = k.view(), .eps = 1e-6f}, s);
        const std::vector<int32_t> cu = {0, static_cast<int32_t>(T)};
        const std::vector<int32_t> slots = {0};
        const Tensor cu_dev = cuda::to_device(Tensor::from_i32({2}, cu).view(), ctx.alloc(), ctx.stream());
        const Tensor slots_dev = cuda::to_device(Tensor::from_i32({1}, slots).view(), ctx.alloc(), ctx.stream());
        kernels::GatedDeltaRuleParams p{.out = out.view(),
                                        .q = q.view(),
                                        .k = k.view(),
                                        .v = v.view(),
                                        .g = g.view(),
                                        .beta = beta.view(),
                                        .state = state.view(),
                                        .cu_seqlens = cu_dev.view(),
                                        .state_slots = slots_dev.view(),
                                        .scale = 1.0f / std::sqrt(static_cast<float>(kDim)),
                                        .chunk_size = kChunk};
        kernels::GatedDeltaRuleParams pr = p;
        pr.out = out_rec.view();
        kernels::GatedDeltaRuleParams pt = p;
        pt.out = out_tc.view();
        pt.precision = kernels::DeltaRulePrecision::kTensorCore;
        const Tensor out_sp = Tensor::empty({T, kHeads, kDim}, DType::kF32, ctx.alloc());
        kernels::GatedDeltaRuleParams ps = p;
        ps.out = out_sp.view();
        ps.precision = kernels::DeltaRulePrecision::kTensorCoreSplit;
        ctx.stream().synchronize();
        const int reps = T >= 65536 ? 3 : 5;
        const Timing tc = ctx.time(
            [&] {
                cuda::fill_bytes_async(state.view(), 0, ctx.stream());
                cuda::gated_delta_rule_chunk(p, s);
            },
            1, reps);
        const Timing tr = ctx.time(
            [&] {
                cuda::fill_bytes_async(state.view(), 0, ctx.stream());
                cuda::gated_delta_rule_recurrent(pr, s);
            },
            1, reps);
        const Timing tt = ctx.time(
            [&] {
                cuda::fill_bytes_async(state.view(), 0, ctx.stream());
                cuda::gated_delta_rule_chunk(pt, s);
            },
            2, reps);
        const Timing ts = ctx.time(
            [&] {
                cuda::fill_bytes_async(state.view(), 0, ctx.stream());
                cuda::gated_delta_rule_chunk(ps, s);
            },
            2, reps);
        ctx.stream().synchronize();
        // max |variant - recurrent| over 16 sampled rows (the recurrent form is fp32 on CUDA cores)
        auto sampled_diff = [&](const Tensor& x_out, double* max_ref) {
            double max_diff = 0.0;
            for (int i = 0; i < 16; ++i) {
                const int64_t r = (T - 1) * i / 15;
                const std::vector<float> x = read_row(x_out, r, ctx.stream()), y = read_row(out_rec, r, ctx.stream());
                for (size_t j = 0; j < x.size(); ++j) {
                    max_diff = std::max(max_diff, static_cast<double>(std::fabs(x[j] - y[j])));
                    *max_ref = std::max(*max_ref, static_cast<double>(std::fabs(y[j])));
                    if (std::isnan(x[j])) max_diff = INFINITY;
                }
            }
            return max_diff;
        };
        double max_ref = 0.0;
        const double max_diff = sampled_diff(out, &max_ref);
        const double max_diff_tc = sampled_diff(out_tc, &max_ref);
        const double max_diff_sp = sampled_diff(out_sp, &max_ref);
        const double flops = flop_per_token_head * static_cast<double>(T) * kHeads;
        // Bytes: q, k, v, g, out (f32 [T, H, D]) + beta + state read and written.
        const double bytes = 4.0 * (5.0 * T * kHeads * kDim + T * kHeads + 2.0 * kHeads * kDim * kDim);
        for (int variant = 0; variant < 4; ++variant) {
            const Timing& t = variant == 0 ? tc : variant == 1 ? tr : variant == 2 ? tt : ts;
            nlohmann::json record = ctx.base_record("kda_delta_rule");
            record["variant"] = variant == 0   ? "chunk"
                                : variant == 1 ? "recurrent"
                                : variant == 2 ? "chunk_tensor_core"
                                               : "chunk_tensor_core_split";
            record["dtype"] = variant == 2   ? "f32 io, tf32 products"
                              : variant == 3 ? "f32 io, tf32 chunk products, bf16 state products"
                                             : "f32";
            record["tokens"] = T;
            record["heads"] = kHeads;
            record["head_dim"] = kDim;
            record["chunk"] = kChunk;
            record["ms"] = t.median_us * 1e-3;
            record["tokens_per_s"] = static_cast<double>(T) / (t.median_us * 1e-6);
            record["flop_model"] = "T*H*(2C(3K+2V)+6KV), C=64";
            record["tflops_chunk_model"] = flops / (t.median_us * 1e-6) / 1e12;
            if (variant != 1) {
                record["max_abs_diff_vs_recurrent_16rows"] = variant == 0   ? max_diff
                                                             : variant == 2 ? max_diff_tc
                                                                            : max_diff_sp;
                record["max_abs_ref_16rows"] = max_ref;
            }
            ctx.report(record, t, bytes);
        }
    }
}

}  // namespace penstock::bench
