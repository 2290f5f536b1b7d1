// Taking named tensors out of a loaded WeightMap with shape checks that report the tensor name: a wrong checkpoint is
// an expected failure (Status), not an abort.
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/ops.h"
#include "loader/checkpoint.h"

namespace penstock::models {

// How a reader hands out the weights of a block-FP8 checkpoint (ModelOptions::fp8_weights, resolved).
struct Fp8ReadMode {
    // true: the checkpoint was loaded raw (LoadOptions::dequantize_fp8 = false), take_fp8*() keep e4m3 + scales, and
    // every other take*() dequantises an e4m3 tensor with its `<name>_scale_inv` on the host. With dummy weights,
    // take_fp8*() generate e4m3 + scales. false: nothing FP8 is handed out (the loader dequantised everything).
    bool native = false;
    int64_t block_n = 128, block_k = 128;  // quantization_config.weight_block_size (native: 128 x 128 only)
};

// A linear weight as the FP8 kernels take it, or a dense one.
struct Fp8Tensor {
    Tensor weight;  // [..., n, k] f8e4m3 when `scale` is defined, else the reader's matrix dtype
    Tensor scale;   // [..., ceil(n / 128), ceil(k / 128)] f32 (weight_scale_inv, a multiplier), or undefined
};

class WeightReader final {
public:
    // Weights are read on the host and placed on `placement`'s device (its allocator and stream) as they are taken.
    // Matrix weights (2-D and up) become `matrix_dtype` (kF32 or kBF16, rounded to nearest even) when placed.
    // dummy_seed != 0: `--load-format dummy` — nothing is read; every tensor taken is generated with seeded random
    // values (kernels::fill_random, on the placement device for take()/take_slice(): a rank generates only its own
    // shard there) of the shape the model asks for: matrices uniform with std 1/sqrt(last dim), 1-D `*norm*` weights
    // 1, other vectors std 0.02; a slice gets its own stream (not the whole tensor's slice). Every optional or
    // alternative tensor "exists" (contains() is true), so the first-choice layout of each probe is built.
    // `fp8`: see Fp8ReadMode.
    WeightReader(loader::WeightMap* weights, const kernels::Context& placement, DType matrix_dtype = DType::kF32,
                 uint64_t dummy_seed = 0, const Fp8ReadMode& fp8 = Fp8ReadMode{})
        : weights_(weights), placement_(placement), matrix_dtype_(matrix_dtype), dummy_seed_(dummy_seed), fp8_(fp8) {}
    explicit WeightReader(loader::WeightMap* weights) : weights_(weights) {}

    // Moves out tensor `name`, checks its shape and places it. NotFound / InvalidArgument otherwise.
    [[nodiscard]] Result<Tensor> take(const std::string& name, const Shape& shape);
    // Like take() but the tensor stays on the host (for weights that are rearranged before use; place() them after).
    [[nodiscard]] Result<Tensor> take_host(const std::string& name, const Shape& shape);
    // Tensor parallelism: like take()/take_host() but keeps only indices [range.begin, range.end) of dimension `dim`
    // of a tensor whose whole shape must be `shape` (a contiguous copy of the slice).
    [[nodiscard]] Result<Tensor> take_slice(const std::string& name, const Shape& shape, int dim, int64_t begin,
                                            int64_t end);
    [[nodiscard]] Result<Tensor> take_host_slice(const std::string& name, const Shape& shape, int dim, int64_t begin,
                                                 int64_t end);
    // A host tensor moved to the placement device (the same tensor on the CPU).
    Tensor place(Tensor host) const;
    // Like place() but never converts to the matrix dtype: for weights that f32-only ops read whatever the
    // activation dtype (e.g. the KDA short-conv kernel [channels, kernel]).
    Tensor place_f32(Tensor host) const;
    // Like take() but absent is fine (returns an undefined Tensor).
    [[nodiscard]] Result<Tensor> take_optional(const std::string& name, const Shape& shape);
    bool contains(const std::string& name) const { return dummy() || weights_->count(name) != 0; }
    bool dummy() const { return dummy_seed_ != 0; }
    // The shape of tensor `name` (empty when absent, and always with dummy weights), for layouts that vary between
    // exports.
    Shape shape_of(const std::string& name) const {
        if (dummy()) return {};
        auto it = weights_->find(name);
        return it == weights_->end() ? Shape{} : it->second.view().shape_vec();
    }

    // FP8 (models.md "FP8 weights"). True when take_fp8*(name) will hand out e4m3 + scales: native mode and the
    // tensor is stored as e4m3 (always, with dummy weights).
    bool fp8_native(const std::string& name) const;
    // Like take_slice() of a 2-D `[n, k]` weight, but an FP8 tensor (fp8_native) stays e4m3 with its scale rows
    // [begin / 128, ceil(end / 128)) (dim 0) or columns (dim 1), both placed as they are. The slice must keep whole
    // blocks: begin a multiple of the block, end too unless it is the dimension's end; otherwise InvalidArgument
    // naming the tensor and the cut. Not fp8_native: the dense take_slice() (scale undefined).
    [[nodiscard]] Result<Fp8Tensor> take_fp8_slice(const std::string& name, const Shape& shape, int dim, int64_t begin,
                                                   int64_t end);
    // The whole e4m3 tensor and its scale on the host (the MoE stacks experts from them). Dummy weights: generated
    // on the host. InvalidArgument when the tensor is not native FP8 (fp8_native), or for a scale of the wrong
    // shape (naming both shapes).
    [[nodiscard]] Result<Fp8Tensor> take_host_fp8(const std::string& name, const Shape& shape);
    // take_host_fp8() placed on the placement device; with dummy weights generated there (a rank's own shard).
    [[nodiscard]] Result<Fp8Tensor> take_fp8(const std::string& name, const Shape& shape);
    // Dummy weights in FP8: an e4m3 tensor of `shape` ([..., n, k]) and its block scales, generated on `ctx` (this
    // rank's device for placed tensors) so that e4m3 * scale is uniform-like with std ~ 1/sqrt(k).
    Fp8Tensor generate_fp8(const std::string& name, const Shape& shape, uint64_t slice,
                           const kernels::Context& ctx) const;
    const Fp8ReadMode& fp8_mode() const { return fp8_; }
    // The dense form of an e4m3 weight handed out by take_fp8*() (placed, or on the host): e4m3 * scale per block in
    // f32 on the host (loader::dequantize_fp8_blocks, as take() dequantises a raw FP8 tensor), placed in the matrix
    // dtype. For weights used both ways (MLA's kv_b: the FP8 attention's K / V GEMM and the absorbed form's slices).
    [[nodiscard]] Result<Tensor> dense_of(const Fp8Tensor& t) const;

private:
    // Dummy weights: a tensor of `shape` for `name` (slice = its own stream) on `ctx`, matrices in matrix_dtype_.
    Tensor generate(const std::string& name, const Shape& shape, uint64_t slice, const kernels::Context& ctx,
                    bool host) const;

    loader::WeightMap* weights_;
    kernels::Context placement_;
    DType matrix_dtype_ = DType::kF32;
    uint64_t dummy_seed_ = 0;
    Fp8ReadMode fp8_;
};

// A contiguous host copy of a host view with any strides (any dtype; bytes copied as they are).
Tensor host_contiguous_copy(const TensorView& v);
// Copies host view src into host view dst (same shape and dtype, any strides; bytes as they are).
void host_copy_into(const TensorView& dst, const TensorView& src);

}  // namespace penstock::models
