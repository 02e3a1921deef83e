// frugal._C: the C++ side of the Python package. The package (python/frugal)
// is the API users see; this module only exposes the engine's classes.
#include "bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "Frugal's C++ engine (use the frugal package, not this module)";
  frugal::python::BindStatus(m);
  frugal::python::BindWorld(m);
  frugal::python::BindHook(m);
  frugal::python::BindStats(m);
  frugal::python::BindPlan(m);
#ifdef FRUGAL_HAVE_REPLICA
  frugal::python::BindReplica(m);
  frugal::python::BindRunState(m);
  frugal::python::BindElastic(m);
  m.attr("HAVE_REPLICA") = true;
#else
  m.attr("HAVE_REPLICA") = false;
#endif
  m.attr("TORCH_VERSION") = TORCH_VERSION;
}
