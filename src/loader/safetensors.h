// A read-only safetensors file: mmap'd (MAP_PRIVATE, PROT_READ) or a caller-owned buffer, with the header fully
// validated at open, so that every TensorInfo afterwards lies inside the data section and its byte size matches its
// dtype and shape. Malformed input of any kind is a Status naming the file (and the tensor), never a crash or a read
// outside the bytes. Format: u64 little-endian header length N, N bytes of JSON, then the data section.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace penstock::loader {

// Largest accepted JSON header (the limit of the reference safetensors implementation).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct TensorInfo {
    std::string name;
    DType dtype;
    Shape shape;                        // at most kMaxDims dims, each in [0, 2^40]
    uint64_t offset_begin, offset_end;  // absolute file offsets, [begin, end)

    uint64_t nbytes() const { return offset_end - offset_begin; }
    int64_t numel() const;
};

class SafetensorsFile final {  // mmap'd, read-only, header fully validated at open
public:
    // Maps `path` read-only and validates its header. The mapping lives until the object is destroyed.
    [[nodiscard]] static Result<std::unique_ptr<SafetensorsFile>> open(const std::filesystem::path& path);
    // Same validation over caller-owned bytes, which must outlive the returned object (no copy is made). `name`
    // stands in for the path in messages and path(). For fuzzing and tests.
    [[nodiscard]] static Result<std::unique_ptr<SafetensorsFile>> open_buffer(std::string name,
                                                                              std::span<const uint8_t> bytes);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::filesystem::path& path() const { return path_; }
    const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by name
    // The tensor called `name`, or nullptr (binary search).
    const TensorInfo* find(std::string_view name) const;
    // A contiguous host view of the tensor's bytes in its stored dtype. The memory is read-only (writing through the
    // view faults) and may be unaligned for the dtype (the data section starts at 8 + header length): read elements
    // with memcpy. Valid while this object lives. `info` must come from tensors() / find() of this file.
    TensorView view(const TensorInfo& info) const;
    // The raw bytes of a tensor (same lifetime and contract as view()).
    std::span<const uint8_t> bytes(const TensorInfo& info) const;
    // 8 + the JSON header length: bytes read to parse the header.
    uint64_t header_bytes() const { return header_bytes_; }
    // The "__metadata__" string map as raw JSON text ("{}" when absent).
    const std::string& metadata_json() const { return metadata_json_; }
    uint64_t file_size() const { return size_; }

private:
    SafetensorsFile() = default;
    [[nodiscard]] Status parse();

    std::filesystem::path path_;
    void* map_ = nullptr;  // owned mmap region (null for buffers)
    size_t map_size_ = 0;
    const uint8_t* data_ = nullptr;  // the whole file
    uint64_t size_ = 0;
    uint64_t header_bytes_ = 0;
    std::vector<TensorInfo> tensors_;
    std::string metadata_json_ = "{}";
};

}  // namespace penstock::loader
