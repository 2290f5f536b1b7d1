// The memory-bound Kimi K3 ops on bf16 activations at the shapes of one 16K-token prefill chunk (issue 7: >= 80% of
// the copy bandwidth), each beside the device-to-device copy measured in the same run (run_copy_bench's harness):
//   situ_mul (both bf16 arithmetic variants, cuda::SituMath) / silu_mul reading gate and up from the two halves of a
//   [rows, 2I] GEMM output (the model writes over
//     the gate half; here a separate [rows, I] output, so that repeated reps do not iterate the map on their own
//     output): routed experts 262144 rows (16K tokens x top-16) x I 3072, shared experts 16384 x 6144; bytes = read
//     gate + up, write out (6 bytes per element)
//   sigmoid_gate, K3 MLA out_gate: [16384, 12288] bf16 in and out, gate f32; bytes = 2 + 4 + 2 per element
//   attn_res_mix: T 16384, hidden 7168, bf16 partial / out, bf16 bank of 1 and 8 rows (the K3 layers' reads have
//     1 to 8 completed blocks); bytes = every candidate row read once + out written (the second read of a row is
//     counted as free: it should come from L2)
// Inputs are seeded uniform values (bench/layer/random_fill.h), not zeros. --only elementwise.
#include <cstdint>
#include <tuple>

#include "bench/kernels/bench_harness.h"
#include "bench/layer/random_fill.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_kda.h"

namespace penstock::bench {

void run_elementwise_bench(BenchContext& ctx) {
    void* s = ctx.stream().handle();
    uint64_t seed = 900;
    for (const auto& [rows, inter, what] : {std::tuple<int64_t, int64_t, const char*>{262144, 3072, "routed"},
                                            std::tuple<int64_t, int64_t, const char*>{16384, 6144, "shared"}}) {
        const Tensor gate_up = Tensor::empty({rows, 2 * inter}, DType::kBF16, ctx.alloc());
        fill_uniform(gate_up.view(), seed++, 0.0f, 2.0f, s);
        const Tensor out = Tensor::empty({rows, inter}, DType::kBF16, ctx.alloc());
        const TensorView gate = gate_up.view().slice(1, 0, inter), up = gate_up.view().slice(1, inter, 2 * inter);
        const double bytes = 6.0 * static_cast<double>(rows) * static_cast<double>(inter);
        for (const cuda::SituMath math : {cuda::SituMath::kTanhApprox, cuda::SituMath::kRational}) {
            const Timing t =
                ctx.time([&] { cuda::situ_mul_variant({.out = out.view(), .gate = gate, .up = up}, math, s); });
            nlohmann::json r = ctx.base_record("situ_mul_bf16");
            r["experts"] = what;
            r["rows"] = rows;
            r["inter"] = inter;
            r["math"] = math == cuda::SituMath::kRational ? "rational" : "tanh_approx";
            r["default"] = math == cuda::kDefaultSituMath;
            ctx.report(r, t, bytes);
        }
        {
            const Timing t = ctx.time([&] { cuda::silu_mul({.out = out.view(), .gate = gate, .up = up}, s); });
            nlohmann::json r = ctx.base_record("silu_mul_bf16");
            r["experts"] = what;
            r["rows"] = rows;
            r["inter"] = inter;
            ctx.report(r, t, bytes);
        }
    }
    {
        constexpr int64_t kRows = 16384, kDim = 12288;
        const Tensor x = Tensor::empty({kRows, kDim}, DType::kBF16, ctx.alloc());
        const Tensor g = Tensor::empty({kRows, kDim}, DType::kF32, ctx.alloc());
        const Tensor o = Tensor::empty({kRows, kDim}, DType::kBF16, ctx.alloc());
        fill_uniform(x.view(), seed++, 0.0f, 1.0f, s);
        fill_uniform(g.view(), seed++, 0.0f, 2.0f, s);
        const Timing t = ctx.time([&] { cuda::sigmoid_gate({.out = o.view(), .in = x.view(), .gate = g.view()}, s); });
        nlohmann::json r = ctx.base_record("sigmoid_gate_bf16");
        r["rows"] = kRows;
        r["dim"] = kDim;
        r["gate"] = "f32";
        ctx.report(r, t, 8.0 * kRows * kDim);
    }
    for (const int64_t blocks : {1, 8}) {
        constexpr int64_t kTokens = 16384, kHidden = 7168;
        const Tensor bank = Tensor::empty({kTokens, blocks, kHidden}, DType::kBF16, ctx.alloc());
        const Tensor partial = Tensor::empty({kTokens, kHidden}, DType::kBF16, ctx.alloc());
        const Tensor out = Tensor::empty({kTokens, kHidden}, DType::kBF16, ctx.alloc());
        const Tensor query = Tensor::empty({kHidden}, DType::kF32, ctx.alloc());
        const Tensor norm = Tensor::empty({kHidden}, DType::kF32, ctx.alloc());
        fill_uniform(bank.view(), seed++, 0.0f, 1.0f, s);
        fill_uniform(partial.view(), seed++, 0.0f, 1.0f, s);
        fill_uniform(query.view(), seed++, 0.0f, 0.05f, s);
        fill_uniform(norm.view(), seed++, 1.0f, 0.2f, s);
        const Timing t = ctx.time([&] {
            cuda::attn_res_mix({.out = out.view(),
                                .bank = bank.view(),
                                .partial = partial.view(),
                                .query = query.view(),
                                .norm_weight = norm.view(),
                                .eps = 1e-5f},
                               s);
        });
        nlohmann::json r = ctx.base_record("attn_res_mix_bf16");
        r["tokens"] = kTokens;
        r["hidden"] = kHidden;
        r["bank_rows"] = blocks;
        ctx.report(r, t, 2.0 * kTokens * kHidden * static_cast<double>(blocks + 2));
    }
}

}  // namespace penstock::bench
