// <regex> for the tests that use std::regex as an independent oracle. GCC 12 at -O1 (the
// sanitizer build) reports -Wmaybe-uninitialized inside libstdc++'s own regex automaton
// (a std::function moved out of a partly built _State: a false positive): silenced for what
// <regex> instantiates, nothing else. GCC 12 applies a diagnostic
// pragma when it covers any function of the inlining chain, and here the outermost one is
// libstdc++'s regex code.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <regex>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
