// Model registry by Hugging Face model_type, and the FP8 weight mode.
#include "core/logging.h"
#include "models/deepseek_v3.h"
#include "models/glm_dsa.h"
#include "models/kimi_linear.h"
#include "models/model.h"

namespace penstock::models {

bool is_supported_model_type(const std::string& model_type) {
    return model_type == "deepseek_v3" || model_type == "glm_moe_dsa" || model_type == "deepseek_v32" ||
           model_type == "kimi_linear";
}

Result<Fp8Weights> parse_fp8_weights(const std::string& text) {
    if (text == "auto") return Fp8Weights::kAuto;
    if (text == "native") return Fp8Weights::kNative;
    if (text == "dequant") return Fp8Weights::kDequant;
    return invalid_argument("--fp8-weights must be auto, native or dequant, got '" + text + "'");
}

const char* fp8_weights_name(Fp8Weights mode) {
    switch (mode) {
        case Fp8Weights::kAuto:
            return "auto";
        case Fp8Weights::kNative:
            return "native";
        case Fp8Weights::kDequant:
            return "dequant";
    }
    return "?";
}

Status check_option_combinations(const ModelOptions& options) {
    if (options.dsa_fp8_accumulate && !options.dsa_fp8_indexer) {
        return invalid_argument(
            "--dsa-fp8-accumulate needs --dsa-fp8-indexer (it sets how the FP8 indexer sums its "
            "logits)");
    }
    return ok_status();
}

Result<Fp8Weights> resolve_fp8_weights(const loader::ModelConfig& config, const ModelOptions& options) {
    if (!config.fp8 && config.compressed_tensors) {
        // Kimi K3's compressed-tensors release: native re-encodes the MXFP4 weights (the routed experts) as 128 x 128
        // block FP8 on load (loader.md); its FP8 weights (per-channel scales) are dequantised either way.
        switch (options.fp8_weights) {
            case Fp8Weights::kDequant:
                return Fp8Weights::kDequant;
            case Fp8Weights::kAuto:
                return options.placement.device == Device::kCUDA ? Fp8Weights::kNative : Fp8Weights::kDequant;
            case Fp8Weights::kNative:
                return Fp8Weights::kNative;
        }
    }
    if (!config.fp8) {
        // Dummy weights stand in for a quantised checkpoint whose config does not say so (Kimi K3's FP8 / MXFP4
        // release): `native` asked for explicitly generates block-FP8 weights where the families take them.
        if (options.fp8_weights == Fp8Weights::kNative && options.dummy_weights_seed != 0) return Fp8Weights::kNative;
        if (options.fp8_weights == Fp8Weights::kNative) {
            PENSTOCK_LOG_WARN("--fp8-weights native has no effect: the config has no block-FP8 quantization_config");
        }
        return Fp8Weights::kDequant;
    }
    const bool kernel_blocks = config.fp8->block_n == 128 && config.fp8->block_k == 128;
    switch (options.fp8_weights) {
        case Fp8Weights::kDequant:
            return Fp8Weights::kDequant;
        case Fp8Weights::kAuto:
            return options.placement.device == Device::kCUDA && kernel_blocks ? Fp8Weights::kNative
                                                                              : Fp8Weights::kDequant;
        case Fp8Weights::kNative:
            if (!kernel_blocks) {
                return invalid_argument(
                    "--fp8-weights native needs quantization_config.weight_block_size [128, 128] "
                    "(the FP8 kernels' block), got [" +
                    std::to_string(config.fp8->block_n) + ", " + std::to_string(config.fp8->block_k) +
                    "]; use --fp8-weights dequant");
            }
            return Fp8Weights::kNative;
    }
    return Fp8Weights::kDequant;
}

Result<std::unique_ptr<Model>> load_model(const loader::ModelConfig& config, const loader::Checkpoint& checkpoint,
                                          const loader::LayerRange& range, const ModelOptions& options,
                                          loader::LoadStats* stats) {
    PENSTOCK_RETURN_IF_ERROR(options.tp.validate());
    if (config.model_type == "deepseek_v3") return DeepseekV3Model::load(config, checkpoint, range, options, stats);
    if (config.model_type == "glm_moe_dsa" || config.model_type == "deepseek_v32") {
        return load_glm_dsa_model(config, checkpoint, range, options, stats);
    }
    if (config.model_type == "kimi_linear") return load_kimi_linear_model(config, checkpoint, range, options, stats);
    return unimplemented("model_type '" + config.model_type +
                         "' is not supported yet (supported: deepseek_v3, glm_moe_dsa, deepseek_v32, kimi_linear)");
}

}  // namespace penstock::models
