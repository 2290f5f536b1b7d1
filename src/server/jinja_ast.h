// The chat-template interpreter's syntax tree (built by jinja_parse.cc, walked by jinja_eval.cc). Generic nodes with
// a kind tag; each records its template line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/jinja_value.h"

namespace penstock::server::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    enum class Op {
        kLiteral,  // literal
        kName,     // name
        kList,     // args: items
        kTuple,    // args: items
        kDict,     // args: key0, value0, key1, value1, ...
        kAttr,     // args[0].name
        kItem,     // args[0][args[1]]
        kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts allowed)
        kCall,     // args[0](args[1..], kwargs)
        kFilter,   // args[0] | name(args[1..], kwargs)
        kTest,     // args[0] is [not] name(args[1..]); negated
        kUnary,    // name in {"-", "+", "not"} args[0]
        kBinary,   // args[0] name args[1]; name in {+ - * / // % ** ~}
        kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ...
        kAnd,
        kOr,
        kCond,  // args[0] if args[1] else args[2] (args[2] null: no else)
    };
    Op op = Op::kLiteral;
    int line = 0;
    Value literal;
    std::string name;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    std::vector<std::string> ops;
    bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
    enum class Type {
        kText,      // text
        kOutput,    // {{ expr }}
        kIf,        // conds[k] -> bodies[k]; bodies.size() == conds.size() + 1 when there is an else
        kFor,       // for targets in expr [if cond]: bodies[0], else bodies[1]
        kSet,       // targets (or targets[0].attr) = expr
        kSetBlock,  // {% set targets[0] %} bodies[0] {% endset %}
        kMacro,     // macro name(params = defaults): bodies[0]
        kBreak,
        kContinue,
        kScope,  // bodies[0] rendered as is ({% generation %})
    };
    Type type = Type::kText;
    int line = 0;
    std::string text;                  // kText; kSet on a namespace: the attribute
    std::string name;                  // kMacro
    ExprPtr expr;                      // kOutput, kFor (iterable), kSet (value)
    ExprPtr cond;                      // kFor's filter
    std::vector<ExprPtr> conds;        // kIf
    std::vector<Body> bodies;          // see Type
    std::vector<std::string> targets;  // kFor, kSet, kSetBlock; kMacro: parameter names
    bool unpack = false;               // kFor / kSet: targets came as a tuple
    std::vector<ExprPtr> defaults;     // kMacro: per parameter, null when none
};

// A parsed template; immutable, shared by concurrent renders.
struct Program {
    Body body;
};

// Parses `source` (jinja2 lexer rules with trim_blocks, lstrip_blocks, no trailing newline kept). Throws Error with
// the line number.
std::unique_ptr<Program> parse_program(std::string_view source);

}  // namespace penstock::server::jinja
