// Test helpers shared by model and CLI tests: reading a fixture's reference.safetensors and comparing logits the way
// the issues state it (max |delta| bound everywhere; argmax equal wherever the reference's top-2 gap exceeds a margin).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace penstock::testing {

struct ReferencePrompt {
    std::vector<int32_t> ids;
    Tensor logits;  // [n, vocab] f32
};

// All prompts K = 0, 1, ... of `dir`/reference.safetensors (input_ids_K i64, logits_K f32). Aborts on a bad fixture.
std::vector<ReferencePrompt> load_reference(const std::filesystem::path& dir);

struct LogitsComparison {
    double max_abs_diff = 0.0;
    int64_t worst_row = -1;
    int64_t worst_col = -1;
    int64_t argmax_mismatches = 0;  // rows where the reference top-2 gap > margin and argmax differs
    std::string describe() const;
};

// Compares got [n, vocab] with ref [n, vocab] (both f32 host).
LogitsComparison compare_logits(const TensorView& got, const TensorView& ref, double argmax_margin);

// Reads one f32 tensor `name` from a safetensors file (copy).
Tensor read_f32_tensor(const std::filesystem::path& file, const std::string& name);

}  // namespace penstock::testing
