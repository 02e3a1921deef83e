// A byte-level text corpus for the language-model workload (gpt-tiny): the
// King James Bible of Debian's bible-kjv-text package, or any plain text
// file. Torch-free.
//
// bible-kjv-text installs the text only in its own compressed form,
// /usr/lib/bible.data ("EC02" header, then Unix-compress LZW restarted every
// 64 KiB window; docs/design/data.md has the layout). DecodeBibleData decodes it to
// the 4,404,475-byte text; every header field, window offset, LZW code and
// window length is checked, so a corrupt file is an error, never a crash.
//
// Split: the last `held_out_bytes` bytes of the text are the validation set,
// the rest the training set (fixed, no shuffling). Each split is cut into
// non-overlapping windows of `context` input bytes; sample i reads bytes
// [i*T, i*T+T) and predicts bytes [i*T+1, i*T+T+1) (Dataset::tokens).
//
// Thread safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/data/dataset.h"

namespace frugal::data {

// Where bible-kjv-text puts the compressed text.
inline constexpr const char* kBibleKjvPath = "/usr/lib/bible.data";
// The validation split: the final 64 KiB of the text (the end of Revelation
// in the KJV; 511 windows of 128 bytes).
inline constexpr int64_t kHeldOutBytes = 65536;
// Byte-level vocabulary.
inline constexpr int64_t kByteVocab = 256;

// Decodes the contents of a bible-kjv-text data file. Corruption on a bad
// magic, header, offset table, LZW code or window length.
Result<std::string> DecodeBibleData(const std::vector<uint8_t>& bytes);

// Reads a corpus file: a bible-kjv-text data file (starts with "EC02") is
// decoded, anything else is taken as plain text. NotFound (with the package
// to install) for a missing file; Corruption for an undecodable or empty one.
Result<std::string> ReadTextCorpus(const std::string& path);

// The train or validation split of `text` as a Dataset of `context`-byte
// windows. InvalidArgument when context < 1 or held_out_bytes < context + 1;
// Corruption when the text is too short to leave both splits at least one
// window ("the corpus has N bytes, ...").
Result<Dataset> MakeTextDataset(const std::string& text, Split split, int64_t context,
                                int64_t held_out_bytes = kHeldOutBytes);

// ReadTextCorpus + MakeTextDataset; errors name the file.
Result<Dataset> LoadTextCorpus(const std::string& path, Split split, int64_t context,
                               int64_t held_out_bytes = kHeldOutBytes);

}  // namespace frugal::data
