// safetensors reader: mmap plus a header validator that bounds-checks every field before anything is trusted.
#include "loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace penstock::loader {

namespace {

using nlohmann::json;

constexpr uint64_t kMaxShapeDim = uint64_t{1} << 40;

std::string render(const json& v) {
    std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return s;
}

// A JSON integer >= 0 as uint64, or false (negative, float, bool, string, ...).
bool non_negative_integer(const json& v, uint64_t* out) {
    if (v.is_number_unsigned()) {
        *out = v.get<uint64_t>();
        return true;
    }
    if (v.is_number_integer() && v.get<int64_t>() >= 0) {
        *out = static_cast<uint64_t>(v.get<int64_t>());
        return true;
    }
    return false;
}

class EntryParser final {
public:
    EntryParser(const std::string& file, uint64_t data_begin, uint64_t data_size)
        : file_(file), data_begin_(data_begin), data_size_(data_size) {}

    [[nodiscard]] Status parse(const std::string& name, const json& v, TensorInfo* info) const {
        info->name = name;
        if (!v.is_object()) return bad(name, "entry must be an object, got " + render(v));
        const auto dt = v.find("dtype");
        const auto sh = v.find("shape");
        const auto off = v.find("data_offsets");
        if (dt == v.end()) return bad(name, "missing 'dtype'");
        if (sh == v.end()) return bad(name, "missing 'shape'");
        if (off == v.end()) return bad(name, "missing 'data_offsets'");
        if (!dt->is_string()) return bad(name, "'dtype' must be a string, got " + render(*dt));
        if (!dtype_from_safetensors(dt->get_ref<const std::string&>(), &info->dtype)) {
            return Status(StatusCode::kUnimplemented,
                          where(name) + "unsupported dtype " + render(*dt) +
                              " (supported: F32 BF16 F16 F8_E4M3 F8_E8M0 E8M0 F4 I8 U8 I32 I64 BOOL)");
        }
        uint64_t numel = 0;
        PENSTOCK_RETURN_IF_ERROR(parse_shape(name, *sh, info, &numel));
        return parse_offsets(name, *off, numel, info);
    }

private:
    std::string where(const std::string& name) const { return file_ + ": tensor '" + name + "': "; }
    Status bad(const std::string& name, const std::string& what) const { return invalid_argument(where(name) + what); }

    [[nodiscard]] Status parse_shape(const std::string& name, const json& sh, TensorInfo* info, uint64_t* numel) const {
        if (!sh.is_array()) return bad(name, "'shape' must be an array, got " + render(sh));
        if (sh.size() > static_cast<size_t>(kMaxDims)) {
            return bad(name, "'shape' has " + std::to_string(sh.size()) + " dims (at most " + std::to_string(kMaxDims) +
                                 " supported)");
        }
        uint64_t n = 1;
        info->shape.clear();
        for (const json& d : sh) {
            uint64_t dim = 0;
            if (!non_negative_integer(d, &dim)) {
                return bad(name, "shape dims must be non-negative integers, got " + render(sh));
            }
            if (dim > kMaxShapeDim) return bad(name, "shape dim " + std::to_string(dim) + " is too large");
            if (__builtin_mul_overflow(n, dim, &n) || n > static_cast<uint64_t>(INT64_MAX)) {
                return bad(name, "shape " + render(sh) + " element count overflows");
            }
            info->shape.push_back(static_cast<int64_t>(dim));
        }
        *numel = n;
        return ok_status();
    }

    [[nodiscard]] Status parse_offsets(const std::string& name, const json& off, uint64_t numel,
                                       TensorInfo* info) const {
        uint64_t begin = 0, end = 0;
        if (!off.is_array() || off.size() != 2 || !non_negative_integer(off[0], &begin) ||
            !non_negative_integer(off[1], &end)) {
            return bad(name, "'data_offsets' must be two non-negative integers, got " + render(off));
        }
        if (begin > end) return bad(name, "'data_offsets' begin > end: " + render(off));
        if (end > data_size_) {
            return data_loss(where(name) + "data_offsets " + render(off) + " end beyond the data section (" +
                             std::to_string(data_size_) + " bytes; file truncated?)");
        }
        uint64_t bits = 0;
        if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_bits(info->dtype)), &bits)) {
            return bad(name, "byte size overflows");
        }
        const uint64_t expect = bits / 8 + (bits % 8 != 0);
        if (end - begin != expect) {
            return data_loss(where(name) + "data_offsets " + render(off) + " hold " + std::to_string(end - begin) +
                             " bytes but dtype " + std::string(dtype_name(info->dtype)) + " shape " +
                             render(json(info->shape)) + " needs " + std::to_string(expect));
        }
        info->offset_begin = data_begin_ + begin;
        info->offset_end = data_begin_ + end;
        return ok_status();
    }

    const std::string& file_;
    uint64_t data_begin_;
    uint64_t data_size_;
};

}  // namespace

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

SafetensorsFile::~SafetensorsFile() {
    if (map_ != nullptr) ::munmap(map_, map_size_);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        std::string msg = "cannot open safetensors file " + path.string() + ": " + std::strerror(err);
        return err == ENOENT ? not_found(msg) : Status(StatusCode::kUnavailable, msg);
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return invalid_argument(path.string() + ": not a regular file");
    }
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    f->size_ = static_cast<uint64_t>(st.st_size);
    if (f->size_ >= 8) {  // mmap of an empty file fails; parse() reports short files
        void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            return Status(StatusCode::kUnavailable, "mmap of " + path.string() + " failed: " + std::strerror(err));
        }
        f->map_ = m;
        f->map_size_ = f->size_;
        f->data_ = static_cast<const uint8_t*>(m);
    }
    ::close(fd);  // the mapping keeps the file alive
    PENSTOCK_RETURN_IF_ERROR(f->parse());
    return f;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open_buffer(std::string name,
                                                                      std::span<const uint8_t> bytes) {
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = std::move(name);
    f->data_ = bytes.data();
    f->size_ = bytes.size();
    PENSTOCK_RETURN_IF_ERROR(f->parse());
    return f;
}

Status SafetensorsFile::parse() {
    const std::string file = path_.string();
    if (size_ < 8) {
        return data_loss(file + ": " + std::to_string(size_) + " bytes is too short for a safetensors file (>= 8)");
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | data_[i];
    if (n > kMaxSafetensorsHeaderBytes) {
        return invalid_argument(file + ": header length " + std::to_string(n) + " exceeds the 100 MB limit");
    }
    if (n > size_ - 8) {
        return data_loss(file + ": header length " + std::to_string(n) + " exceeds the file size " +
                         std::to_string(size_) + " - 8 (file truncated?)");
    }
    header_bytes_ = 8 + n;
    json h;
    try {
        h = json::parse(data_ + 8, data_ + 8 + n);
    } catch (const json::parse_error& e) {
        return invalid_argument(file + ": header is not valid JSON (byte " + std::to_string(e.byte) +
                                " of the header): " + e.what());
    } catch (const std::exception& e) {
        return invalid_argument(file + ": header is not valid JSON: " + e.what());
    }
    if (!h.is_object()) return invalid_argument(file + ": header must be a JSON object, got " + render(h));

    const EntryParser entries(file, header_bytes_, size_ - header_bytes_);
    tensors_.clear();
    tensors_.reserve(h.size());
    for (auto it = h.begin(); it != h.end(); ++it) {
        const json& v = it.value();
        if (it.key() == "__metadata__") {
            if (!v.is_object()) return invalid_argument(file + ": '__metadata__' must be an object");
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string()) {
                    return invalid_argument(file + ": '__metadata__' entry '" + m.key() + "' must be a string");
                }
            }
            metadata_json_ = v.dump(-1, ' ', false, json::error_handler_t::replace);
            continue;
        }
        TensorInfo info;
        PENSTOCK_RETURN_IF_ERROR(entries.parse(it.key(), v, &info));
        tensors_.push_back(std::move(info));
    }
    std::sort(tensors_.begin(), tensors_.end(),
              [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
    return ok_status();
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
    auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                               [](const TensorInfo& t, std::string_view n) { return t.name < n; });
    return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

std::span<const uint8_t> SafetensorsFile::bytes(const TensorInfo& info) const {
    PENSTOCK_CHECK(info.offset_begin <= info.offset_end && info.offset_end <= size_)
        << "TensorInfo '" << info.name << "' does not belong to " << path_.string();
    return {data_ + info.offset_begin, static_cast<size_t>(info.nbytes())};
}

TensorView SafetensorsFile::view(const TensorInfo& info) const {
    const std::span<const uint8_t> b = bytes(info);
    return TensorView::contiguous(const_cast<uint8_t*>(b.data()), info.dtype, info.shape);
}

}  // namespace penstock::loader
