// Taking named tensors out of a loaded WeightMap with shape checks that report the tensor name: a wrong checkpoint is
// an expected failure (Status), not an abort.
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/ops.h"
#include "loader/checkpoint.h"

namespace penstock::models {

class WeightReader final {
public:
    // Weights are read on the host and placed on `placement`'s device (its allocator and stream) as they are taken.
    // Matrix weights (2-D and up) become `matrix_dtype` (kF32 or kBF16, rounded to nearest even) when placed.
    // dummy_seed != 0: `--load-format dummy` — nothing is read; every tensor taken is generated with seeded random
    // values (kernels::fill_random, on the placement device for take()/take_slice(): a rank generates only its own
    // shard there) of the shape the model asks for: matrices uniform with std 1/sqrt(last dim), 1-D `*norm*` weights
    // 1, other vectors std 0.02; a slice gets its own stream (not the whole tensor's slice). Every optional or
    // alternative tensor "exists" (contains() is true), so the first-choice layout of each probe is built.
    WeightReader(loader::WeightMap* weights, const kernels::Context& placement, DType matrix_dtype = DType::kF32,
                 uint64_t dummy_seed = 0)
        : weights_(weights), placement_(placement), matrix_dtype_(matrix_dtype), dummy_seed_(dummy_seed) {}
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

private:
    // Dummy weights: a tensor of `shape` for `name` (slice = its own stream) on `ctx`, matrices in matrix_dtype_.
    Tensor generate(const std::string& name, const Shape& shape, uint64_t slice, const kernels::Context& ctx,
                    bool host) const;

    loader::WeightMap* weights_;
    kernels::Context placement_;
    DType matrix_dtype_ = DType::kF32;
    uint64_t dummy_seed_ = 0;
};

}  // namespace penstock::models
