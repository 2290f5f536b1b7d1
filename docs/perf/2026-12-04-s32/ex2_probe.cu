// Session 32 probe: the special-function unit's exp2 throughput on sm_90 for f32 (ex2.approx.ftz.f32, one result per
// lane) against f16x2 (ex2.approx.f16x2, two results per lane) and bf16x2, each with 8 independent chains per thread so
// that the pipe, not the latency, sets the rate. Prints results (exp2 values) per SM per clock for each. Built and run
// on the GPU machine: nvcc -O3 -arch=sm_90a ex2_probe.cu -o ex2_probe && ./ex2_probe
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cstdio>

template <int kMode>
__global__ void probe(float* out, int iters) {
    float f[8];
    uint32_t h[8];
    for (int i = 0; i < 8; ++i) {
        f[i] = -0.001f * (threadIdx.x + i);
        __half2 v = __floats2half2_rn(f[i], f[i] * 0.5f);
        h[i] = *reinterpret_cast<uint32_t*>(&v);
    }
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            if constexpr (kMode == 0) {
                asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(f[i]));
            } else if constexpr (kMode == 1) {
                asm volatile("ex2.approx.f16x2 %0, %0;" : "+r"(h[i]));
            } else {
                asm volatile("ex2.approx.ftz.bf16x2 %0, %0;" : "+r"(h[i]));
            }
        }
    }
    float s = 0;
    for (int i = 0; i < 8; ++i) s += f[i] + __uint_as_float(h[i]);
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

int main() {
    int sms = 0, clk = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
    float* out;
    cudaMalloc(&out, sizeof(float) * sms * 8 * 256);
    const int iters = 1 << 14;
    const char* names[3] = {"ex2.approx.ftz.f32", "ex2.approx.f16x2", "ex2.approx.ftz.bf16x2"};
    for (int mode = 0; mode < 3; ++mode) {
        for (int rep = 0; rep < 2; ++rep) {
            cudaEvent_t a, b;
            cudaEventCreate(&a);
            cudaEventCreate(&b);
            cudaEventRecord(a);
            if (mode == 0) probe<0><<<sms * 8, 256>>>(out, iters);
            if (mode == 1) probe<1><<<sms * 8, 256>>>(out, iters);
            if (mode == 2) probe<2><<<sms * 8, 256>>>(out, iters);
            cudaEventRecord(b);
            cudaEventSynchronize(b);
            float ms = 0;
            cudaEventElapsedTime(&ms, a, b);
            const double instrs = double(sms) * 8 * 256 * iters * 8;  // per-lane instructions
            const double results = instrs * (mode == 0 ? 1 : 2);
            // results per SM per clock at the nominal max clock (the kernel is short: the clock stays high)
            const double per_clk = results / (ms * 1e-3) / sms / (clk * 1e3);
            printf("%-24s rep %d: %.3f ms, %.1f results / SM / clock (%.1f lane-instructions), err %s\n", names[mode],
                   rep, ms, per_clk, per_clk / (mode == 0 ? 1 : 2), cudaGetErrorString(cudaGetLastError()));
        }
    }
    return 0;
}
