// Log level plumbing. Logs go to stderr so that stdout stays machine-readable for CLI output.
#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <string>

namespace penstock {

void set_log_level(std::string_view level) {
    if (!spdlog::get("penstock")) {
        auto logger = spdlog::stderr_color_mt("penstock");
        spdlog::set_default_logger(logger);
    }
    spdlog::set_level(spdlog::level::from_str(std::string(level)));
    spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
}

}  // namespace penstock
