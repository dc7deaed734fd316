// "Did you mean ...?" for mistyped names: commands, flags, ops, strategies.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel {

// Edit distance (insertions, deletions, substitutions, and swaps of adjacent letters
// count 1 each), case-insensitive.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, or "" when none is close enough to be a likely typo
// (distance at most max(1, word.size() / 3), or `word` is a prefix of exactly one).
std::string nearest(std::string_view word, const std::vector<std::string>& candidates);

// " (did you mean 'X'?)" for the nearest candidate, or "" when there is none.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace kestrel
