// cuda::rms_norm timing over model-sized shapes, every variant, f32 and bf16 (same Params as the op; correctness is
// the conformance test's job). Bytes moved: in + out per element and the weight once, the least the op must move.
// Then the fused form (residual add + norm + FP8 rows) against the three ops it replaces.
#include <random>
#include <string>
#include <vector>

#include "bench/kernels/bench_harness.h"
#include "core/dtype.h"
#include "kernels/cuda/cuda_ops.h"

namespace penstock::bench {

namespace {

// Random (never zero) host data of `dtype` (f32 or bf16), so the timed kernel reads real values.
Tensor random_host(const Shape& shape, DType dtype, std::mt19937& rng) {
    Tensor t = Tensor::empty(shape, dtype);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < t.numel(); ++i) {
        const float x = normal(rng);
        if (dtype == DType::kF32) {
            t.ptr<float>()[i] = x;
        } else {
            t.ptr<uint16_t>()[i] = float_to_bf16(x);
        }
    }
    return t;
}

const char* variant_name(cuda::RmsNormVariant v) {
    switch (v) {
        case cuda::RmsNormVariant::kAuto:
            return "auto";
        case cuda::RmsNormVariant::kWarpPerRow:
            return "warp_per_row";
        case cuda::RmsNormVariant::kBlockPerRow:
            return "block_per_row";
    }
    return "?";
}

}  // namespace

void run_rms_norm_bench(BenchContext& ctx) {
    std::mt19937 rng(/*seed=*/1234);
    const DType kDtypes[] = {DType::kBF16, DType::kF32};
    const cuda::RmsNormVariant kVariants[] = {cuda::RmsNormVariant::kAuto, cuda::RmsNormVariant::kWarpPerRow,
                                              cuda::RmsNormVariant::kBlockPerRow};
    for (const DType dtype : kDtypes) {
        for (const int64_t dim : {512, 1536, 7168, 12288}) {
            for (const int64_t n_rows : {1, 128, 4096, 16384}) {
                const Tensor x_host = random_host({n_rows, dim}, dtype, rng);
                const Tensor w_host = random_host({dim}, dtype, rng);
                const Tensor x = cuda::to_device(x_host, ctx.alloc(), ctx.stream());
                const Tensor w = cuda::to_device(w_host, ctx.alloc(), ctx.stream());
                const Tensor y = Tensor::empty({n_rows, dim}, dtype, ctx.alloc());
                cuda::fill_bytes_async(y, 0xff, ctx.stream());  // poison
                const double elem = static_cast<double>(dtype_bits(dtype) / 8);
                const double bytes = static_cast<double>(n_rows * dim) * 2.0 * elem + static_cast<double>(dim) * elem;
                for (const cuda::RmsNormVariant variant : kVariants) {
                    const kernels::RmsNormParams p{.out = y, .in = x, .weight = w, .eps = 1e-6f};
                    const Timing t = ctx.time([&] { cuda::rms_norm(p, variant, ctx.stream().handle()); });
                    nlohmann::json record = ctx.base_record("rms_norm");
                    record["variant"] = variant_name(variant);
                    record["dtype"] = std::string(dtype_name(dtype));
                    record["weight_dtype"] = std::string(dtype_name(dtype));
                    record["n_rows"] = n_rows;
                    record["dim"] = dim;
                    ctx.report(record, t, bytes);
                }
                ctx.stream().synchronize();  // x_host / w_host die at the end of this iteration
            }
        }
    }

    // A decoder block's norm with both fusions (kernels/ops.h RmsNormParams: hidden += sub_out, then the norm and the
    // FP8 rows of its output) against the three ops it replaces (add, rms_norm, fp8_act_quant), bf16, auto mapping.
    // Bytes: the fused op's least traffic (read hidden and sub_out, write hidden, out, e4m3 and scales); the unfused
    // figure is over the same bytes, so the GB/s ratio is the time ratio.
    for (const int64_t dim : {1536, 7168}) {
        for (const int64_t n_rows : {4096, 16384}) {
            const int64_t kb = (dim + kernels::kFp8Block - 1) / kernels::kFp8Block;
            const Tensor hidden =
                cuda::to_device(random_host({n_rows, dim}, DType::kBF16, rng), ctx.alloc(), ctx.stream());
            const Tensor sub =
                cuda::to_device(random_host({n_rows, dim}, DType::kBF16, rng), ctx.alloc(), ctx.stream());
            const Tensor w = cuda::to_device(random_host({dim}, DType::kBF16, rng), ctx.alloc(), ctx.stream());
            const Tensor y = Tensor::empty({n_rows, dim}, DType::kBF16, ctx.alloc());
            const Tensor q = Tensor::empty({n_rows, dim}, DType::kF8E4M3, ctx.alloc());
            const Tensor scale = Tensor::empty({kb * n_rows}, DType::kF32, ctx.alloc());
            const TensorView scale_v = scale.view().as_strided(0, {n_rows, kb}, {1, n_rows});  // cuBLASLt's layout
            const double bytes =
                static_cast<double>(n_rows * dim) * (2.0 * 4 + 1) + static_cast<double>(n_rows * kb) * 4;
            // hidden grows by sub each call; the values stay finite over the timed reps (bf16 range).
            const kernels::RmsNormParams fused{.out = y,
                                               .in = hidden,
                                               .weight = w,
                                               .eps = 1e-6f,
                                               .residual = sub,
                                               .quant_out = q,
                                               .quant_scale = scale_v};
            const Timing t_fused = ctx.time([&] { cuda::rms_norm(fused, ctx.stream().handle()); });
            const Timing t_unfused = ctx.time([&] {
                cuda::add({.out = hidden, .a = hidden, .b = sub}, ctx.stream().handle());
                cuda::rms_norm({.out = y, .in = hidden, .weight = w, .eps = 1e-6f}, ctx.stream().handle());
                cuda::fp8_act_quant({.out = q, .scale = scale_v, .in = y}, ctx.stream().handle());
            });
            for (const bool is_fused : {false, true}) {
                nlohmann::json record = ctx.base_record("add_rms_norm_fp8");
                record["variant"] = is_fused ? "fused" : "add + rms_norm + fp8_act_quant";
                record["dtype"] = "bf16";
                record["n_rows"] = n_rows;
                record["dim"] = dim;
                ctx.report(record, is_fused ? t_fused : t_unfused, bytes);
            }
            ctx.stream().synchronize();
        }
    }
}

}  // namespace penstock::bench
