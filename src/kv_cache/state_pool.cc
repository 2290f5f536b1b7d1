// KDA state pool bookkeeping.
#include "kv_cache/state_pool.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "core/check.h"

namespace penstock::kv_cache {

KdaStatePool::KdaStatePool(int64_t n_slots, int64_t n_layers, const KdaStateShape& shape, Allocator& alloc,
                           StateMemoryOps ops)
    : n_slots_(n_slots), shape_(shape), alloc_(&alloc), ops_(std::move(ops)) {
    if (!ops_.copy) {
        ops_.copy = [](const TensorView& dst, const TensorView& src) {
            std::memcpy(dst.data, src.data, src.nbytes());
        };
    }
    if (!ops_.zero) ops_.zero = [](const TensorView& dst) { std::memset(dst.data, 0, dst.nbytes()); };
    PENSTOCK_CHECK_GE(n_slots, 0);
    PENSTOCK_CHECK_GE(n_layers, 0);
    PENSTOCK_CHECK_GE(shape.conv_kernel, 1);
    recurrent_.resize(static_cast<size_t>(n_layers));
    conv_.resize(static_cast<size_t>(n_layers));
    grow(0);
}

void KdaStatePool::grow(int64_t new_capacity) {
    const KdaStateShape& s = shape_;
    for (size_t l = 0; l < recurrent_.size(); ++l) {
        Tensor rec = Tensor::empty({new_capacity, s.n_heads, s.k_dim, s.v_dim}, DType::kF32, *alloc_);
        Tensor cnv = Tensor::empty({new_capacity, s.conv_kernel - 1, s.conv_channels}, DType::kF32, *alloc_);
        if (capacity_ > 0) {  // keep the live slots' state
            ops_.copy(rec.view().slice(0, 0, capacity_), recurrent_[l].view());
            ops_.copy(cnv.view().slice(0, 0, capacity_), conv_[l].view());
        }
        recurrent_[l] = std::move(rec);
        conv_[l] = std::move(cnv);
    }
    in_use_.resize(static_cast<size_t>(new_capacity), 0);
    // New ids go under the existing free ones, lowest id on top.
    std::vector<int32_t> fresh;
    for (int64_t i = new_capacity - 1; i >= capacity_; --i) fresh.push_back(static_cast<int32_t>(i));
    free_.insert(free_.begin(), fresh.begin(), fresh.end());
    capacity_ = new_capacity;
}

size_t KdaStatePool::slot_bytes() const {
    const int64_t per_layer =
        shape_.n_heads * shape_.k_dim * shape_.v_dim + (shape_.conv_kernel - 1) * shape_.conv_channels;
    return static_cast<size_t>(per_layer * n_layers()) * sizeof(float);
}

Result<int32_t> KdaStatePool::allocate() {
    if (free_.empty()) {
        if (capacity_ == n_slots_) {
            return resource_exhausted("KDA state pool: all " + std::to_string(n_slots_) + " slots in use");
        }
        grow(std::min(n_slots_, std::max<int64_t>(1, 2 * capacity_)));
    }
    const int32_t slot = free_.back();
    free_.pop_back();
    in_use_[static_cast<size_t>(slot)] = 1;
    reset(slot);
    return slot;
}

void KdaStatePool::reset(int32_t slot) {
    PENSTOCK_CHECK(slot >= 0 && slot < capacity_ && in_use_[static_cast<size_t>(slot)] == 1)
        << "reset of unallocated state slot " << slot;
    for (size_t l = 0; l < recurrent_.size(); ++l) {
        ops_.zero(recurrent_[l].view().slice(0, slot, slot + 1));
        ops_.zero(conv_[l].view().slice(0, slot, slot + 1));
    }
}

void KdaStatePool::release(int32_t slot) {
    PENSTOCK_CHECK(slot >= 0 && slot < capacity_) << "state slot " << slot;
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
