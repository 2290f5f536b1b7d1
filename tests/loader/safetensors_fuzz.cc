// libFuzzer entry point for the safetensors header parser: any input must either fail with a Status or yield
// tensors that all lie inside the input, whose every byte is then read through view().
#include <cstdint>
#include <cstdlib>
#include <span>

#include "loader/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using penstock::loader::SafetensorsFile;
    auto f = SafetensorsFile::open_buffer("fuzz.safetensors", std::span<const uint8_t>(data, size));
    if (!f.ok()) {
        if (f.status().message().empty()) std::abort();  // every failure must explain itself
        return 0;
    }
    const SafetensorsFile& file = **f;
    if (file.header_bytes() > size) std::abort();
    uint8_t acc = 0;
    for (const auto& info : file.tensors()) {
        if (info.offset_begin < file.header_bytes() || info.offset_begin > info.offset_end || info.offset_end > size) {
            std::abort();
        }
        if (file.find(info.name) != &info) std::abort();
        const penstock::TensorView v = file.view(info);
        if (v.nbytes() != info.nbytes()) std::abort();
        const auto* p = static_cast<const uint8_t*>(v.data);
        if (v.nbytes() > 0 && (p < data || p + v.nbytes() > data + size)) std::abort();
        for (size_t i = 0; i < v.nbytes(); ++i) acc = static_cast<uint8_t>(acc + p[i]);
    }
    volatile uint8_t sink = acc;
    (void)sink;
    return 0;
}
