// The transfer-engine factory: UCX where the build has it.
#include "disagg/transfer_engine.h"

namespace penstock::disagg {

#if PENSTOCK_ENABLE_UCX
Result<std::unique_ptr<TransferEngine>> make_ucx_engine();  // ucx_engine.cc
#endif

std::vector<std::string> transfer_backends() {
#if PENSTOCK_ENABLE_UCX
    return {"ucx"};
#else
    return {};
#endif
}

Result<std::unique_ptr<TransferEngine>> make_transfer_engine(const std::string& backend) {
    if (backend != "ucx") return invalid_argument("unknown transfer backend '" + backend + "' (known: ucx)");
#if PENSTOCK_ENABLE_UCX
    return make_ucx_engine();
#else
    return Status(StatusCode::kUnavailable,
                  "this build has no UCX (install libucx-dev and rebuild): disaggregated KV transfer is off");
#endif
}

}  // namespace penstock::disagg
