// The chat-template evaluator: statements (jinja2 scoping: for bodies and macros get their own scope, `set` there
// does not leak), expressions with Python semantics, attribute/item lookup, macros and loop variables.
#include <algorithm>
#include <cmath>

#include "server/jinja_interp.h"

namespace penstock::server::jinja {
namespace {

[[noreturn]] void undefined_error(const Value& u) { fail(u.s.empty() ? "undefined value" : u.s); }

int64_t as_int(const Value& v) {
    if (v.kind == Kind::kInt) return v.i;
    if (v.kind == Kind::kBool) return v.b ? 1 : 0;
    fail("expected an integer, got " + type_name(v));
}

int64_t floor_div(int64_t a, int64_t b) {
    if (b == 0) fail("integer division or modulo by zero");
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

Value arith(const std::string& op, const Value& a, const Value& b) {
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
    if (op == "+") {
        if (a.is_str() && b.is_str()) return Value::str(a.s + b.s);
        if (a.kind == Kind::kList && b.kind == Kind::kList) {
            List items = *a.list;
            items.insert(items.end(), b.list->begin(), b.list->end());
            return Value::make_list(std::move(items), a.b && b.b);
        }
    }
    if (op == "*") {
        const Value* seq = a.is_str() || a.kind == Kind::kList   ? &a
                           : b.is_str() || b.kind == Kind::kList ? &b
                                                                 : nullptr;
        const Value* n = seq == &a ? &b : &a;
        if (seq != nullptr && (n->kind == Kind::kInt || n->kind == Kind::kBool)) {
            const int64_t times = as_int(*n);
            if (times > 0 && (seq->is_str() ? seq->s.size() : seq->list->size()) * static_cast<uint64_t>(times) >
                                 static_cast<uint64_t>(kMaxOutputBytes)) {
                fail("sequence repetition too large");
            }
            Value r = seq->is_str() ? Value::str("") : Value::make_list({}, seq->b);
            for (int64_t k = 0; k < times; ++k) {
                if (seq->is_str()) {
                    r.s += seq->s;
                } else {
                    r.list->insert(r.list->end(), seq->list->begin(), seq->list->end());
                }
            }
            return r;
        }
    }
    if (!a.is_number() || !b.is_number()) {
        fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
    }
    const bool ints = a.kind != Kind::kFloat && b.kind != Kind::kFloat;
    if (op == "/") {
        if (as_double(b) == 0) fail("division by zero");
        return Value::real(as_double(a) / as_double(b));
    }
    if (ints) {
        const int64_t x = as_int(a), y = as_int(b);
        if (op == "+") return Value::integer(x + y);
        if (op == "-") return Value::integer(x - y);
        if (op == "*") return Value::integer(x * y);
        if (op == "//") return Value::integer(floor_div(x, y));
        if (op == "%") return Value::integer(x - floor_div(x, y) * y);
        if (op == "**") {
            if (y < 0) return Value::real(std::pow(static_cast<double>(x), static_cast<double>(y)));
            int64_t r = 1;
            for (int64_t k = 0; k < y && k < 64; ++k) r *= x;
            return Value::integer(r);
        }
    }
    const double x = as_double(a), y = as_double(b);
    if (op == "+") return Value::real(x + y);
    if (op == "-") return Value::real(x - y);
    if (op == "*") return Value::real(x * y);
    if (op == "**") return Value::real(std::pow(x, y));
    if (y == 0) fail("float division by zero");
    if (op == "//") return Value::real(std::floor(x / y));
    if (op == "%") {
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::real(m);
    }
    fail("unknown operator " + op);
}

bool contains(const Value& container, const Value& item) {
    switch (container.kind) {
        case Kind::kStr:
            if (!item.is_str()) fail("'in <string>' requires string as left operand, not " + type_name(item));
            return container.s.find(item.s) != std::string::npos;
        case Kind::kList:
            for (const Value& v : *container.list) {
                if (equals(v, item)) return true;
            }
            return false;
        case Kind::kDict:
            return item.is_str() && container.dict->find(item.s) != nullptr;
        case Kind::kUndefined:
            return false;
        default:
            fail("argument of type '" + type_name(container) + "' is not iterable");
    }
}

bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in") return contains(b, a);
    if (op == "notin") return !contains(b, a);
    if (op == "<") return less(a, b);
    if (op == ">") return less(b, a);
    if (op == "<=") return less(a, b) || equals(a, b);
    return less(b, a) || equals(a, b);
}

// Python slice semantics over n elements; returns the selected indices.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step) {
    auto opt = [](const Value& v) { return v.kind == Kind::kNone || v.is_undefined(); };
    const int64_t st = opt(step) ? 1 : as_int(step);
    if (st == 0) fail("slice step cannot be zero");
    auto norm = [&](const Value& v, int64_t dflt) {
        if (opt(v)) return dflt;
        int64_t x = as_int(v);
        if (x < 0) x += n;
        if (st > 0) return std::clamp<int64_t>(x, 0, n);
        return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t b = norm(start, st > 0 ? 0 : n - 1), e = norm(stop, st > 0 ? n : -1);
    std::vector<int64_t> idx;
    for (int64_t k = b; st > 0 ? k < e : k > e; k += st) idx.push_back(k);
    return idx;
}

}  // namespace

void Interp::step() {
    if (++steps_ > kMaxSteps) fail("template evaluation exceeded " + std::to_string(kMaxSteps) + " steps");
}

void Interp::emit(const std::string& s) {
    out_bytes_ += static_cast<int64_t>(s.size());
    if (out_bytes_ > kMaxOutputBytes) fail("template output exceeded " + std::to_string(kMaxOutputBytes) + " bytes");
    *out_ += s;
}

std::string Interp::capture(const Body& body) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    try {
        if (exec(body) != Flow::kNormal) fail("'break' or 'continue' outside a loop");
    } catch (...) {
        out_ = saved;
        throw;
    }
    out_ = saved;
    return buf;
}

std::string Interp::render(const Program& p) {
    std::string out;
    out_ = &out;
    exec(p.body);
    return out;
}

Value Interp::lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
        if (const Value* v = (*it)->find(name)) return *v;
    }
    return Value::undefined("'" + name + "' is undefined");
}

Interp::Flow Interp::exec(const Body& body) {
    for (const NodePtr& n : body) {
        const Flow f = exec_node(*n);
        if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
}

Interp::Flow Interp::exec_node(const Node& n) {
    step();
    try {
        switch (n.type) {
            case Node::Type::kText:
                emit(n.text);
                break;
            case Node::Type::kOutput:
                emit(to_str(eval(*n.expr)));
                break;
            case Node::Type::kIf:
                for (size_t k = 0; k < n.bodies.size(); ++k) {
                    if (k >= n.conds.size() || truthy(eval(*n.conds[k]))) return exec(n.bodies[k]);
                }
                break;
            case Node::Type::kFor:
                exec_for(n);
                break;
            case Node::Type::kSet:
                assign(n, eval(*n.expr));
                break;
            case Node::Type::kSetBlock:
                assign(n, Value::str(capture(n.bodies[0])));
                break;
            case Node::Type::kMacro:
                scopes_.back()->set(n.name, make_macro(n));
                break;
            case Node::Type::kBreak:
                return Flow::kBreak;
            case Node::Type::kContinue:
                return Flow::kContinue;
            case Node::Type::kScope:
                return exec(n.bodies[0]);
        }
    } catch (Error& e) {
        if (e.line == 0) throw Error("template line " + std::to_string(n.line) + ": " + e.what(), n.line);
        throw;
    }
    return Flow::kNormal;
}

void Interp::assign(const Node& n, Value v) {
    if (!n.text.empty()) {
        const Value ns = lookup(n.targets[0]);
        if (ns.kind != Kind::kNamespace) fail("cannot assign attribute on non-namespace object");
        ns.dict->set(n.text, std::move(v));
        return;
    }
    if (!n.unpack) {
        scopes_.back()->set(n.targets[0], std::move(v));
        return;
    }
    const List items = iterate(v);
    if (items.size() != n.targets.size()) {
        fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(n.targets.size()));
    }
    for (size_t k = 0; k < items.size(); ++k) scopes_.back()->set(n.targets[k], items[k]);
}

void Interp::exec_for(const Node& n) {
    const Value seq = eval(*n.expr);
    if (seq.kind != Kind::kList && seq.kind != Kind::kDict && seq.kind != Kind::kStr && !seq.is_undefined()) {
        fail("'" + type_name(seq) + "' is not iterable");
    }
    List items = iterate(seq);
    auto bind = [&](Dict* scope, const Value& item) {
        if (!n.unpack) {
            scope->set(n.targets[0], item);
            return;
        }
        const List parts = iterate(item);
        if (parts.size() != n.targets.size()) {
            fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(n.targets.size()));
        }
        for (size_t k = 0; k < parts.size(); ++k) scope->set(n.targets[k], parts[k]);
    };
    if (n.cond != nullptr) {
        List kept;
        for (const Value& item : items) {
            step();
            auto scope = std::make_shared<Dict>();
            bind(scope.get(), item);
            scopes_.push_back(scope);
            bool keep = false;
            try {
                keep = truthy(eval(*n.cond));
            } catch (...) {
                scopes_.pop_back();
                throw;
            }
            scopes_.pop_back();
            if (keep) kept.push_back(item);
        }
        items = std::move(kept);
    }
    const auto len = static_cast<int64_t>(items.size());
    auto scope = std::make_shared<Dict>();
    scopes_.push_back(scope);
    try {
        for (int64_t k = 0; k < len; ++k) {
            step();
            scope->items.clear();
            Value loop = Value::make_dict();
            Dict& l = *loop.dict;
            l.set("index", Value::integer(k + 1));
            l.set("index0", Value::integer(k));
            l.set("revindex", Value::integer(len - k));
            l.set("revindex0", Value::integer(len - k - 1));
            l.set("first", Value::boolean(k == 0));
            l.set("last", Value::boolean(k == len - 1));
            l.set("length", Value::integer(len));
            l.set("depth", Value::integer(1));
            l.set("depth0", Value::integer(0));
            if (k > 0) l.set("previtem", items[static_cast<size_t>(k - 1)]);
            if (k + 1 < len) l.set("nextitem", items[static_cast<size_t>(k + 1)]);
            auto cycle = std::make_shared<Func>();
            cycle->name = "cycle";
            cycle->fn = [k](Interp&, const CallArgs& a) {
                if (a.pos.empty()) fail("no items for cycling given");
                return a.pos[static_cast<size_t>(k) % a.pos.size()];
            };
            l.set("cycle", Value::function(cycle));
            scope->set("loop", loop);
            bind(scope.get(), items[static_cast<size_t>(k)]);
            if (exec(n.bodies[0]) == Flow::kBreak) break;
        }
    } catch (...) {
        scopes_.pop_back();
        throw;
    }
    scopes_.pop_back();
    if (len == 0 && n.bodies.size() > 1) exec(n.bodies[1]);
}

Value Interp::make_macro(const Node& n) {
    auto f = std::make_shared<Func>();
    f->name = n.name;
    const Node* node = &n;
    f->fn = [node](Interp& in, const CallArgs& a) {
        if (a.pos.size() > node->targets.size())
            fail("macro '" + node->name + "' takes not more than " + std::to_string(node->targets.size()) +
                 " argument(s)");
        if (in.call_depth_ >= kMaxCallDepth) fail("macro calls nested deeper than " + std::to_string(kMaxCallDepth));
        auto scope = std::make_shared<Dict>();
        for (const auto& [k, v] : a.kw) {
            bool known = false;
            for (const std::string& p : node->targets) known = known || p == k;
            if (!known) fail("macro '" + node->name + "' has no argument '" + k + "'");
        }
        std::vector<std::shared_ptr<Dict>> saved = {in.scopes_.front()};
        saved.swap(in.scopes_);
        in.scopes_.push_back(scope);
        ++in.call_depth_;
        std::string out;
        try {
            for (size_t k = 0; k < node->targets.size(); ++k) {
                const Value* v = a.get(k, node->targets[k]);
                if (v != nullptr) {
                    scope->set(node->targets[k], *v);
                } else if (node->defaults[k] != nullptr) {
                    scope->set(node->targets[k], in.eval(*node->defaults[k]));
                } else {
                    scope->set(node->targets[k], Value::undefined("'" + node->targets[k] + "' is undefined"));
                }
            }
            out = in.capture(node->bodies[0]);
        } catch (...) {
            --in.call_depth_;
            in.scopes_.swap(saved);
            throw;
        }
        --in.call_depth_;
        in.scopes_.swap(saved);
        return Value::str(std::move(out));
    };
    return Value::function(f);
}

Value Interp::call(const Value& f, const CallArgs& a) {
    if (f.is_undefined()) undefined_error(f);
    if (f.kind != Kind::kFunc) fail("'" + type_name(f) + "' is not callable");
    return f.func->fn(*this, a);
}

Value Interp::get_attr(const Value& obj, const std::string& name) {
    if (obj.is_undefined()) undefined_error(obj);
    Value m = method(obj, name);
    if (!m.is_undefined()) return m;
    if (obj.kind == Kind::kDict || obj.kind == Kind::kNamespace) {
        if (const Value* v = obj.dict->find(name)) return *v;
    }
    return Value::undefined("'" + type_name(obj) + "' has no attribute '" + name + "'");
}

Value Interp::get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) undefined_error(obj);
    if (obj.kind == Kind::kDict && key.is_str()) {
        if (const Value* v = obj.dict->find(key.s)) return *v;
    } else if ((obj.kind == Kind::kList || obj.is_str()) && (key.kind == Kind::kInt || key.kind == Kind::kBool)) {
        int64_t k = key.kind == Kind::kInt ? key.i : key.b;
        if (obj.kind == Kind::kList) {
            const auto n = static_cast<int64_t>(obj.list->size());
            if (k < 0) k += n;
            if (k >= 0 && k < n) return (*obj.list)[static_cast<size_t>(k)];
        } else {
            const std::vector<char32_t> cps = decode_utf8(obj.s);
            const auto n = static_cast<int64_t>(cps.size());
            if (k < 0) k += n;
            if (k >= 0 && k < n) {
                std::string one;
                append_utf8(&one, cps[static_cast<size_t>(k)]);
                return Value::str(std::move(one));
            }
        }
        return Value::undefined("'" + type_name(obj) + "' has no attribute '" + std::to_string(key.i) + "'");
    } else if (key.is_str()) {
        return get_attr(obj, key.s);
    }
    return Value::undefined("'" + type_name(obj) + "' has no attribute '" + to_str(key) + "'");
}

Value Interp::eval(const Expr& e) {
    step();
    switch (e.op) {
        case Expr::Op::kLiteral:
            return e.literal;
        case Expr::Op::kName:
            return lookup(e.name);
        case Expr::Op::kList:
        case Expr::Op::kTuple: {
            List items;
            for (const ExprPtr& a : e.args) items.push_back(eval(*a));
            return Value::make_list(std::move(items), e.op == Expr::Op::kTuple);
        }
        case Expr::Op::kDict: {
            Value d = Value::make_dict();
            for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
                const Value key = eval(*e.args[k]);
                if (!key.is_str()) fail("dict keys must be strings here, got " + type_name(key));
                d.dict->set(key.s, eval(*e.args[k + 1]));
            }
            return d;
        }
        case Expr::Op::kAttr:
            return get_attr(eval(*e.args[0]), e.name);
        case Expr::Op::kItem: {
            const Value obj = eval(*e.args[0]);
            return get_item(obj, eval(*e.args[1]));
        }
        case Expr::Op::kSlice: {
            const Value obj = eval(*e.args[0]);
            Value parts[3];
            for (int k = 0; k < 3; ++k) parts[k] = e.args[k + 1] ? eval(*e.args[k + 1]) : Value::none();
            if (obj.is_undefined()) undefined_error(obj);
            if (obj.kind == Kind::kList) {
                List items;
                for (int64_t k : slice_indices(static_cast<int64_t>(obj.list->size()), parts[0], parts[1], parts[2])) {
                    items.push_back((*obj.list)[static_cast<size_t>(k)]);
                }
                return Value::make_list(std::move(items), obj.b);
            }
            if (obj.is_str()) {
                const std::vector<char32_t> cps = decode_utf8(obj.s);
                std::vector<char32_t> sel;
                for (int64_t k : slice_indices(static_cast<int64_t>(cps.size()), parts[0], parts[1], parts[2])) {
                    sel.push_back(cps[static_cast<size_t>(k)]);
                }
                return Value::str(encode_utf8(sel));
            }
            fail("'" + type_name(obj) + "' is not subscriptable");
        }
        case Expr::Op::kCall:
        case Expr::Op::kFilter:
        case Expr::Op::kTest: {
            CallArgs a;
            for (size_t k = 1; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k]));
            for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v));
            if (e.op == Expr::Op::kCall) return call(eval(*e.args[0]), a);
            if (e.op == Expr::Op::kFilter) return filter(e.name, eval(*e.args[0]), a);
            if (e.name == "defined" || e.name == "undefined") {
                const bool defined = !eval(*e.args[0]).is_undefined();
                return Value::boolean((e.name == "defined") == defined ? !e.negated : e.negated);
            }
            return Value::boolean(test(e.name, eval(*e.args[0]), a) != e.negated);
        }
        case Expr::Op::kUnary: {
            const Value v = eval(*e.args[0]);
            if (e.name == "not") return Value::boolean(!truthy(v));
            if (v.is_undefined()) undefined_error(v);
            if (v.kind == Kind::kFloat) return Value::real(e.name == "-" ? -v.f : v.f);
            if (v.kind == Kind::kInt || v.kind == Kind::kBool)
                return Value::integer(e.name == "-" ? -as_int(v) : as_int(v));
            fail("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
        }
        case Expr::Op::kBinary: {
            const Value a = eval(*e.args[0]);
            const Value b = eval(*e.args[1]);
            if (e.name == "~") return Value::str(to_str(a) + to_str(b));
            return arith(e.name, a, b);
        }
        case Expr::Op::kCompare: {
            Value left = eval(*e.args[0]);
            for (size_t k = 0; k < e.ops.size(); ++k) {
                Value right = eval(*e.args[k + 1]);
                if (!compare(e.ops[k], left, right)) return Value::boolean(false);
                left = std::move(right);
            }
            return Value::boolean(true);
        }
        case Expr::Op::kAnd: {
            Value a = eval(*e.args[0]);
            return truthy(a) ? eval(*e.args[1]) : a;
        }
        case Expr::Op::kOr: {
            Value a = eval(*e.args[0]);
            return truthy(a) ? a : eval(*e.args[1]);
        }
        case Expr::Op::kCond:
            if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
            if (e.args[2] != nullptr) return eval(*e.args[2]);
            return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
    return Value::undefined("");
}

}  // namespace penstock::server::jinja
