// Recursive-descent parser producing the AST of jinja_ast.h: template structure and statements
// (expressions are in jinja_parser_expr.cpp). The grammar follows jinja2.parser.
#include "chat/jinja_parser.h"

namespace lfm::jinja {
namespace detail {

// Parses until a block tag whose name is in `end`; leaves the stream on that name.
NodeList Parser::subparse(const std::unordered_set<std::string>& end) {
  NodeList body;
  while (cur().type != Tok::Eof) {
    if (cur().type == Tok::Data) {
      auto n = node(NodeKind::Data);
      n->name = cur().value;
      body.push_back(std::move(n));
      next();
    } else if (cur().type == Tok::VarBegin) {
      next();
      auto n = node(NodeKind::Output);
      n->kids.push_back(parse_tuple(false, true, {}, false));
      if (cur().type != Tok::VarEnd) fail_at("expected end of print statement, got ", describe(cur()));
      next();
      body.push_back(std::move(n));
    } else if (cur().type == Tok::BlockBegin) {
      next();
      if (cur().type == Tok::Name && end.count(cur().value)) return body;
      body.push_back(parse_statement());
    } else {
      fail_at("unexpected ", describe(cur()));
    }
  }
  if (!end.empty()) {
    std::string names;
    for (const auto& e : end) names += (names.empty() ? "'" : " or '") + e + "'";
    fail_at("unexpected end of template, expected ", names);
  }
  return body;
}

// Consumes "{% endname %}" when the stream stands on "endname".
void Parser::end_block(const char* endname) {
  if (!skip_name(endname)) fail_at("expected '", endname, "'");
  expect_block_end();
}

NodePtr Parser::parse_statement() {
  DepthGuard g(*this);
  if (cur().type != Tok::Name) fail_at("tag name expected");
  const std::string tag = cur().value;
  if (tag == "for") return parse_for();
  if (tag == "if") return parse_if();
  if (tag == "set") return parse_set();
  if (tag == "macro") return parse_macro();
  if (tag == "call") return parse_call_block();
  if (tag == "filter") return parse_filter_block();
  if (tag == "with") return parse_with();
  if (tag == "generation") return parse_generation();
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) fail_at("'", tag, "' outside of a loop");
    auto n = node(tag == "break" ? NodeKind::Break : NodeKind::Continue);
    next();
    expect_block_end();
    return n;
  }
  static const std::unordered_set<std::string> unsupported = {"include", "import", "from", "extends", "block",
                                                              "autoescape", "do", "trans", "pluralize", "debug"};
  if (unsupported.count(tag)) fail_at("unsupported tag '", tag, "' (not available for chat templates)");
  fail_at("Encountered unknown tag '", tag, "'");
}

NodePtr Parser::parse_for() {
  auto n = node(NodeKind::For);
  next();
  n->target = parse_assign_target(false, {"in"});
  if (!skip_name("in")) fail_at("expected 'in' in for loop");
  n->kids.push_back(parse_tuple(false, false, {"recursive"}, false));
  n->kids.push_back(skip_name("if") ? parse_expression(true) : nullptr);
  if (is_name("recursive")) fail_at("unsupported: recursive for loops");
  expect_block_end();
  ++loop_depth_;
  n->body = subparse({"endfor", "else"});
  --loop_depth_;
  if (skip_name("else")) {
    expect_block_end();
    n->else_body = subparse({"endfor"});
  }
  end_block("endfor");
  return n;
}

NodePtr Parser::parse_if() {
  auto n = node(NodeKind::If);
  next();
  while (true) {
    n->kids.push_back(parse_tuple(false, false, {}, false));
    expect_block_end();
    n->bodies.push_back(subparse({"elif", "else", "endif"}));
    if (skip_name("elif")) continue;
    if (skip_name("else")) {
      expect_block_end();
      n->else_body = subparse({"endif"});
    }
    break;
  }
  end_block("endif");
  return n;
}

NodePtr Parser::parse_set() {
  next();
  Target target = parse_assign_target(true, {});
  if (skip_op("=")) {
    auto n = node(NodeKind::Set);
    n->target = std::move(target);
    n->kids.push_back(parse_tuple(false, true, {}, false));
    expect_block_end();
    return n;
  }
  auto n = node(NodeKind::SetBlock);
  n->target = std::move(target);
  while (is_op("|")) n->kids.push_back(parse_filter(nullptr, false));
  expect_block_end();
  n->body = subparse({"endset"});
  end_block("endset");
  return n;
}

void Parser::parse_params(std::vector<Param>& params) {
  expect_op("(");
  while (!is_op(")")) {
    if (!params.empty()) expect_op(",");
    if (is_op(")")) break;
    Param p;
    p.name = expect_name();
    if (skip_op("=")) p.def = parse_expression(true);
    else if (!params.empty() && params.back().def) fail_at("non-default argument follows default argument");
    params.push_back(std::move(p));
  }
  next();
}

NodePtr Parser::parse_macro() {
  auto n = node(NodeKind::Macro);
  next();
  n->name = expect_name();
  parse_params(n->params);
  expect_block_end();
  const int saved = loop_depth_;
  loop_depth_ = 0;
  n->body = subparse({"endmacro"});
  loop_depth_ = saved;
  end_block("endmacro");
  return n;
}

NodePtr Parser::parse_call_block() {
  auto n = node(NodeKind::CallBlock);
  next();
  if (is_op("(")) parse_params(n->params);
  NodePtr call = parse_expression(true);
  if (call->kind != NodeKind::Call) fail_at("expected call");
  n->kids.push_back(std::move(call));
  expect_block_end();
  const int saved = loop_depth_;
  loop_depth_ = 0;
  n->body = subparse({"endcall"});
  loop_depth_ = saved;
  end_block("endcall");
  return n;
}

NodePtr Parser::parse_filter_block() {
  auto n = node(NodeKind::FilterBlock);
  next();
  n->kids.push_back(parse_filter(nullptr, true));
  while (is_op("|")) n->kids.push_back(parse_filter(nullptr, false));
  expect_block_end();
  n->body = subparse({"endfilter"});
  end_block("endfilter");
  return n;
}

NodePtr Parser::parse_with() {
  auto n = node(NodeKind::With);
  next();
  while (cur().type != Tok::BlockEnd) {
    if (!n->params.empty()) expect_op(",");
    Param p;
    p.name = expect_name();
    expect_op("=");
    p.def = parse_expression(true);
    n->params.push_back(std::move(p));
  }
  expect_block_end();
  n->body = subparse({"endwith"});
  end_block("endwith");
  return n;
}

NodePtr Parser::parse_generation() {
  auto n = node(NodeKind::Generation);
  next();
  expect_block_end();
  const int saved = loop_depth_;
  loop_depth_ = 0;  // the body is compiled as a separate (caller) function in jinja2
  n->body = subparse({"endgeneration"});
  loop_depth_ = saved;
  end_block("endgeneration");
  return n;
}

Target Parser::parse_assign_target(bool with_namespace, const std::unordered_set<std::string>& extra_end) {
  Target t;
  if (with_namespace && cur().type == Tok::Name && peek().type == Tok::Op && peek().value == ".") {
    t.names.push_back(expect_name());
    next();
    t.attr = expect_name();
    return t;
  }
  bool paren = skip_op("(");
  while (true) {
    if (!t.names.empty()) {
      if (!skip_op(",")) break;
      t.tuple = true;
    }
    if (cur().type != Tok::Name || extra_end.count(cur().value)) break;
    const std::string n = expect_name();
    if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
      fail_at("can't assign to constant '", n, "'");
    t.names.push_back(n);
    if (!is_op(",")) break;
  }
  if (paren) {
    expect_op(")");
    t.tuple = true;
  }
  if (t.names.empty()) fail_at("can't assign to ", describe(cur()));
  return t;
}

}  // namespace detail

NodeList parse_template(const std::string& source) { return detail::Parser(tokenize(source)).parse_all(); }

}  // namespace lfm::jinja
