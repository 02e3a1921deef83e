#pragma once

// Note [ThreadSanitizer and libzmq]
// Debian's libzmq is not built with ThreadSanitizer, so the lock-free pipes
// that order a message between a user thread and ZeroMQ's I/O thread are
// invisible to it. Memory handed through them then looks unsynchronised:
// a payload filled by our I/O thread and freed by ReleasePayload on ZeroMQ's
// thread, or a received frame's buffer allocated and filled on ZeroMQ's
// thread and read by ours. TsanRelease before the hand-off and TsanAcquire
// after it tell TSan what the pipe guarantees, so that a TSan build reports
// only races on Frugal's own state. Where libzmq both allocates and fills
// the memory (received frames), there is no release point in our code; the
// suppressions in scripts/tsan.supp name those frames instead
// (docs/design/security.md, "Sanitizers"). Outside a TSan build both are no-ops.

#if defined(__SANITIZE_THREAD__)
#define FRUGAL_TSAN_ENABLED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FRUGAL_TSAN_ENABLED 1
#endif
#endif

#ifdef FRUGAL_TSAN_ENABLED
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace frugal::comm {

// Everything this thread wrote before it happens-before what a thread that
// later calls TsanAcquire(addr) reads after it.
inline void TsanRelease([[maybe_unused]] const void* addr) {
#ifdef FRUGAL_TSAN_ENABLED
  __tsan_release(const_cast<void*>(addr));
#endif
}

inline void TsanAcquire([[maybe_unused]] const void* addr) {
#ifdef FRUGAL_TSAN_ENABLED
  __tsan_acquire(const_cast<void*>(addr));
#endif
}

}  // namespace frugal::comm
