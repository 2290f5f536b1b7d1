// cuda::rms_norm timing over model-sized shapes, every variant, f32 and bf16 (same Params as the op; correctness is
// the conformance test's job). Bytes moved: in + out per element and the weight once, the least the op must move.
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
}

}  // namespace penstock::bench
