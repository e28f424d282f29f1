// Expression parsing of the Jinja parser; operator precedence as in jinja2.parser (filters bind
// tighter than a unary minus's operand, `**` is left-associative, `is` binds tighter than `not`).
#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "chat/jinja_parser.h"

namespace lfm::jinja::detail {

bool Parser::tuple_end(const std::unordered_set<std::string>& extra_end) const {
  if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || cur().type == Tok::Eof || is_op(")")) return true;
  return cur().type == Tok::Name && extra_end.count(cur().value);
}

NodePtr Parser::parse_tuple(bool simplified, bool with_condexpr, const std::unordered_set<std::string>& extra_end, bool explicit_parens) {
  const int line = cur().line;
  NodeList items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (tuple_end(extra_end)) break;
    items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
    if (is_op(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail_at("Expected an expression, got ", describe(cur()));
  }
  auto n = std::make_unique<Node>(NodeKind::TupleLit, line);
  n->kids = std::move(items);
  return n;
}

NodePtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard g(*this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

NodePtr Parser::parse_condexpr() {
  NodePtr expr = parse_or();
  while (skip_name("if")) {
    auto n = node(NodeKind::CondExpr);
    NodePtr test = parse_or();
    NodePtr other = skip_name("else") ? parse_condexpr() : nullptr;
    n->kids.push_back(std::move(test));
    n->kids.push_back(std::move(expr));
    n->kids.push_back(std::move(other));
    expr = seal(std::move(n));
  }
  return expr;
}

NodePtr Parser::binary(const std::string& op, NodePtr l, NodePtr r) {
  auto n = node(NodeKind::Binary);
  n->name = op;
  n->kids.push_back(std::move(l));
  n->kids.push_back(std::move(r));
  return seal(std::move(n));
}

NodePtr Parser::parse_or() {
  NodePtr l = parse_and();
  while (skip_name("or")) l = binary("or", std::move(l), parse_and());
  return l;
}

NodePtr Parser::parse_and() {
  NodePtr l = parse_not();
  while (skip_name("and")) l = binary("and", std::move(l), parse_not());
  return l;
}

NodePtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard g(*this);
    auto n = node(NodeKind::Unary);
    next();
    n->name = "not";
    n->kids.push_back(parse_not());
    return seal(std::move(n));
  }
  return parse_compare();
}

NodePtr Parser::parse_compare() {
  NodePtr first = parse_math1();
  NodePtr n;
  while (true) {
    std::string op;
    if (cur().type == Tok::Op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                  cur().value == ">" || cur().value == "<=" || cur().value == ">=")) {
      op = cur().value;
      next();
    } else if (skip_name("in")) {
      op = "in";
    } else if (is_name("not") && peek().type == Tok::Name && peek().value == "in") {
      next();
      next();
      op = "not in";
    } else {
      break;
    }
    if (!n) {
      n = node(NodeKind::Compare);
      n->kids.push_back(std::move(first));
    }
    n->ops.push_back(op);
    n->kids.push_back(parse_math1());
  }
  return n ? seal(std::move(n)) : std::move(first);
}

NodePtr Parser::parse_math1() {
  NodePtr l = parse_concat();
  while (is_op("+") || is_op("-")) {
    const std::string op = cur().value;
    next();
    l = binary(op, std::move(l), parse_concat());
  }
  return l;
}

NodePtr Parser::parse_concat() {
  NodePtr l = parse_math2();
  while (skip_op("~")) l = binary("~", std::move(l), parse_math2());
  return l;
}

NodePtr Parser::parse_math2() {
  NodePtr l = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const std::string op = cur().value;
    next();
    l = binary(op, std::move(l), parse_pow());
  }
  return l;
}

NodePtr Parser::parse_pow() {
  NodePtr l = parse_unary(true);
  while (skip_op("**")) l = binary("**", std::move(l), parse_unary(true));
  return l;
}

NodePtr Parser::parse_unary(bool with_filter) {
  DepthGuard g(*this);
  NodePtr n;
  if (is_op("-") || is_op("+")) {
    n = node(NodeKind::Unary);
    n->name = cur().value;
    next();
    n->kids.push_back(parse_unary(false));
    n = seal(std::move(n));
  } else {
    n = parse_primary();
  }
  n = parse_postfix(std::move(n));
  if (with_filter) n = parse_filter_expr(std::move(n));
  return n;
}

NodePtr Parser::parse_primary() {
  DepthGuard g(*this);
  const Token& t = cur();
  if (t.type == Tok::Name) {
    auto n = node(NodeKind::Literal);
    if (t.value == "true" || t.value == "True") n->value = Value::boolean(true);
    else if (t.value == "false" || t.value == "False") n->value = Value::boolean(false);
    else if (t.value == "none" || t.value == "None") n->value = Value::none();
    else {
      n->kind = NodeKind::Name;
      n->name = t.value;
    }
    next();
    return n;
  }
  if (t.type == Tok::String) {
    auto n = node(NodeKind::Literal);
    std::string s;
    while (cur().type == Tok::String) {
      s += cur().value;
      next();
    }
    n->value = Value::string(std::move(s));
    return n;
  }
  if (t.type == Tok::Int || t.type == Tok::Float) {
    auto n = node(NodeKind::Literal);
    if (t.type == Tok::Float) {
      n->value = Value::floating(std::strtod(t.value.c_str(), nullptr));
    } else {
      int base = 10;
      std::string digits = t.value;
      if (digits.size() > 1 && digits[0] == '0' && std::isalpha(static_cast<unsigned char>(digits[1]))) {
        base = digits[1] == 'x' ? 16 : digits[1] == 'o' ? 8 : 2;
        digits = digits.substr(2);
      }
      errno = 0;
      char* endp = nullptr;
      const long long v = std::strtoll(digits.c_str(), &endp, base);
      if (errno == ERANGE) fail_at("unsupported: integer literal ", t.value, " exceeds 64 bits");
      n->value = Value::integer(v);
    }
    next();
    return n;
  }
  if (skip_op("(")) {
    NodePtr n = parse_tuple(false, true, {}, true);
    expect_op(")");
    return n;
  }
  if (is_op("[")) {
    auto n = node(NodeKind::ListLit);
    next();
    while (!is_op("]")) {
      if (!n->kids.empty()) expect_op(",");
      if (is_op("]")) break;
      n->kids.push_back(parse_expression(true));
    }
    next();
    return n;
  }
  if (is_op("{")) {
    auto n = node(NodeKind::DictLit);
    next();
    while (!is_op("}")) {
      if (!n->kids.empty()) expect_op(",");
      if (is_op("}")) break;
      n->kids.push_back(parse_expression(true));
      expect_op(":");
      n->kids.push_back(parse_expression(true));
    }
    next();
    return n;
  }
  fail_at("unexpected ", describe(t));
}

NodePtr Parser::parse_postfix(NodePtr n) {
  while (true) {
    if (is_op(".")) {
      next();
      if (cur().type == Tok::Name) {
        auto a = node(NodeKind::GetAttr);
        a->name = cur().value;
        a->kids.push_back(std::move(n));
        n = seal(std::move(a));
        next();
      } else if (cur().type == Tok::Int) {
        auto a = node(NodeKind::GetItem);
        auto lit = node(NodeKind::Literal);
        lit->value = Value::integer(std::atoll(cur().value.c_str()));
        a->kids.push_back(std::move(n));
        a->kids.push_back(std::move(lit));
        n = seal(std::move(a));
        next();
      } else {
        fail_at("expected name or number after '.'");
      }
    } else if (is_op("[")) {
      n = parse_subscript(std::move(n));
    } else if (is_op("(")) {
      n = parse_call(std::move(n));
    } else {
      return n;
    }
  }
}

NodePtr Parser::parse_subscript(NodePtr obj) {
  next();  // '['
  NodeList parts;
  bool slice = false;
  NodePtr slice_parts[3];
  // Only one subscript (or a single slice) is supported; tuple keys are not.
  if (is_op(":")) {
    slice = true;
  } else {
    parts.push_back(parse_expression(true));
    if (is_op(":")) {
      slice = true;
      slice_parts[0] = std::move(parts[0]);
    }
  }
  if (slice) {
    next();  // first ':'
    if (!is_op(":") && !is_op("]")) slice_parts[1] = parse_expression(true);
    if (skip_op(":") && !is_op("]")) slice_parts[2] = parse_expression(true);
    expect_op("]");
    auto n = node(NodeKind::Slice);
    n->kids.push_back(std::move(obj));
    for (auto& p : slice_parts) n->kids.push_back(std::move(p));
    return seal(std::move(n));
  }
  if (is_op(",")) fail_at("unsupported: tuple subscripts");
  expect_op("]");
  auto n = node(NodeKind::GetItem);
  n->kids.push_back(std::move(obj));
  n->kids.push_back(std::move(parts[0]));
  return seal(std::move(n));
}

void Parser::parse_call_args(Node& n) {
  expect_op("(");
  bool any = false;
  while (!is_op(")")) {
    if (any) expect_op(",");
    if (is_op(")")) break;
    any = true;
    if (is_op("*") || is_op("**")) fail_at("unsupported: *args / **kwargs in calls");
    if (cur().type == Tok::Name && peek().type == Tok::Op && peek().value == "=") {
      n.kw_names.push_back(cur().value);
      next();
      next();
      n.kw.push_back(parse_expression(true));
    } else {
      if (!n.kw.empty()) fail_at("positional argument follows keyword argument");
      n.args.push_back(parse_expression(true));
    }
  }
  next();
}

NodePtr Parser::parse_call(NodePtr callee) {
  auto n = node(NodeKind::Call);
  n->kids.push_back(std::move(callee));
  parse_call_args(*n);
  return seal(std::move(n));
}

std::string Parser::dotted_name() {
  std::string name = expect_name();
  while (is_op(".")) {
    next();
    name += "." + expect_name();
  }
  return name;
}

NodePtr Parser::parse_filter(NodePtr input, bool start_inline) {
  if (!start_inline) expect_op("|");
  auto n = node(NodeKind::Filter);
  n->name = dotted_name();
  n->kids.push_back(std::move(input));
  if (is_op("(")) parse_call_args(*n);
  return seal(std::move(n));
}

NodePtr Parser::parse_test(NodePtr input) {
  next();  // 'is'
  auto n = node(NodeKind::Test);
  n->flag = skip_name("not");
  n->name = dotted_name();
  n->kids.push_back(std::move(input));
  if (is_op("(")) {
    parse_call_args(*n);
  } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
              cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail_at("You cannot chain multiple tests with is");
    n->args.push_back(parse_postfix(parse_primary()));
  }
  return seal(std::move(n));
}

NodePtr Parser::parse_filter_expr(NodePtr n) {
  while (true) {
    if (is_op("|")) n = parse_filter(std::move(n), false);
    else if (is_name("is")) n = parse_test(std::move(n));
    else if (is_op("(")) n = parse_call(std::move(n));
    else return n;
  }
}

}  // namespace lfm::jinja::detail
