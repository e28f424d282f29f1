// Syntax tree of a parsed Jinja template. One node type with a kind tag keeps the parser and
// evaluator compact; the comment on each kind says which fields it uses.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/jinja_value.h"

namespace lfm::jinja {

enum class NodeKind {
  // ---- expressions ----
  Literal,   // value
  Name,      // name
  ListLit,   // kids = items
  TupleLit,  // kids = items
  DictLit,   // kids = k0, v0, k1, v1, ...
  GetAttr,   // kids[0] = object, name = attribute
  GetItem,   // kids[0] = object, kids[1] = index
  Slice,     // kids[0] = object, kids[1..3] = start/stop/step (nullptr when omitted)
  Call,      // kids[0] = callee, args = positional, kw_names/kw = keyword arguments
  Filter,    // kids[0] = input (nullptr inside {% filter %}), name, args, kw
  Test,      // kids[0] = input, name, args, kw, flag = negated ("is not")
  Unary,     // name = "-", "+" or "not", kids[0]
  Binary,    // name = operator (+ - * / // % ** ~ and or), kids[0], kids[1]
  Compare,   // kids[0] = first operand, ops[i] with kids[i + 1]
  CondExpr,  // kids = test, then, else (else may be nullptr)
  // ---- statements ----
  Data,      // name = literal text
  Output,    // kids[0] = expression
  If,        // kids = conditions, bodies[i] per condition, else_body
  For,       // target, kids[0] = iterable, kids[1] = filter condition or nullptr, body, else_body, flag = recursive
  Set,       // target, kids[0] = value
  SetBlock,  // target, body, kids = filters applied to the captured text (Filter nodes)
  Macro,     // name, params (name + default in kids, nullptr when none), body
  CallBlock, // kids[0] = Call node, params = caller's params, body
  FilterBlock,  // kids = Filter chain (innermost first), body
  With,      // targets/values: params = names with kids = values, body
  Break,
  Continue,
  Generation,  // body rendered like transformers' {% generation %} (a caller body)
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

// Assignment target: a name, a tuple of names, or namespace attribute (ns.attr).
struct Target {
  std::vector<std::string> names;  // one name, or several for tuple unpacking
  bool tuple = false;
  std::string attr;  // non-empty: assign names[0].attr
};

struct Param {
  std::string name;
  NodePtr def;  // default value expression or nullptr
};

struct Node {
  NodeKind kind;
  int line = 0;
  int depth = 1;  // height of the expression tree below (bounded by the parser)
  std::string name;
  Value value;
  bool flag = false;
  NodeList kids;
  NodeList args;
  std::vector<std::string> kw_names;
  NodeList kw;
  std::vector<std::string> ops;
  std::vector<NodeList> bodies;
  NodeList body, else_body;
  Target target;
  std::vector<Param> params;

  Node(NodeKind k, int l) : kind(k), line(l) {}
};

// Parses template source into a statement list. Throws TemplateError on syntax errors and on
// constructs this interpreter does not support (named, never silently ignored).
NodeList parse_template(const std::string& source);

}  // namespace lfm::jinja
