// frugal._C.RunOptions and frugal._C.options(): DistributedModel's engine
// keywords, generated from the run configuration's field list.
#include "options.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "frugal/common/enum_names.h"
#include "frugal/common/field_list.h"
#include "frugal/train/train_fields.h"

namespace frugal::python {

namespace {

// Note [Python keywords]
// frugal.DistributedModel takes as keywords the options of the engine that
// a script's model runs with: every field of DistributedOptions except
// those that the world or frugal train's own loop fix (kNotKeywords), and
// of TrainOptions the optimizer's settings and the seed (kTrainKeywords);
// the script owns its data, schedule, output and device. Each keyword's
// type, range, help and default are its field's (frugal.options() lists
// them), and a value is parsed and checked as frugal train's flag is, the
// messages naming the keyword. The defaults are frugal train's except
// kPythonDefaults.
constexpr std::string_view kNotKeywords[] = {
    "workers",                 // the world's size (frugal run, torchrun)
    "checksum_every",          // DistributedModel's check_every
    "link_grace_s",            // the world's: frugal.init, frugal run --link-grace-s
    "adapt",                   // the bandwidth controller runs in frugal train and frugal worker only
    "decide_every",            // the controller's
    "adapt_density_exponent",  // the controller's
    "compute_slowdown",        // an experiment of frugal train's loop
};
constexpr std::string_view kTrainKeywords[] = {"optimizer", "lr",           "momentum", "dampening", "nesterov",
                                               "weight_decay", "beta1", "beta2",    "eps",       "seed"};

// Where DistributedModel's defaults differ from frugal train's. frugal
// train's lr 0.05 and momentum 0.9 come with its cosine schedule and its
// 100 warm-up steps; a model steps at a constant lr unless its script
// schedules one, so it keeps torch.optim.SGD's momentum 0 and an lr that is
// stable without a warm-up.
constexpr std::pair<const char*, const char*> kPythonDefaults[] = {{"lr", "0.01"}, {"momentum", "0"}};

template <size_t N>
bool Contains(const std::string_view (&keys)[N], const char* key) {
  return std::find(std::begin(keys), std::end(keys), key) != std::end(keys);
}

// Calls visit(field, value) for every keyword's field of `c`, in field-list
// order.
template <class V>
void VisitKeywords(engine::RunConfig& c, V&& visit) {
  train::VisitFields(c.train, [&](const Field& f, auto& v) {
    if (Contains(kTrainKeywords, f.key)) visit(f, v);
  });
  engine::VisitFields(c.distributed, [&](const Field& f, auto& v) {
    if (!Contains(kNotKeywords, f.key)) visit(f, v);
  });
}

engine::RunConfig PythonDefaults() {
  engine::RunConfig c;
  for (const auto& [key, text] : kPythonDefaults) {
    Status s = engine::SetOption(&c, key, text);
    if (!s.ok()) throw std::logic_error("kPythonDefaults: " + s.message());
  }
  return c;
}

// The Python type of a field of type T, as frugal.options() names it.
template <class T>
const char* TypeName() {
  if constexpr (std::is_same_v<T, bool>) {
    return "bool";
  } else if constexpr (std::is_integral_v<T>) {
    return "int";
  } else if constexpr (std::is_floating_point_v<T>) {
    return "float";
  } else {
    return "str";
  }
}

template <class T>
bool HasType(const py::handle& v) {
  const bool is_bool = py::isinstance<py::bool_>(v);
  if constexpr (std::is_same_v<T, bool>) {
    return is_bool;
  } else if constexpr (std::is_integral_v<T>) {
    return !is_bool && PyIndex_Check(v.ptr());
  } else if constexpr (std::is_floating_point_v<T>) {
    // A number Python converts to float: float, int, numpy's floats.
    return !is_bool && (PyFloat_Check(v.ptr()) || PyIndex_Check(v.ptr()) || py::hasattr(v, "__float__"));
  } else {
    return py::isinstance<py::str>(v);
  }
}

template <class T>
py::object ToPython(const T& v) {
  if constexpr (std::is_enum_v<T>) {
    return py::str(NameOf(v));
  } else {
    return py::cast(v);
  }
}

// The field's text form of a Python value of the right type.
template <class T>
std::string TextOf(const py::handle& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.cast<bool>() ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<T>) {
    return FormatDouble(py::float_(py::reinterpret_borrow<py::object>(v)).cast<double>());
  } else {
    return py::str(v).cast<std::string>();
  }
}

// Sets keyword `key` of `c` to `value`: TypeError for a wrong type,
// ValueError for a value its field refuses; false for an unknown key.
bool SetKeyword(engine::RunConfig* c, const std::string& key, const py::handle& value) {
  bool found = false;
  VisitKeywords(*c, [&](const Field& f, auto& field) {
    using T = std::decay_t<decltype(field)>;
    if (found || key != f.key) return;
    found = true;
    if (!HasType<T>(value)) {
      throw py::type_error(key + "=" + py::repr(value).cast<std::string>() + " has the wrong type (expected " +
                           TypeName<T>() + ")");
    }
    T parsed = field;
    Status s = FieldFromText(f, TextOf<T>(value), &parsed);
    if (s.ok()) s = CheckField(f, parsed);
    if (!s.ok()) throw py::value_error(KeywordMessage(s.message()));
    field = parsed;
  });
  return found;
}

void SetKeywords(PyOptions* p, const py::dict& keywords) {
  std::vector<std::string> unknown;
  for (const auto& [k, v] : keywords) {
    const std::string key = py::str(k).cast<std::string>();
    if (!SetKeyword(&p->config, key, v)) unknown.push_back(key);
  }
  if (unknown.empty()) return;
  std::string names;
  for (const std::string& k : unknown) names += (names.empty() ? "" : ", ") + k;
  throw py::type_error("DistributedModel got unexpected keyword argument(s) " + names +
                       " (its engine keywords: frugal.options())");
}

py::object GetKeyword(PyOptions& p, const std::string& key) {
  py::object out;
  VisitKeywords(p.config, [&](const Field& f, auto& v) {
    if (key == f.key) out = ToPython(v);
  });
  if (!out) throw py::key_error(key);
  return out;
}

template <class T>
py::object ChoicesOf() {
  if constexpr (std::is_enum_v<T>) {
    py::list out;
    for (const auto& [v, name] : EnumNames<T>::kTable) out.append(name);
    return out;
  } else {
    return py::none();
  }
}

template <class T>
py::object RangeOf(const Field& f) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (std::isfinite(f.lo) || std::isfinite(f.hi)) return py::str(DescribeRange(f));
  }
  return py::none();
}

// frugal.options(): one dict per keyword, in field-list order.
py::list Schema() {
  py::list out;
  engine::RunConfig defaults = PythonDefaults();
  VisitKeywords(defaults, [&](const Field& f, auto& v) {
    using T = std::decay_t<decltype(v)>;
    py::dict d;
    d["key"] = f.key;
    d["type"] = TypeName<T>();
    d["default"] = ToPython(v);
    d["help"] = f.help;
    d["group"] = f.group;
    d["range"] = RangeOf<T>(f);
    d["choices"] = ChoicesOf<T>();
    out.append(d);
  });
  return out;
}

// Workers of this host: frugal run and torchrun set LOCAL_WORLD_SIZE; 1 when
// neither started the process.
int LocalWorkers() {
  const char* v = std::getenv("LOCAL_WORLD_SIZE");
  const int n = v == nullptr ? 1 : std::atoi(v);
  return n > 0 ? n : 1;
}

}  // namespace

std::string KeywordMessage(std::string msg) {
  std::vector<std::pair<std::string, std::string>> names;  // flag, keyword
  engine::RunConfig probe;
  engine::VisitFields(probe, [&](const Field& f, const auto&) { names.emplace_back(f.Flag(), f.key); });
  // Longest first, so --lr-schedule is not read as --lr.
  std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& [flag, key] : names) {
    for (size_t pos; (pos = msg.find(flag)) != std::string::npos;) msg.replace(pos, flag.size(), key);
  }
  return msg;
}

engine::RunConfig ToConfig(const PyOptions& p, const std::string& device) {
  engine::RunConfig c = p.config;
  c.train.device = device;
  // Note [One resolver] (run_config.h): the plan frugal train would run,
  // for this world and this host's workers. Only the resolution sees the
  // world's size: Validate's --workers checks are the launcher's, and an
  // explicit sync='local' runs in a world of one too
  // (Note [A lone worker] in local_sync.cc).
  engine::RunConfig world = c;
  world.distributed.workers = std::max(1, p.workers);
  engine::HostFacts facts;
  facts.workers_on_host = LocalWorkers();
  const int workers = c.distributed.workers;
  c = engine::ResolvePlan(world, facts);
  c.distributed.workers = workers;
  if (Status s = engine::Validate(c); !s.ok()) throw py::value_error(KeywordMessage(s.message()));
  return c;
}

void BindOptions(py::module_& m) {
  m.def("options", &Schema,
        "DistributedModel's engine keywords: one dict per keyword with key, type, default, help, group, range "
        "(None: any) and choices (None: any)");
  py::class_<PyOptions>(m, "RunOptions", "DistributedModel's engine keywords as a run configuration")
      .def(py::init([](const py::dict& keywords) {
             PyOptions p;
             p.config = PythonDefaults();
             SetKeywords(&p, keywords);
             return p;
           }),
           py::arg("keywords") = py::dict())
      .def("set", &SetKeywords, py::arg("keywords"), "Sets keywords (TypeError, ValueError naming the keyword)")
      .def("__getitem__", &GetKeyword, py::arg("key"))
      .def("copy", [](const PyOptions& p) { return p; })
      .def_readwrite("workers", &PyOptions::workers)
      .def("validate", [](const PyOptions& p) { ToConfig(p, "cpu"); }, "Raises ValueError on a bad option")
      .def("plan_toml", [](const PyOptions& p) { return engine::ToToml(ToConfig(p, "cpu")); },
           "The run configuration these options resolve to (Note [One resolver]), as TOML lines")
      .def("resolved_sync", [](const PyOptions& p) {
        return std::string(NameOf(ToConfig(p, "cpu").distributed.sync));
      }, "'step', 'local' or 'site': sync with 'auto' resolved for `workers` (engine::SyncOf)")
      .def("resolved_elastic_every", [](const PyOptions& p, int64_t given) {
        PyOptions q = p;
        q.config.elastic.elastic_every = given;
        return ToConfig(q, "cpu").elastic.elastic_every;
      }, py::arg("given"), "Steps between an elastic job's gates: given, or for 0 the mode's (engine::ElasticEveryOf)")
      .def("resolved_density", [](const PyOptions& p) { return engine::DensityOf(ToConfig(p, "cpu").distributed); },
           "The density the run uses (density 0: the mode's default)");
}

}  // namespace frugal::python
