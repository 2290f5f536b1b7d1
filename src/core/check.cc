// Check failure reporting.
#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace penstock::detail {

CheckFailure::CheckFailure(const char* file, int line, const std::string& what) {
    stream_ << file << ":" << line << ": " << what << " ";
}

CheckFailure::~CheckFailure() {
    std::fprintf(stderr, "%s\n", stream_.str().c_str());
    std::fflush(stderr);
    std::abort();
}

}  // namespace penstock::detail
