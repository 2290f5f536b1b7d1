// Device-to-device copy bandwidth (cudaMemcpyAsync), the measured ceiling for memory-bound kernels. Bytes moved
// count the read and the write.
#include "bench/kernels/bench_harness.h"

namespace penstock::bench {

void run_copy_bench(BenchContext& ctx) {
    for (const int64_t mib : {64, 256, 1024, 4096}) {
        const int64_t bytes = mib << 20;
        const Tensor src = Tensor::empty({bytes}, DType::kU8, ctx.alloc());
        const Tensor dst = Tensor::empty({bytes}, DType::kU8, ctx.alloc());
        cuda::fill_bytes_async(src, 0x3c, ctx.stream());
        const Timing t = ctx.time([&] { cuda::copy_async(dst, src, ctx.stream()); });
        nlohmann::json record = ctx.base_record("copy_d2d");
        record["mib"] = mib;
        ctx.report(record, t, 2.0 * static_cast<double>(bytes));
    }
}

}  // namespace penstock::bench
