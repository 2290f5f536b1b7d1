// Helpers for the CUDA op conformance tests (tests/kernels/cuda/*_op_test.cc): a Pair is one logical tensor held
// twice with the same layout, as an f32 host copy (what the CPU reference reads) and as a device copy in the dtype
// under test (bf16 values are rounded first, so both sides see the same numbers). Strided pairs pad every dim but the
// first by 3 and start one element in, as tests/kernels/ref_test_util.h's random_buffer does, so strided kernels and
// stray writes are both exercised. Outputs are poisoned (all bytes 0xff: NaN in f32 and bf16) and their padding must
// come back untouched.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <set>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cuda/device.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/ref_test_util.h"
#include "tests/kernels/tolerance.h"

namespace penstock::test {

struct Pair {
    Tensor host;     // f32 backing (host)
    Tensor dev;      // backing in `dtype` (device)
    Tensor staging;  // host copy in `dtype` the device copy came from (kept alive for the async copy)
    TensorView hv;   // the logical view into host
    TensorView dv;   // the same view into dev
    DType dtype = DType::kF32;
};

// Rows per expert group for grouped-GEMM cases: Poisson(mean) rows, at least 1, and a group empty with probability
// empty_frac (MoE routing's uneven, partly empty groups).
inline std::vector<int32_t> random_sizes(std::mt19937& rng, int n_groups, int mean, double empty_frac) {
    std::vector<int32_t> s(static_cast<size_t>(n_groups));
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::poisson_distribution<int> pois(mean);
    for (int32_t& x : s) x = u(rng) < empty_frac ? 0 : std::max(1, pois(rng));
    return s;
}

inline Tolerance tol_for(DType d) { return d == DType::kF32 ? kF32Tol : kBF16Tol; }

// A pair over `values` laid out as `padded` (row major), viewed as `shape` starting at (0, 1, 1, ...) when strided.
inline Pair make_pair_from(const std::vector<float>& values, const Shape& shape, DType dtype, bool strided,
                           cuda::CudaCachingAllocator& alloc, const cuda::Stream& stream) {
    Shape padded = shape;
    if (strided) {
        for (size_t d = 1; d < padded.size(); ++d) padded[d] += 3;
    }
    PENSTOCK_CHECK_EQ(numel_of(padded), static_cast<int64_t>(values.size()));
    Pair p;
    p.dtype = dtype;
    const std::vector<float> rounded = round_to(values, dtype);
    p.host = Tensor::from_f32(padded, rounded);
    p.staging = host_tensor(rounded, dtype, padded);
    p.dev = cuda::to_device(p.staging, alloc, stream);
    p.hv = p.host.view();
    p.dv = p.dev.view();
    if (strided) {
        for (size_t d = 1; d < shape.size(); ++d) {
            p.hv = p.hv.slice(static_cast<int>(d), 1, 1 + shape[d]);
            p.dv = p.dv.slice(static_cast<int>(d), 1, 1 + shape[d]);
        }
    }
    return p;
}

inline Shape padded_shape(const Shape& shape, bool strided) {
    Shape padded = shape;
    if (strided) {
        for (size_t d = 1; d < padded.size(); ++d) padded[d] += 3;
    }
    return padded;
}

// Seeded uniform values in [lo, hi).
inline Pair random_pair(std::mt19937& rng, const Shape& shape, DType dtype, bool strided,
                        cuda::CudaCachingAllocator& alloc, const cuda::Stream& stream, float lo = -1.0f,
                        float hi = 1.0f) {
    return make_pair_from(random_floats(rng, numel_of(padded_shape(shape, strided)), lo, hi), shape, dtype, strided,
                          alloc, stream);
}

// A device output whose backing is poisoned (NaN); the host side holds zeros (the reference writes it).
inline Pair poisoned_pair(const Shape& shape, DType dtype, bool strided, cuda::CudaCachingAllocator& alloc,
                          const cuda::Stream& stream) {
    Pair p = make_pair_from(std::vector<float>(static_cast<size_t>(numel_of(padded_shape(shape, strided))), 0.0f),
                            shape, dtype, strided, alloc, stream);
    cuda::fill_bytes_async(p.dev, 0xff, stream);
    return p;
}

// Routing-like group sizes that make many tail tiles of at most 64 rows (one consumer warpgroup of the TMA grouped
// GEMMs then passes the stages on without products): per group 0 (10%), 1..64 (55%), 65..128 (20%) or 129..600 rows
// (15%), cut so that the sum fits `max_rows`.
inline std::vector<int32_t> tail_heavy_sizes(std::mt19937& rng, int n_groups, int64_t max_rows) {
    std::vector<int32_t> s(static_cast<size_t>(n_groups));
    std::uniform_real_distribution<double> u(0.0, 1.0);
    int64_t used = 0;
    for (int32_t& x : s) {
        const double r = u(rng);
        const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
        x = r < 0.10 ? 0 : r < 0.65 ? pick(1, 64) : r < 0.85 ? pick(65, 128) : pick(129, 600);
        x = static_cast<int32_t>(std::min<int64_t>(x, max_rows - used));
        used += x;
    }
    return s;
}

// Whether the work queued on `stream` finishes within `seconds` (polled). A kernel that hangs cannot be stopped from
// the host: the caller reports it and ends the process, whose exit returns the GPU.
inline bool stream_finishes_within(void* stream, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (cudaStreamQuery(static_cast<cudaStream_t>(stream)) == cudaErrorNotReady) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// Waits up to `seconds` for `stream`; on a hang prints "<what> did not finish in N s: the kernel hangs" and ends the
// process with status 1 (the only way to get the GPU back).
inline void finish_or_exit(void* stream, double seconds, const std::string& what) {
    if (stream_finishes_within(stream, seconds)) return;
    std::fprintf(stderr, "%s did not finish in %.0f s: the kernel hangs\n", what.c_str(), seconds);
    std::fflush(stderr);
    std::_Exit(1);
}

// Exclusive prefix sum of group sizes: the offsets [0, s0, s0 + s1, ...] of a grouped GEMM.
inline std::vector<int32_t> offsets_of(const std::vector<int32_t>& sizes) {
    std::vector<int32_t> off(1, 0);
    for (int32_t x : sizes) off.push_back(off.back() + x);
    return off;
}

// Device i32 tensor of `values` (contiguous 1-d or `shape`).
inline Tensor dev_i32(const std::vector<int32_t>& values, cuda::CudaCachingAllocator& alloc, const cuda::Stream& stream,
                      Shape shape = {}) {
    if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
    const Tensor h = Tensor::from_i32(shape, values);
    Tensor d = cuda::to_device(h, alloc, stream);
    stream.synchronize();
    return d;
}

inline std::vector<int32_t> read_i32(const Tensor& dev, const cuda::Stream& stream) {
    const Tensor h = cuda::to_host(dev, stream);
    return std::vector<int32_t>(h.ptr<int32_t>(), h.ptr<int32_t>() + h.numel());
}

// The device view's elements (row major) as f32, and whether every backing element outside the view kept the
// poison (NaN) when `check_padding`.
struct Readback {
    std::vector<float> values;
    int64_t touched_padding = 0;
};

inline Readback read_pair(const Pair& p, const cuda::Stream& stream, bool check_padding) {
    const Tensor h = cuda::to_host(p.dev, stream);
    const Tensor f = to_f32(h);
    TensorView v = p.hv;
    const int64_t offset = (static_cast<const char*>(p.hv.data) - static_cast<const char*>(p.host.view().data)) /
                           static_cast<int64_t>(sizeof(float));
    v.data = f.ptr<float>() + offset;
    Readback r;
    r.values = read_f32(v);
    if (check_padding) {
        std::set<int64_t> inside;
        for_each_index(v.shape_vec(),
                       [&](const std::vector<int64_t>& idx) { inside.insert(offset + offset_of(v, idx)); });
        for (int64_t i = 0; i < f.numel(); ++i) {
            if (!inside.count(i) && !std::isnan(f.ptr<float>()[i])) ++r.touched_padding;
        }
    }
    return r;
}

// Compares a device output with the reference's host output (same layout), and checks its padding.
inline void expect_pair_close(const Pair& got, const TensorView& ref_view, Tolerance tol, const cuda::Stream& stream,
                              bool check_padding = true) {
    const Readback r = read_pair(got, stream, check_padding);
    std::vector<float> expect = read_f32(ref_view);
    // Exact ops: the reference's f32 value stored in the output's dtype (round to nearest even).
    if (tol.atol == 0.0 && tol.rtol == 0.0) expect = round_to(expect, got.dtype);
    EXPECT_TRUE(all_close(r.values, to_double(expect), tol, ref_view.shape_vec()));
    if (check_padding) {
        EXPECT_EQ(r.touched_padding, 0) << "elements written outside the view";
    }
}

}  // namespace penstock::test
