// Little-endian byte records for messages between Penstock processes (pipeline stage plans, disaggregation records):
// fixed-size values appended with put_le, length-prefixed byte strings with put_bytes, and a bounds-checked
// ByteReader that never reads past its span. The hosts are little-endian (x86-64, aarch64).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace penstock {

template <class T>
void put_le(std::vector<uint8_t>* out, T v) {
    const size_t at = out->size();
    out->resize(at + sizeof(T));
    std::memcpy(out->data() + at, &v, sizeof(T));
}

// A u32 length, then the bytes.
inline void put_bytes(std::vector<uint8_t>* out, std::span<const uint8_t> b) {
    put_le<uint32_t>(out, static_cast<uint32_t>(b.size()));
    const size_t at = out->size();
    out->resize(at + b.size());
    if (!b.empty()) std::memcpy(out->data() + at, b.data(), b.size());
}

class ByteReader final {
public:
    explicit ByteReader(std::span<const uint8_t> b) : b_(b) {}
    // False (and nothing read) when fewer than sizeof(T) bytes are left.
    template <class T>
    bool get(T* v) {
        if (b_.size() - pos_ < sizeof(T)) return false;
        std::memcpy(v, b_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return true;
    }
    // A put_bytes string of at most `limit` bytes.
    bool bytes(std::vector<uint8_t>* v, size_t limit) {
        uint32_t n = 0;
        if (!get(&n) || n > limit || b_.size() - pos_ < n) return false;
        v->assign(b_.begin() + static_cast<std::ptrdiff_t>(pos_), b_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
        pos_ += n;
        return true;
    }
    size_t left() const { return b_.size() - pos_; }
    bool done() const { return pos_ == b_.size(); }

private:
    std::span<const uint8_t> b_;
    size_t pos_ = 0;
};

}  // namespace penstock
