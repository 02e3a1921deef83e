// Status and Result<T>: how Frugal reports expected failures (bad config,
// corrupt file, unreachable peer, timeout) without exceptions crossing module
// boundaries. Modelled on leveldb's Status.
//
// Both are [[nodiscard]]: dropping one is a compiler warning. Where ignoring
// an error is right, say so with `.IgnoreError()` and a comment why.
//
// Thread safety: value types; distinct objects may be used concurrently.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace frugal {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,  // The caller passed something wrong (config, flag).
    kNotFound,         // A file, model or key does not exist.
    kCorruption,       // Data read from a file or the wire is malformed.
    kIOError,          // The OS refused a read or write.
    kTimeout,          // A peer did not answer in time.
    kUnavailable,      // A peer went away.
    kInternal,         // An invariant broke; a bug.
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status IOError(std::string msg) { return Status(Code::kIOError, std::move(msg)); }
  static Status Timeout(std::string msg) { return Status(Code::kTimeout, std::move(msg)); }
  static Status Unavailable(std::string msg) { return Status(Code::kUnavailable, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "Corruption: train-images: header truncated".
  std::string ToString() const;

  // Returns a copy whose message is "context: message". Ok stays Ok.
  Status WithContext(const std::string& context) const;

  // Drops the status on purpose (best-effort cleanup, an error already
  // reported another way).
  void IgnoreError() const {}

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

// Either a value or a non-Ok Status. A Result made from an Ok Status has no
// value to give, so it holds Internal "Result constructed from an Ok status
// without a value" instead: ok() is true exactly when a value is there.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status)                          // NOLINT: implicit by design
      : status_(status.ok() ? Status::Internal("Result constructed from an Ok status without a value")
                            : std::move(status)) {}

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace frugal

// Returns early from the enclosing function when `expr` is not Ok.
#define FRUGAL_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::frugal::Status _frugal_st = (expr);       \
    if (!_frugal_st.ok()) return _frugal_st;    \
  } while (0)

#define FRUGAL_CONCAT_INNER(a, b) a##b
#define FRUGAL_CONCAT(a, b) FRUGAL_CONCAT_INNER(a, b)

// FRUGAL_ASSIGN_OR_RETURN(auto x, MakeX()); declares x or returns the error.
#define FRUGAL_ASSIGN_OR_RETURN(decl, expr) \
  FRUGAL_ASSIGN_OR_RETURN_IMPL(FRUGAL_CONCAT(_frugal_res_, __LINE__), decl, expr)
#define FRUGAL_ASSIGN_OR_RETURN_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  decl = std::move(tmp).value()
