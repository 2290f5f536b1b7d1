// Model registry by Hugging Face model_type.
#include "models/deepseek_v3.h"
#include "models/glm_dsa.h"
#include "models/kimi_linear.h"
#include "models/model.h"

namespace penstock::models {

bool is_supported_model_type(const std::string& model_type) {
    return model_type == "deepseek_v3" || model_type == "glm_moe_dsa" || model_type == "deepseek_v32" ||
           model_type == "kimi_linear";
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
