// KDA state pool bookkeeping.
#include "kv_cache/state_pool.h"

#include <cstring>
#include <string>

#include "core/check.h"

namespace penstock::kv_cache {

KdaStatePool::KdaStatePool(int64_t n_slots, int64_t n_layers, const KdaStateShape& shape)
    : n_slots_(n_slots), shape_(shape), in_use_(static_cast<size_t>(n_slots), 0) {
    PENSTOCK_CHECK_GE(n_slots, 0);
    PENSTOCK_CHECK_GE(n_layers, 0);
    PENSTOCK_CHECK_GE(shape.conv_kernel, 1);
    for (int64_t l = 0; l < n_layers; ++l) {
        recurrent_.push_back(Tensor::empty({n_slots, shape.n_heads, shape.k_dim, shape.v_dim}, DType::kF32));
        conv_.push_back(Tensor::empty({n_slots, shape.conv_kernel - 1, shape.conv_channels}, DType::kF32));
    }
    free_.reserve(static_cast<size_t>(n_slots));
    for (int64_t i = n_slots - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

size_t KdaStatePool::slot_bytes() const {
    const int64_t per_layer =
        shape_.n_heads * shape_.k_dim * shape_.v_dim + (shape_.conv_kernel - 1) * shape_.conv_channels;
    return static_cast<size_t>(per_layer * n_layers()) * sizeof(float);
}

Result<int32_t> KdaStatePool::allocate() {
    if (free_.empty()) {
        return resource_exhausted("KDA state pool: all " + std::to_string(n_slots_) + " slots in use");
    }
    const int32_t slot = free_.back();
    free_.pop_back();
    in_use_[static_cast<size_t>(slot)] = 1;
    for (size_t l = 0; l < recurrent_.size(); ++l) {
        const size_t rec = static_cast<size_t>(shape_.n_heads * shape_.k_dim * shape_.v_dim);
        std::memset(recurrent_[l].ptr<float>() + slot * rec, 0, rec * sizeof(float));
        const size_t cnv = static_cast<size_t>((shape_.conv_kernel - 1) * shape_.conv_channels);
        std::memset(conv_[l].ptr<float>() + slot * cnv, 0, cnv * sizeof(float));
    }
    return slot;
}

void KdaStatePool::release(int32_t slot) {
    PENSTOCK_CHECK(slot >= 0 && slot < n_slots_) << "state slot " << slot;
    PENSTOCK_CHECK(in_use_[static_cast<size_t>(slot)] == 1) << "double free of state slot " << slot;
    in_use_[static_cast<size_t>(slot)] = 0;
    free_.push_back(slot);
}

const TensorView& KdaStatePool::recurrent(int64_t layer) const {
    PENSTOCK_CHECK(layer >= 0 && layer < n_layers()) << "KDA state layer " << layer;
    return recurrent_[static_cast<size_t>(layer)].view();
}

const TensorView& KdaStatePool::conv(int64_t layer) const {
    PENSTOCK_CHECK(layer >= 0 && layer < n_layers()) << "KDA state layer " << layer;
    return conv_[static_cast<size_t>(layer)].view();
}

Status RequestStateSlots::acquire(int64_t id) {
    if (contains(id)) return ok_status();
    PENSTOCK_ASSIGN_OR_RETURN(const int32_t slot, pool_->allocate());
    slots_.emplace(id, slot);
    return ok_status();
}

void RequestStateSlots::release(int64_t id) {
    auto it = slots_.find(id);
    if (it == slots_.end()) return;
    pool_->release(it->second);
    slots_.erase(it);
}

int32_t RequestStateSlots::slot(int64_t id) const {
    auto it = slots_.find(id);
    PENSTOCK_CHECK(it != slots_.end()) << "request " << id << " holds no KDA state slot (not admitted)";
    return it->second;
}

}  // namespace penstock::kv_cache
