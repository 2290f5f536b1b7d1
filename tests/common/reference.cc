// Reference fixture helpers.
#include "common/reference.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/check.h"
#include "loader/safetensors.h"

namespace penstock::testing {

std::vector<ReferencePrompt> load_reference(const std::filesystem::path& dir) {
    auto file = loader::SafetensorsFile::open(dir / "reference.safetensors");
    PENSTOCK_CHECK(file.ok()) << file.status().to_string();
    std::vector<ReferencePrompt> out;
    for (int k = 0;; ++k) {
        const loader::TensorInfo* ids = (*file)->find("input_ids_" + std::to_string(k));
        const loader::TensorInfo* logits = (*file)->find("logits_" + std::to_string(k));
        if (ids == nullptr || logits == nullptr) break;
        ReferencePrompt p;
        const TensorView iv = (*file)->view(*ids);
        PENSTOCK_CHECK(iv.dtype == DType::kI64);
        for (int64_t i = 0; i < iv.numel(); ++i) {
            int64_t v;
            std::memcpy(&v, static_cast<const char*>(iv.data) + i * 8, 8);
            p.ids.push_back(static_cast<int32_t>(v));
        }
        p.logits = to_f32((*file)->view(*logits));
        out.push_back(std::move(p));
    }
    PENSTOCK_CHECK(!out.empty()) << "no prompts in " << dir;
    return out;
}

LogitsComparison compare_logits(const TensorView& got, const TensorView& ref, double argmax_margin) {
    PENSTOCK_CHECK_EQ(got.size(0), ref.size(0));
    PENSTOCK_CHECK_EQ(got.size(1), ref.size(1));
    LogitsComparison c;
    const int64_t n = ref.size(0);
    const int64_t vocab = ref.size(1);
    for (int64_t r = 0; r < n; ++r) {
        const float* g = got.ptr<const float>() + r * vocab;
        const float* e = ref.ptr<const float>() + r * vocab;
        int64_t best_g = 0, best_e = 0, second_e = -1;
        for (int64_t v = 0; v < vocab; ++v) {
            const double d = std::fabs(static_cast<double>(g[v]) - e[v]);
            if (!(d <= c.max_abs_diff)) {  // also catches NaN
                c.max_abs_diff = std::isnan(d) ? INFINITY : d;
                c.worst_row = r;
                c.worst_col = v;
            }
            if (g[v] > g[best_g]) best_g = v;
            if (e[v] > e[best_e]) best_e = v;
        }
        for (int64_t v = 0; v < vocab; ++v) {
            if (v != best_e && (second_e < 0 || e[v] > e[second_e])) second_e = v;
        }
        const double gap = second_e < 0 ? INFINITY : static_cast<double>(e[best_e]) - e[second_e];
        if (gap > argmax_margin && best_g != best_e) ++c.argmax_mismatches;
    }
    return c;
}

std::string LogitsComparison::describe() const {
    std::ostringstream s;
    s << "max |diff| " << max_abs_diff << " at [" << worst_row << ", " << worst_col << "], argmax mismatches "
      << argmax_mismatches;
    return s.str();
}

Tensor read_f32_tensor(const std::filesystem::path& file, const std::string& name) {
    auto f = loader::SafetensorsFile::open(file);
    PENSTOCK_CHECK(f.ok()) << f.status().to_string();
    const loader::TensorInfo* info = (*f)->find(name);
    PENSTOCK_CHECK(info != nullptr) << "no tensor " << name << " in " << file;
    return to_f32((*f)->view(*info));
}

}  // namespace penstock::testing
