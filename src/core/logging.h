// Logging: spdlog behind a small facade so modules never configure sinks themselves.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

#define PENSTOCK_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define PENSTOCK_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define PENSTOCK_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define PENSTOCK_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)

namespace penstock {
// Sets the process log level from "debug", "info", "warn", "error" or "off"; unknown names keep "info".
void set_log_level(std::string_view level);
}  // namespace penstock
