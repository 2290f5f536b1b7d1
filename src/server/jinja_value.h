// Jinja values for the chat-template interpreter: Python's data model reduced to what templates use (undefined,
// none, bool, int, float, str, list/tuple, ordered dict with string keys, namespace, callable). Lists, dicts and
// namespaces have reference semantics like Python. Printing (str/repr) and tojson follow CPython byte for byte for
// these types. Errors inside the interpreter are thrown as jinja::Error and become Status at jinja.h's entry points.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace penstock::server::jinja {

// A template error (parse, undefined access, type error, raise_exception); line 0 until a statement adds its line.
struct Error : std::runtime_error {
    int line;
    Error(const std::string& message, int l) : std::runtime_error(message), line(l) {}
};
[[noreturn]] void fail(const std::string& message);

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kStr, kList, kDict, kNamespace, kFunc };

struct Value;
struct Dict;
struct Func;
using List = std::vector<Value>;

struct Value {
    Kind kind = Kind::kUndefined;
    bool b = false;                    // kBool: the value; kList: a tuple
    int64_t i = 0;                     // kInt
    double f = 0;                      // kFloat
    std::string s;                     // kStr: the text (UTF-8); kUndefined: why it is undefined ("'x' is undefined")
    std::shared_ptr<List> list;        // kList
    std::shared_ptr<Dict> dict;        // kDict, kNamespace
    std::shared_ptr<const Func> func;  // kFunc

    static Value undefined(std::string why);
    static Value none();
    static Value boolean(bool v);
    static Value integer(int64_t v);
    static Value real(double v);
    static Value str(std::string v);
    static Value make_list(List items, bool tuple = false);
    static Value make_dict();
    static Value make_namespace();
    static Value function(std::shared_ptr<const Func> fn);

    bool is_undefined() const { return kind == Kind::kUndefined; }
    bool is_str() const { return kind == Kind::kStr; }
    bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
};

// An insertion-ordered dict with string keys (linear lookup: template dicts are small).
struct Dict {
    std::vector<std::pair<std::string, Value>> items;
    const Value* find(std::string_view key) const;
    void set(const std::string& key, Value v);
};

struct CallArgs {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
    // Positional argument i, else keyword `name`, else nullptr.
    const Value* get(size_t i, std::string_view name) const;
};

class Interp;
struct Func {
    std::string name;
    std::function<Value(Interp&, const CallArgs&)> fn;
};

bool truthy(const Value& v);
std::string type_name(const Value& v);        // "dict object", "str object", ... (for error messages)
std::string to_str(const Value& v);           // Python str(); undefined prints ""
std::string repr(const Value& v);             // Python repr()
std::string format_float(double d);           // Python float.__repr__
bool equals(const Value& a, const Value& b);  // Python ==
bool less(const Value& a, const Value& b);    // Python <, TypeError for mixed kinds
double as_double(const Value& v);             // int/float/bool, else TypeError
int64_t length(const Value& v);               // len(); TypeError when it has none
List iterate(const Value& v);                 // for x in v (str: code points, dict: keys, undefined: empty)

struct JsonOptions {
    std::string indent;  // per level, with newlines; unused when !pretty
    bool pretty = false;
    std::string item_sep = ", ";
    std::string key_sep = ": ";
    bool sort_keys = false;
    bool ensure_ascii = false;
};
std::string to_json(const Value& v, const JsonOptions& o);  // Python json.dumps
Value from_json(const nlohmann::ordered_json& j);

// UTF-8 helpers: code points in and out, for Python's code-point indexing of str.
std::vector<char32_t> decode_utf8(std::string_view s);
std::string encode_utf8(const std::vector<char32_t>& cps);
void append_utf8(std::string* out, char32_t cp);

}  // namespace penstock::server::jinja
