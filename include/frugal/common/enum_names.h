// Names of enum values, for options that have a fixed set of values: one
// table per enum, from which parsing, printing and the list of choices in
// error messages all come.
//
//   template <> struct EnumNames<Color> {
//     static constexpr std::pair<Color, const char*> kTable[] = {{Color::kRed, "red"}, ...};
//   };
//   NameOf(Color::kRed) == "red"; ParseEnum<Color>("red") == Color::kRed;
//   EnumChoices<Color>() == "red, green"
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace frugal {

template <class E>
struct EnumNames;  // specialised next to each enum

template <class E>
const char* NameOf(E value) {
  for (const auto& [v, name] : EnumNames<E>::kTable) {
    if (v == value) return name;
  }
  return "?";
}

template <class E>
std::optional<E> ParseEnum(const std::string& text) {
  for (const auto& [v, name] : EnumNames<E>::kTable) {
    if (text == name) return v;
  }
  return std::nullopt;
}

template <class E>
std::string EnumChoices() {
  std::string out;
  for (const auto& [v, name] : EnumNames<E>::kTable) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

}  // namespace frugal
