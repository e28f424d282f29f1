// Grammars shared by the grammar tests: JSON, arithmetic expressions and a small C-like
// language, written in GBNF (grammar/grammar.h).
#pragma once

#include <string>

namespace lfm::grammar::testing_grammars {

inline constexpr const char* kJson = R"G(
root   ::= ws value ws
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* )? ws "}"
member ::= string ws ":" ws value
array  ::= "[" ws ( value ( ws "," ws value )* )? ws "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n]{0,8}
)G";

inline constexpr const char* kArithmetic = R"G(
root   ::= expr
expr   ::= term ( [-+] term )*
term   ::= factor ( [*/] factor )*
factor ::= number | name | "(" expr ")"
number ::= [0-9]{1,6}
name   ::= [a-z]{1,4}
)G";

inline constexpr const char* kCLike = R"G(
root      ::= function+
function  ::= type " " ident "() {\n" statement* "}\n"
statement ::= "  " ( decl | assign | while | return ) "\n"
decl      ::= type " " ident " = " expr ";"
assign    ::= ident " = " expr ";"
while     ::= "while (" cond ") { " ( assign " " )* "}"
return    ::= "return " expr ";"
cond      ::= expr " " ( "<" | ">" | "==" | "!=" ) " " expr
expr      ::= operand ( " " [-+*] " " operand )*
operand   ::= ident | [0-9]{1,4}
type      ::= "int" | "void"
ident     ::= [a-z] [a-z0-9_]{0,7}
)G";

}  // namespace lfm::grammar::testing_grammars
