#include "bindings.h"

namespace frugal::python {

void ThrowIfError(const Status& status) {
  if (status.ok()) return;
  const std::string& msg = status.message();
  switch (status.code()) {
    case Status::Code::kInvalidArgument:
    case Status::Code::kCorruption:  // a malformed checkpoint is bad input too
      throw py::value_error(msg);
    case Status::Code::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, msg.c_str());
      throw py::error_already_set();
    case Status::Code::kTimeout:
      PyErr_SetString(PyExc_TimeoutError, msg.c_str());
      throw py::error_already_set();
    case Status::Code::kUnavailable:
      PyErr_SetString(PyExc_ConnectionError, msg.c_str());
      throw py::error_already_set();
    default:
      throw std::runtime_error(status.ToString());
  }
}

void BindStatus(py::module_& m) {
  // For tests: raises the exception a Status of `code` becomes.
  m.def("_raise_status", [](const std::string& code, const std::string& msg) {
    if (code == "invalid_argument") ThrowIfError(Status::InvalidArgument(msg));
    if (code == "not_found") ThrowIfError(Status::NotFound(msg));
    if (code == "timeout") ThrowIfError(Status::Timeout(msg));
    if (code == "unavailable") ThrowIfError(Status::Unavailable(msg));
    ThrowIfError(Status::Internal(msg));
  });
}

}  // namespace frugal::python
