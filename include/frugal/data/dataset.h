// In-memory image-classification datasets (torch-free) and the Fashion-MNIST
// loader. Images are stored as normalised fp32 in NCHW order so a trainer can
// wrap them without copying (torch::from_blob).
//
// Thread safety: a Dataset is immutable after loading; share it freely.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::data {

// An image dataset (images, labels), or a text dataset (sequence_length > 0:
// tokens only; see text_corpus.h).
struct Dataset {
  std::string name;
  int64_t size = 0;  // number of samples
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t num_classes = 0;      // text: the vocabulary (256 bytes)
  std::vector<float> images;    // size * channels * height * width, normalised
  std::vector<int64_t> labels;  // size, each in [0, num_classes)
  // Text: sample i's inputs are tokens[i*T, i*T+T) and its targets
  // tokens[i*T+1, i*T+T+1), T = sequence_length; tokens has size*T+1 bytes.
  int64_t sequence_length = 0;  // 0: an image dataset
  std::vector<uint8_t> tokens;

  bool is_text() const { return sequence_length > 0; }
  int64_t sample_numel() const { return channels * height * width; }
};

enum class Split { kTrain, kTest };

// Default location of Debian's dataset-fashion-mnist package.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// Per-pixel mean and standard deviation of the Fashion-MNIST training set
// (pixels scaled to [0, 1]); images are stored as (x - mean) / std.
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

// Loads the train (60,000) or test (10,000) split from `dir`, which holds
// {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]. Missing, truncated or
// corrupt files give a Status naming the file; never a crash.
Result<Dataset> LoadFashionMnist(const std::string& dir, Split split);

// Cheap check that `dir` holds all four files (does not parse them): lets a
// launcher fail fast with a clear message before starting workers.
Status CheckFashionMnistFiles(const std::string& dir);

// A deterministic synthetic 10-class problem shaped like Fashion-MNIST
// (1x28x28): each class has a fixed random prototype image; a sample is its
// prototype plus Gaussian noise of standard deviation `noise`. Learnable to
// high accuracy in a few hundred steps, for fast tests.
Dataset MakeSynthetic(int64_t size, uint64_t seed, float noise = 1.0f);

}  // namespace frugal::data
