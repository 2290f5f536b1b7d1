// Shared pieces of the CUDA kernel tests: a fixture that skips (never fails) on machines without a usable GPU and
// owns one allocator and stream on device 0, and host <-> device helpers for f32/bf16 vectors. Comparison is
// all_close from tests/kernels/ref_test_util.h, the same harness the CPU reference tests use.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/device.h"

namespace penstock::test {

class CudaTest : public ::testing::Test {
  protected:
    void SetUp() override {
        const Result<int> n = cuda::device_count();
        if (!n.ok()) GTEST_SKIP() << "no usable GPU: " << n.status().to_string();
        alloc_ = std::make_unique<cuda::CudaCachingAllocator>(/*device=*/0);
        stream_ = std::make_unique<cuda::Stream>(/*device=*/0);
    }

    cuda::CudaCachingAllocator& alloc() { return *alloc_; }
    const cuda::Stream& stream() { return *stream_; }
    void* raw_stream() { return stream_->handle(); }

  private:
    std::unique_ptr<cuda::CudaCachingAllocator> alloc_;  // declared first: outlives the stream
    std::unique_ptr<cuda::Stream> stream_;
};

// Host f32 values in `dtype` storage (f32 copied, bf16 rounded to nearest even) as a contiguous host tensor.
inline Tensor host_tensor(const std::vector<float>& values, DType dtype, const Shape& shape) {
    Tensor t = Tensor::empty(shape, dtype);
    PENSTOCK_CHECK_EQ(t.numel(), static_cast<int64_t>(values.size()));
    if (dtype == DType::kF32) {
        std::memcpy(t.ptr<float>(), values.data(), values.size() * sizeof(float));
    } else {
        PENSTOCK_CHECK(dtype == DType::kBF16) << "host_tensor: " << dtype_name(dtype);
        for (size_t i = 0; i < values.size(); ++i) t.ptr<uint16_t>()[i] = float_to_bf16(values[i]);
    }
    return t;
}

// The values a kernel sees after `values` is stored as `dtype` (identity for f32, bf16 rounding otherwise).
inline std::vector<float> round_to(const std::vector<float>& values, DType dtype) {
    if (dtype == DType::kF32) return values;
    std::vector<float> out(values.size());
    for (size_t i = 0; i < values.size(); ++i) out[i] = bf16_to_float(float_to_bf16(values[i]));
    return out;
}

// Element i of a contiguous host buffer of `dtype` (f32 or bf16) as f32.
inline float element_f32(const void* data, DType dtype, int64_t i) {
    if (dtype == DType::kF32) return static_cast<const float*>(data)[i];
    return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
}

}  // namespace penstock::test
