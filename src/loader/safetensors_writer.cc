// safetensors serialisation (see safetensors_writer.h).
#include "loader/safetensors_writer.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

namespace penstock::loader {

namespace {

std::string safetensors_dtype_name(DType dtype) {
    switch (dtype) {
        case DType::kF32:
            return "F32";
        case DType::kBF16:
            return "BF16";
        case DType::kF16:
            return "F16";
        case DType::kF8E4M3:
            return "F8_E4M3";
        case DType::kE8M0:
            return "F8_E8M0";
        case DType::kFP4E2M1:
            return "F4";
        case DType::kI8:
            return "I8";
        case DType::kU8:
            return "U8";
        case DType::kI32:
            return "I32";
        case DType::kI64:
            return "I64";
        case DType::kBool:
            return "BOOL";
    }
    return "?";
}

}  // namespace

Result<std::vector<uint8_t>> serialize_safetensors(const NamedViews& tensors,
                                                   const std::map<std::string, std::string>& metadata) {
    nlohmann::json header = nlohmann::json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::set<std::string> names;
    uint64_t offset = 0;
    for (const auto& [name, v] : tensors) {
        if (name.empty() || name == "__metadata__") return invalid_argument("invalid tensor name '" + name + "'");
        if (!names.insert(name).second) return invalid_argument("duplicate tensor name '" + name + "'");
        if (v.device != Device::kCPU) return invalid_argument("tensor '" + name + "' is not in host memory");
        if (!v.is_contiguous()) return invalid_argument("tensor '" + name + "' is not contiguous");
        if (v.data == nullptr && v.nbytes() > 0) return invalid_argument("tensor '" + name + "' has no data");
        const uint64_t n = v.nbytes();
        header[name] = {{"dtype", safetensors_dtype_name(v.dtype)},
                        {"shape", v.shape_vec()},
                        {"data_offsets", {offset, offset + n}}};
        offset += n;
    }
    std::string text;
    try {
        text = header.dump();
    } catch (const std::exception& e) {  // e.g. a name that is not valid UTF-8
        return invalid_argument(std::string("cannot encode safetensors header: ") + e.what());
    }
    text.append((8 - text.size() % 8) % 8, ' ');
    std::vector<uint8_t> out(8 + text.size() + offset);
    const uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
    std::memcpy(out.data() + 8, text.data(), text.size());
    uint8_t* p = out.data() + 8 + text.size();
    for (const auto& [name, v] : tensors) {
        if (v.nbytes() > 0) std::memcpy(p, v.data, v.nbytes());
        p += v.nbytes();
    }
    return out;
}

Status write_safetensors(const std::filesystem::path& path, const NamedViews& tensors,
                         const std::map<std::string, std::string>& metadata) {
    PENSTOCK_ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, serialize_safetensors(tensors, metadata));
    std::filesystem::path tmp = path;
    tmp += ".tmp." + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) return Status(StatusCode::kUnavailable, "cannot create " + tmp.string());
        out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        out.close();
        if (!out) {
            std::error_code ec;
            std::filesystem::remove(tmp, ec);
            return data_loss("error writing " + tmp.string());
        }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        const std::string why = ec.message();
        std::filesystem::remove(tmp, ec);
        return Status(StatusCode::kUnavailable, "cannot rename " + tmp.string() + " to " + path.string() + ": " + why);
    }
    return ok_status();
}

}  // namespace penstock::loader
