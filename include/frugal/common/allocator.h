// Process-wide heap settings for training processes.
#pragma once

#include <string>

namespace frugal {

// Keeps freed tensor memory in the process instead of handing it back to the
// kernel after every step (Note [Heap retention]). Returns a one-line
// description of what was done, for logs: "" when nothing was changed because
// the platform has no such knob, the user set GLIBC_TUNABLES malloc options, or
// FRUGAL_HEAP_RETENTION=0.
std::string RetainHeapBetweenSteps();

}  // namespace frugal
