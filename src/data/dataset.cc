#include "frugal/data/dataset.h"

#include <cmath>
#include <filesystem>

#include "frugal/common/random.h"
#include "frugal/data/idx.h"

namespace frugal::data {

namespace {

// Finds "<dir>/<stem>.gz" or "<dir>/<stem>".
Result<std::string> FindFile(const std::string& dir, const std::string& stem) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) {
    return Status::NotFound("dataset directory " + dir +
                            " does not exist (install Debian's dataset-fashion-mnist or pass --data-dir)");
  }
  for (const std::string& name : {stem + ".gz", stem}) {
    fs::path p = fs::path(dir) / name;
    if (fs::exists(p)) return p.string();
  }
  return Status::NotFound("no " + stem + "[.gz] in " + dir);
}

Result<IdxArray> LoadIdx(const std::string& path) {
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadMaybeGzipFile(path));
  Result<IdxArray> arr = ParseIdx(bytes);
  if (!arr.ok()) return arr.status().WithContext(path);
  return arr;
}

// Box-Muller from SplitMix64, so synthetic data is identical everywhere.
float Gaussian(SplitMix64& rng) {
  double u1 = rng.NextDouble();
  double u2 = rng.NextDouble();
  if (u1 < 1e-300) u1 = 1e-300;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace

Status CheckFashionMnistFiles(const std::string& dir) {
  for (const char* stem : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"}) {
    Result<std::string> path = FindFile(dir, stem);
    if (!path.ok()) return path.status();
  }
  return Status::Ok();
}

Result<Dataset> LoadFashionMnist(const std::string& dir, Split split) {
  std::string prefix = split == Split::kTrain ? "train" : "t10k";
  FRUGAL_ASSIGN_OR_RETURN(std::string image_path, FindFile(dir, prefix + "-images-idx3-ubyte"));
  FRUGAL_ASSIGN_OR_RETURN(std::string label_path, FindFile(dir, prefix + "-labels-idx1-ubyte"));
  FRUGAL_ASSIGN_OR_RETURN(IdxArray images, LoadIdx(image_path));
  FRUGAL_ASSIGN_OR_RETURN(IdxArray labels, LoadIdx(label_path));
  if (images.dims.size() != 3) return Status::Corruption(image_path + ": expected 3 dimensions (N, rows, cols)");
  if (labels.dims.size() != 1) return Status::Corruption(label_path + ": expected 1 dimension (N)");
  if (images.dims[0] != labels.dims[0]) {
    return Status::Corruption(image_path + " has " + std::to_string(images.dims[0]) + " images but " + label_path +
                              " has " + std::to_string(labels.dims[0]) + " labels");
  }
  Dataset ds;
  ds.name = "fashion-mnist/" + prefix;
  ds.size = images.dims[0];
  ds.channels = 1;
  ds.height = images.dims[1];
  ds.width = images.dims[2];
  ds.num_classes = 10;
  ds.images.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) {
    ds.images[i] = (images.data[i] / 255.0f - kFashionMnistMean) / kFashionMnistStd;
  }
  ds.labels.resize(labels.data.size());
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= ds.num_classes) {
      return Status::Corruption(label_path + ": label " + std::to_string(labels.data[i]) + " at index " +
                                std::to_string(i) + " is not in [0, 10)");
    }
    ds.labels[i] = labels.data[i];
  }
  return ds;
}

Dataset MakeSynthetic(int64_t size, uint64_t seed, float noise) {
  Dataset ds;
  ds.name = "synthetic";
  ds.size = size;
  ds.channels = 1;
  ds.height = 28;
  ds.width = 28;
  ds.num_classes = 10;
  const int64_t numel = ds.sample_numel();
  // Prototypes depend only on a fixed seed so train and test sets made with
  // different seeds describe the same classes.
  SplitMix64 proto_rng(0xF00DULL);
  std::vector<float> prototypes(ds.num_classes * numel);
  for (float& v : prototypes) v = Gaussian(proto_rng);
  SplitMix64 rng(seed);
  ds.images.resize(size * numel);
  ds.labels.resize(size);
  for (int64_t i = 0; i < size; ++i) {
    int64_t label = static_cast<int64_t>(rng.Below(ds.num_classes));
    ds.labels[i] = label;
    for (int64_t j = 0; j < numel; ++j) {
      ds.images[i * numel + j] = prototypes[label * numel + j] + noise * Gaussian(rng);
    }
  }
  return ds;
}

}  // namespace frugal::data
