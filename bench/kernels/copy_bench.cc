// Device-to-device copy bandwidth (cudaMemcpyAsync), the measured ceiling for memory-bound kernels. Bytes moved
// count the read and the write. Also cuda::copy on strided views at real shapes (the MLA MHA-form K build of
// DeepSeek-V3 / Kimi K3: k_nope per head out of the kv_b output, k_pe broadcast over the heads) against that ceiling,
// and cuda::rope on the MHA form's q rope columns.
#include <cmath>
#include <cstdint>
#include <vector>

#include "bench/kernels/bench_harness.h"
#include "kernels/cuda/cuda_ops.h"

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
    // K [T, H, 192] = [k_nope (128) from kvb [T, H * 256] ; k_pe (64) broadcast from latent [T, 576] column 512], bf16.
    for (const int64_t heads : {128, 96}) {
        const int64_t T = 16384, nope = 128, rope = 64, qk = nope + rope, kvb_row = heads * 256;
        const Tensor kvb = Tensor::empty({T, kvb_row}, DType::kBF16, ctx.alloc());
        const Tensor latent = Tensor::empty({T, 576}, DType::kBF16, ctx.alloc());
        const Tensor k = Tensor::empty({T, heads, qk}, DType::kBF16, ctx.alloc());
        cuda::fill_bytes_async(kvb, 0x3c, ctx.stream());
        cuda::fill_bytes_async(latent, 0x3c, ctx.stream());
        void* s = ctx.stream().handle();
        const Timing t = ctx.time([&] {
            cuda::copy({.out = k.view().slice(2, 0, nope), .in = kvb.view().as_strided(0, {T, heads, nope}, {kvb_row, 256, 1})},
                       s);
            cuda::copy({.out = k.view().slice(2, nope, qk), .in = latent.view().as_strided(512, {T, heads, rope}, {576, 0, 1})},
                       s);
        });
        nlohmann::json record = ctx.base_record("copy_strided_mla_k");
        record["tokens"] = T;
        record["heads"] = heads;
        // written: all of K; read: the k_nope slices (k_pe's 64 columns are read once per row, then cached)
        ctx.report(record, t, 2.0 * static_cast<double>(T * heads * nope * 2) + static_cast<double>(T * heads * rope * 2));
    }
    // RoPE in place on q's rope columns (the MLA MHA form's q [T, H, 192], columns 128 .. 191), bf16, DeepSeek-V3's
    // interleaved pairs and the halves layout: bytes read and written against the copy above.
    for (const int64_t heads : {128, 96}) {
        for (const bool interleaved : {true, false}) {
            const int64_t T = 16384, qk = 192, nope = 128, rot = 64;
            const Tensor q = Tensor::empty({T, heads, qk}, DType::kBF16, ctx.alloc());
            cuda::fill_bytes_async(q, 0x3c, ctx.stream());
            std::vector<int32_t> pos(static_cast<size_t>(T));
            for (int64_t i = 0; i < T; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
            std::vector<float> freq(static_cast<size_t>(rot / 2));
            for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / rot);
            const Tensor pos_d = cuda::to_device(Tensor::from_i32({T}, pos), ctx.alloc(), ctx.stream());
            const Tensor freq_d = cuda::to_device(Tensor::from_f32({rot / 2}, freq), ctx.alloc(), ctx.stream());
            ctx.stream().synchronize();
            void* s = ctx.stream().handle();
            const kernels::RopeParams rp{.x = q.view().slice(2, nope, qk),
                                         .positions = pos_d,
                                         .inv_freq = freq_d,
                                         .attention_factor = 1.0f,
                                         .interleaved = interleaved};
            const Timing t = ctx.time([&] { cuda::rope(rp, s); });
            nlohmann::json record = ctx.base_record("rope_mla_q");
            record["tokens"] = T;
            record["heads"] = heads;
            record["interleaved"] = interleaved;
            ctx.report(record, t, 2.0 * static_cast<double>(T * heads * rot * 2));
        }
    }
}

}  // namespace penstock::bench
