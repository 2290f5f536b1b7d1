// safetensors writer: contiguous host tensors -> one file (or one byte buffer) that SafetensorsFile reads back.
// Tensors are laid out in the given order; the JSON header is padded with spaces to a multiple of 8 bytes so that
// the data section is 8-byte aligned, as the reference implementation does.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace penstock::loader {

using NamedViews = std::vector<std::pair<std::string, TensorView>>;

// The complete file contents for `tensors` (each a contiguous host view of any dtype; names unique, not
// "__metadata__", not empty). `metadata` becomes the "__metadata__" string map when non-empty.
[[nodiscard]] Result<std::vector<uint8_t>> serialize_safetensors(
    const NamedViews& tensors, const std::map<std::string, std::string>& metadata = {});

// Writes serialize_safetensors(tensors, metadata) to `path` (via a temporary file in the same directory renamed
// into place, so readers never see a half-written file). Errors name the path.
[[nodiscard]] Status write_safetensors(const std::filesystem::path& path, const NamedViews& tensors,
                                       const std::map<std::string, std::string>& metadata = {});

}  // namespace penstock::loader
