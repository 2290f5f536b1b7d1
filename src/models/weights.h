// Taking named tensors out of a loaded WeightMap with shape checks that report the tensor name: a wrong checkpoint is
// an expected failure (Status), not an abort.
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "loader/checkpoint.h"

namespace penstock::models {

class WeightReader final {
public:
    explicit WeightReader(loader::WeightMap* weights) : weights_(weights) {}

    // Moves out tensor `name` and checks its shape. NotFound / InvalidArgument otherwise.
    [[nodiscard]] Result<Tensor> take(const std::string& name, const Shape& shape);
    // Like take() but absent is fine (returns an undefined Tensor).
    [[nodiscard]] Result<Tensor> take_optional(const std::string& name, const Shape& shape);
    bool contains(const std::string& name) const { return weights_->count(name) != 0; }
    // The shape of tensor `name` (empty when absent), for layouts that vary between exports.
    Shape shape_of(const std::string& name) const {
        auto it = weights_->find(name);
        return it == weights_->end() ? Shape{} : it->second.view().shape_vec();
    }

private:
    loader::WeightMap* weights_;
};

}  // namespace penstock::models
