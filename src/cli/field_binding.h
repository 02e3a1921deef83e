// CLI flags generated from a field list (common/field_list.h): one flag per
// field, --kebab-case, in the field's help group, bound to the struct's
// member. Enums take their names; booleans get --x and --no-x.
#pragma once

#include <string>
#include <type_traits>

#include <CLI/CLI.hpp>

#include "frugal/common/field_list.h"

namespace frugal::cli {

struct FlagBinder {
  CLI::App* cmd;

  template <class T>
  void operator()(const Field& f, T& value) const {
    const std::string flag = f.Flag();
    if constexpr (std::is_same_v<T, bool>) {
      cmd->add_flag(flag + ",!--no-" + flag.substr(2), value, f.help)->group(f.group);
    } else if constexpr (std::is_enum_v<T> || std::is_unsigned_v<T>) {
      // Parsed by the field list: enum names, and no silent wrap of "-1".
      Field field = f;
      cmd->add_option_function<std::string>(
             flag,
             [field, &value](const std::string& text) {
               Status s = FieldFromText(field, text, &value);
               if (!s.ok()) throw CLI::ValidationError(s.message());
             },
             f.help)
          ->default_str(FieldToText(value))
          ->group(f.group);
    } else {
      cmd->add_option(flag, value, f.help)->group(f.group);
    }
  }
};

}  // namespace frugal::cli
