// JSON access for tokenizer.json / tokenizer_config.json: typed field reads whose errors name the file and the
// field path ("tokenizer.json: field 'model.merges[3]': expected a string, got an integer 7"). Never throws.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace penstock::engine {

// Where a JSON value came from, for error messages: "<file>: field 'model.merges[3]': ...".
struct JsonPath final {
    std::string source;  // file name (or "<string>")
    std::string field;   // dotted path inside the document
    JsonPath key(std::string_view key) const {
        return {source, field.empty() ? std::string(key) : field + "." + std::string(key)};
    }
    JsonPath index(size_t index) const { return {source, field + "[" + std::to_string(index) + "]"}; }
    Status error(const std::string& what) const {
        return invalid_argument(source + ": field '" + field + "': " + what);
    }
    Status type_error(const char* expected, const nlohmann::json& got) const;
};

// Typed accessors: absent or null optional fields leave *out unchanged.
[[nodiscard]] Status json_string(const nlohmann::json& obj, std::string_view key, const JsonPath& path, bool required,
                                 std::string* out);
[[nodiscard]] Status json_bool(const nlohmann::json& obj, std::string_view key, const JsonPath& path, bool* out);
[[nodiscard]] Status json_id(const nlohmann::json& v, const JsonPath& path, int32_t* out);  // 0 <= id < 2^24
[[nodiscard]] Result<const nlohmann::json*> json_field(const nlohmann::json& obj, std::string_view key,
                                                       const JsonPath& path, bool required);

}  // namespace penstock::engine
