// cuda::gemm (cuBLASLt, bf16, fp32 accumulation) and cuda::attention (the correct-first CUDA-core flash kernel) timed
// at model shapes; reported as TFLOP/s (and the bytes field as the operands' size). Baselines for the gap:
// PERF.md's cuBLAS bf16 754 TFLOP/s (8192^3) and cuDNN SDPA 620-655 TFLOP/s (causal, d 128 / 192-128).
#include <random>
#include <string>
#include <vector>

#include "bench/kernels/bench_harness.h"
#include "core/dtype.h"
#include "kernels/cuda/cuda_ops.h"

namespace penstock::bench {

namespace {

Tensor random_bf16(const Shape& shape, std::mt19937& rng, Allocator& alloc, const cuda::Stream& stream) {
    Tensor t = Tensor::empty(shape, DType::kBF16);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < t.numel(); ++i) t.ptr<uint16_t>()[i] = float_to_bf16(normal(rng));
    Tensor d = cuda::to_device(t, alloc, stream);
    stream.synchronize();
    return d;
}

Tensor dev_i32(const std::vector<int32_t>& v, Allocator& alloc, const cuda::Stream& stream) {
    const Tensor h = Tensor::from_i32({static_cast<int64_t>(v.size())}, v);
    Tensor d = cuda::to_device(h, alloc, stream);
    stream.synchronize();
    return d;
}

}  // namespace

void run_gemm_bench(BenchContext& ctx) {
    std::mt19937 rng(/*seed=*/42);
    struct G {
        int64_t m, n, k;
    };
    const G kShapes[] = {{8192, 8192, 8192}, {16384, 2048, 7168}, {16384, 7168, 2048}, {4096, 24576, 1536}};
    for (const G& g : kShapes) {
        const Tensor a = random_bf16({g.m, g.k}, rng, ctx.alloc(), ctx.stream());
        const Tensor b = random_bf16({g.n, g.k}, rng, ctx.alloc(), ctx.stream());
        const Tensor out = Tensor::empty({g.m, g.n}, DType::kBF16, ctx.alloc());
        const kernels::GemmParams p{.out = out, .a = a, .b = b, .trans_b = true, .alpha = 1.0f, .beta = 0.0f};
        const Timing t = ctx.time([&] { cuda::gemm(p, ctx.stream().handle()); });
        const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
        nlohmann::json record = ctx.base_record("gemm");
        record["dtype"] = "bf16";
        record["m"] = g.m;
        record["n"] = g.n;
        record["k"] = g.k;
        record["tflops"] = flops / (t.median_us * 1e-6) / 1e12;
        ctx.report(record, t, static_cast<double>((g.m * g.k + g.n * g.k + g.m * g.n) * 2));
    }
}

void run_attention_bench(BenchContext& ctx) {
    std::mt19937 rng(/*seed=*/43);
    struct A {
        const char* name;
        int64_t heads, kv_heads, seq, d_qk, d_v;
    };
    const A kShapes[] = {{"mha_d128", 32, 32, 4096, 128, 128}, {"mla_mha_192_128", 16, 16, 4096, 192, 128}};
    for (const A& s : kShapes) {
        const Tensor q = random_bf16({s.seq, s.heads, s.d_qk}, rng, ctx.alloc(), ctx.stream());
        const Tensor k = random_bf16({s.seq, s.kv_heads, s.d_qk}, rng, ctx.alloc(), ctx.stream());
        const Tensor v = random_bf16({s.seq, s.kv_heads, s.d_v}, rng, ctx.alloc(), ctx.stream());
        const Tensor out = Tensor::empty({s.seq, s.heads, s.d_v}, DType::kBF16, ctx.alloc());
        const Tensor lse = Tensor::empty({s.seq, s.heads}, DType::kF32, ctx.alloc());
        const auto len = static_cast<int32_t>(s.seq);
        const Tensor cu = dev_i32({0, len}, ctx.alloc(), ctx.stream());
        const Tensor pos0 = dev_i32({0}, ctx.alloc(), ctx.stream());
        const kernels::AttentionParams p{.out = out,
                                         .lse = lse,
                                         .q = q,
                                         .k = k,
                                         .v = v,
                                         .cu_seqlens_q = cu,
                                         .cu_seqlens_k = cu,
                                         .q_pos0 = pos0,
                                         .k_pos0 = pos0,
                                         .scale = 0.08f,
                                         .causal = true};
        const Timing t = ctx.time([&] { cuda::attention(p, ctx.stream().handle()); });
        // Causal: half of the 2 * seq^2 * heads * (d_qk + d_v) FLOPs of the full score and value products.
        const double flops = static_cast<double>(s.seq) * static_cast<double>(s.seq) * static_cast<double>(s.heads) *
                             static_cast<double>(s.d_qk + s.d_v);
        nlohmann::json record = ctx.base_record("attention");
        record["shape"] = s.name;
        record["dtype"] = "bf16";
        record["heads"] = s.heads;
        record["seq"] = s.seq;
        record["d_qk"] = s.d_qk;
        record["d_v"] = s.d_v;
        record["tflops"] = flops / (t.median_us * 1e-6) / 1e12;
        ctx.report(record, t,
                   static_cast<double>(s.seq * (s.heads * (s.d_qk + s.d_v) + s.kv_heads * (s.d_qk + s.d_v)) * 2));
    }
}

}  // namespace penstock::bench
