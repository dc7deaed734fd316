// Nearest-name suggestions (Damerau-Levenshtein, optimal string alignment).
#include "kestrel/base/suggest.h"

#include <algorithm>
#include <cctype>

namespace kestrel {
namespace {
char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }
}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1, 0));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      std::size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string nearest(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.empty()) return {};
  const std::size_t limit = std::max<std::size_t>(1, word.size() / 3);
  std::string best;
  std::size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    std::size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  if (!best.empty()) return best;
  // A unique prefix: "--trial" for "--trials", "tu" for "tune".
  std::string prefixed;
  for (const std::string& c : candidates) {
    if (c.size() > word.size() && edit_distance(c.substr(0, word.size()), word) == 0) {
      if (!prefixed.empty()) return {};
      prefixed = c;
    }
  }
  return prefixed;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  std::string match = nearest(word, candidates);
  return match.empty() ? std::string() : " (did you mean '" + match + "'?)";
}

}  // namespace kestrel
