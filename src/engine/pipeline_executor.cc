// PipelineExecutor.
#include "engine/pipeline_executor.h"

namespace penstock::engine {

PipelineExecutor::PipelineExecutor(runtime::ModelRunner* runner, parallel::Communicator* pp, bool eager_bank)
    : stage_(runner, pp,
             parallel::StageOptions{.eager_bank = eager_bank, .release = parallel::ReleasePolicy::kExplicit}) {
    PENSTOCK_CHECK_EQ(pp->rank(), 0) << "the engine drives pipeline stage 0";
}

}  // namespace penstock::engine
