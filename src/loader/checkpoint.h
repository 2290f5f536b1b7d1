// A Hugging Face checkpoint directory: model.safetensors.index.json (weight_map: tensor name -> shard file) or a
// single model.safetensors. Loading is selective: only shards holding a requested tensor are opened (mmap'd) and
// only the requested tensors' bytes are read, so a pipeline stage touches just its layers' weights. Tensors are
// converted on load (float casts, DeepSeek block-FP8 and compressed-tensors FP8 / MXFP4 dequantisation) into owning
// host Tensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace penstock::loader {

struct LoadStats {
    std::vector<std::string> files_opened;  // shard file names as in the index (relative to the model dir)
    uint64_t bytes_read = 0;                // tensor bytes read (incl. FP8 scales) + every opened file's header
    int64_t n_tensors = 0;                  // tensors returned
    // of which dequantised on load, by format
    int64_t n_fp8_block = 0;   // DeepSeek block FP8 (`weight_scale_inv`)
    int64_t n_fp8_scaled = 0;  // compressed-tensors FP8 (`weight_scale`)
    int64_t n_mxfp4 = 0;       // compressed-tensors MXFP4 (`weight_packed` + `weight_scale`) dequantised
    int64_t n_mxfp4_fp8 = 0;   // MXFP4 re-encoded as block FP8 (native FP8 loads: LoadOptions::dequantize_fp8 false)
    int64_t n_mxfp4_fp8_inexact =
        0;  // elements of those that e4m3 could not hold exactly (rounded; see weight_convert.h)
};

struct LayerRange {
    int64_t begin = 0, end = 0;  // [begin, end)
};

// Which tensors a pipeline stage needs: model.layers.{i}.* for i in range (i < num_hidden_layers: MTP layers at
// i >= num_hidden_layers are never needed), model.embed_tokens.* when begin == 0, model.norm.* and lm_head.* when
// end == num_hidden_layers (also embed when tie_word_embeddings and end == n_layers). Other names (unknown
// prefixes) are included only for full ranges. A leading "language_model." (multimodal wrappers such as Kimi K3)
// is ignored when matching.
bool tensor_in_layer_range(std::string_view name, const LayerRange& range, int64_t num_hidden_layers,
                           bool tie_word_embeddings);

struct LoadOptions {
    DType target = DType::kF32;  // kF32 (CPU reference) or kBF16: the dtype of every converted float tensor
    // true: FP8 `X.weight` + `X.weight_scale_inv` are dequantised into `target` and the scales are not returned.
    // false: both are returned raw (e4m3 and f32) for native FP8 kernels.
    bool dequantize_fp8 = true;
    int n_threads = 1;  // conversion threads (tensors are converted in parallel); <= 0 means all cores
};

using WeightMap = std::unordered_map<std::string, Tensor>;

class Checkpoint final {
public:
    // Reads model.safetensors.index.json when present (weight_map name -> shard file), else model.safetensors.
    // Opens NO shard file yet (an index-less checkpoint opens its single file lazily too), and does not require
    // shards it will never load to exist (a stage's host may hold only its own shards).
    [[nodiscard]] static Result<Checkpoint> open(const std::filesystem::path& model_dir);
    // A checkpoint with no tensors (load() returns an empty map, opening nothing): `--load-format dummy`, where the
    // model generates its weights (models::ModelOptions::dummy_weights_seed).
    static Checkpoint none();

    const std::filesystem::path& dir() const { return dir_; }
    bool indexed() const { return indexed_; }
    // All tensor names, sorted (from the index, or the single file's header; for an index-less checkpoint whose
    // file cannot be read this logs the error and returns an empty list: load() then reports it).
    std::vector<std::string> tensor_names() const;
    // The distinct shard files named by the index (or {"model.safetensors"}), sorted.
    std::vector<std::string> shard_files() const;

    // Loads every tensor whose name passes `filter`, opening only the shards that hold at least one of them, and
    // converting to options.target: bf16/f16/f32 converted; FP8 e4m3fn `X.weight` with a sibling
    // `X.weight_scale_inv` (f32 [ceil(out/block_n), ceil(in/block_k)]) dequantised W[r,c] = fp8(W[r,c]) *
    // scale_inv[r/bn, c/bk] (a multiply; partial edge blocks), the *_scale_inv tensors themselves not returned;
    // compressed-tensors checkpoints (Kimi K3's mixed layout): FP8 `X.weight` with `X.weight_scale` (a multiplier per
    // tensor, output channel or block) and MXFP4 `X.weight_packed` (u8, two e2m1 per byte, low nibble first) with
    // `X.weight_scale` (e8m0 per 32 columns) are always dequantised into `X.weight` (weight_convert.h), their scales
    // not returned, except that with dequantize_fp8 false an MXFP4 weight becomes block FP8 (`X.weight` e4m3 and
    // `X.weight_scale_inv` f32 [.., ceil(out/block_n), ceil(in/block_k)], mxfp4_to_fp8_blocks) for the native FP8
    // kernels; NVFP4 (`X.weight_global_scale`) -> Unimplemented;
    // integer, bool, e8m0 and fp4 tensors copied unchanged. `stats` may be null; when given, this call's files,
    // bytes and tensors are added to it (a file opened by an earlier call is opened, and listed, again).
    // Errors: a tensor named in the index but absent from its shard -> NotFound naming both; a missing or malformed
    // shard -> error naming the file; FP8 weight without scale, packed FP4 without scale, or a scale of the wrong shape
    // -> InvalidArgument.
    [[nodiscard]] Result<WeightMap> load(const std::function<bool(std::string_view)>& filter,
                                         const LoadOptions& options, int64_t fp8_block_n, int64_t fp8_block_k,
                                         LoadStats* stats) const;

    // One tensor by name (NotFound if the checkpoint has no such tensor), converted as load() does.
    [[nodiscard]] Result<Tensor> load_one(std::string_view name, const LoadOptions& options, int64_t fp8_block_n = 128,
                                          int64_t fp8_block_k = 128) const;

private:
    Checkpoint() = default;

    std::filesystem::path dir_;
    bool indexed_ = false;
    std::map<std::string, std::string> weight_map_;  // tensor name -> shard file (indexed checkpoints only)
};

}  // namespace penstock::loader
