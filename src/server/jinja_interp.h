// The chat-template interpreter's evaluator (jinja_eval.cc) and builtins (jinja_builtins.cc: filters, tests, methods,
// globals). One Interp per render: it owns the scopes, the output buffer and the resource counters.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/jinja_ast.h"

namespace penstock::server::jinja {

// Resource limits of one render; exceeding one is an InvalidArgument error, never a crash or a hang.
inline constexpr int64_t kMaxOutputBytes = 64 << 20;  // all text rendered, captures (set blocks, macros) included
inline constexpr int64_t kMaxSteps = 2'000'000;       // expressions evaluated + statements run + loop iterations
inline constexpr int64_t kMaxRangeLength = 100'000;   // range() length (jinja2's sandbox MAX_RANGE)
inline constexpr int kMaxCallDepth = 100;             // nested macro calls (recursion)

class Interp final {
public:
    explicit Interp(std::shared_ptr<Dict> globals) { scopes_.push_back(std::move(globals)); }
    std::string render(const Program& p);

    Value eval(const Expr& e);
    Value call(const Value& f, const CallArgs& a);
    Value get_attr(const Value& obj, const std::string& name);  // obj.name: attribute/method first, then item
    Value get_item(const Value& obj, const Value& key);         // obj[key]: item first, then attribute
    Value filter(const std::string& name, const Value& v, const CallArgs& a);
    bool test(const std::string& name, const Value& v, const CallArgs& a);
    Value lookup(const std::string& name) const;
    void step();

private:
    enum class Flow { kNormal, kBreak, kContinue };
    Flow exec(const Body& body);
    Flow exec_node(const Node& n);
    void exec_for(const Node& n);
    void assign(const Node& n, Value v);
    void emit(const std::string& s);
    std::string capture(const Body& body);
    Value make_macro(const Node& n);
    Value method(const Value& obj, const std::string& name);  // bound str/dict/list method, or undefined

    std::vector<std::shared_ptr<Dict>> scopes_;
    std::string* out_ = nullptr;
    int64_t out_bytes_ = 0;
    int64_t steps_ = 0;
    int call_depth_ = 0;
};

// Populates the jinja2 globals (range, namespace, dict, raise_exception, strftime_now) into `globals`.
void add_builtin_globals(Dict* globals);

}  // namespace penstock::server::jinja
