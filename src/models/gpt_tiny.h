// gpt-tiny: the zoo's byte-level decoder-only transformer (docs/design/models.md).
// Internal to src/models; callers use models::CreateModel("gpt-tiny").
#pragma once

#include <memory>

#include "frugal/models/model.h"

namespace frugal::models {

// REQUIRES: vocab > 0.
std::shared_ptr<Model> MakeGptTiny(int64_t vocab);

}  // namespace frugal::models
