// The dashboard page served at `/` (internal): static HTML and JavaScript
// that polls GET /api/state every two seconds.
#pragma once

#include <string>

namespace frugal::cluster {
std::string DashboardHtml();
}  // namespace frugal::cluster
