// frugal._C.RunOptions: frugal.DistributedModel's engine keywords as an
// engine::RunConfig, set and checked through the run configuration's field
// list (Note [Python keywords] in options.cc), so the keywords, their
// types, ranges, help and defaults are frugal train's flags'.
#pragma once

#include <string>

#include "bindings.h"
#include "frugal/engine/run_config.h"

namespace frugal::python {

// The keywords set on a run configuration. workers: the world's size that
// sync='auto' resolves for (0: not known yet, resolved as one worker).
struct PyOptions {
  engine::RunConfig config;  // the Python defaults, then the keywords
  int workers = 0;
};

// A field-list message with each --flag replaced by its keyword.
std::string KeywordMessage(std::string msg);

// The configuration the engine runs on `device`: resolved for the world's
// size and this host's workers (Note [One resolver]) and validated;
// ValueError naming the keyword.
engine::RunConfig ToConfig(const PyOptions& p, const std::string& device);

// frugal._C.RunOptions and frugal._C.options().
void BindOptions(py::module_& m);

}  // namespace frugal::python
