#include "frugal/data/text_corpus.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace frugal::data {

namespace {

// Note [bible.data layout]. bible-kjv-text's data file, as written by the
// bible program's "squish" (Unix compress with a restart every window):
//   0x00  "EC02", then a zero-padded description up to 0x50
//   0x54  u32 big-endian: window size W (bytes of text per window)
//   0x58  u32: number of windows n
//   0x5c  n + 1 u32 offsets; window i is bytes [off[i], off[i+1]), the last
//         offset is the file size
//   then the 3-byte compress header 1f 9d F (F & 0x1f: maximum code width,
//   F & 0x80: block mode) just before off[0].
// Each window is an independent LZW code stream (9-bit codes growing to the
// maximum, code 256 = clear, packed LSB first, and padded to a whole group
// of 8 codes whenever the width changes) that decodes to exactly W bytes,
// the last one to at most W.
constexpr char kMagic[] = "EC02";
constexpr size_t kWindowSizeAt = 0x54;
constexpr size_t kOffsetsAt = 0x5c;
constexpr uint32_t kMaxWindows = 1 << 16;
constexpr uint32_t kMaxWindowSize = 1 << 24;
constexpr int kClear = 256;
constexpr int kFirstFree = 257;

uint32_t ReadU32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) | uint32_t{b[at + 3]};
}

// One window's LZW code stream (Note [bible.data layout]).
class LzwWindowDecoder {
 public:
  explicit LzwWindowDecoder(int max_bits)
      : max_bits_(max_bits), prefix_(size_t{1} << max_bits), suffix_(size_t{1} << max_bits),
        stack_(size_t{1} << max_bits) {}

  // Appends the decoded window to *out; at most `limit` bytes.
  Status Decode(const uint8_t* data, size_t size, size_t limit, std::string* out) {
    const size_t start = out->size();
    const uint64_t total_bits = uint64_t{size} * 8;
    uint64_t pos = 0, group_start = 0;
    int bits = 9;
    int free_code = kFirstFree;
    int old = -1;
    uint8_t first = 0;
    while (pos + static_cast<uint64_t>(bits) <= total_bits) {
      const int code = Read(data, size, pos, bits);
      pos += static_cast<uint64_t>(bits);
      if (code == kClear) {
        pos = Align(pos, group_start, bits);
        group_start = pos;
        bits = 9;
        free_code = kFirstFree - 1;
        old = -1;
        continue;
      }
      if (old < 0) {
        if (code > 255) return Status::Corruption("LZW stream starts with code " + std::to_string(code));
        out->push_back(static_cast<char>(code));
        old = code;
        first = static_cast<uint8_t>(code);
        free_code = kFirstFree;
        continue;
      }
      if (code > free_code) {
        return Status::Corruption("LZW code " + std::to_string(code) + " is past the table (" +
                                  std::to_string(free_code) + " entries)");
      }
      first = Emit(code == free_code ? old : code, code == free_code, first, out);
      if (out->size() - start > limit) return Status::Corruption("a window decodes to more than its size");
      if (free_code < (1 << max_bits_)) {
        prefix_[static_cast<size_t>(free_code)] = old;
        suffix_[static_cast<size_t>(free_code)] = first;
        ++free_code;
      }
      old = code;
      if (free_code > (1 << bits) - 1 && bits < max_bits_) {
        pos = Align(pos, group_start, bits);
        group_start = pos;
        ++bits;
      }
    }
    return Status::Ok();
  }

 private:
  static int Read(const uint8_t* data, size_t size, uint64_t pos, int bits) {
    const size_t byte = static_cast<size_t>(pos >> 3);
    uint32_t v = 0;
    for (size_t i = 0; i < 3 && byte + i < size; ++i) v |= uint32_t{data[byte + i]} << (8 * i);
    return static_cast<int>((v >> (pos & 7)) & ((1u << bits) - 1));
  }

  // The encoder pads to a whole group of 8 codes (bits bytes) when the width changes.
  static uint64_t Align(uint64_t pos, uint64_t group_start, int bits) {
    const uint64_t group = static_cast<uint64_t>(bits) * 8;
    return group_start + (pos - group_start + group - 1) / group * group;
  }

  // Appends the string of `code` (then `first` again for the KwKwK case);
  // returns the string's first byte.
  uint8_t Emit(int code, bool repeat_first, uint8_t first, std::string* out) {
    size_t n = 0;
    while (code > 255) {
      stack_[n++] = suffix_[static_cast<size_t>(code)];
      code = prefix_[static_cast<size_t>(code)];
    }
    const auto head = static_cast<uint8_t>(code);
    out->push_back(static_cast<char>(head));
    while (n > 0) out->push_back(static_cast<char>(stack_[--n]));
    if (repeat_first) out->push_back(static_cast<char>(first));
    return head;
  }

  int max_bits_;
  std::vector<int> prefix_;
  std::vector<uint8_t> suffix_;
  std::vector<uint8_t> stack_;
};

// The window size, window count and offset table, validated.
Status ParseHeader(const std::vector<uint8_t>& b, uint32_t* window_size, std::vector<uint32_t>* offsets,
                   int* max_bits) {
  if (b.size() < kOffsetsAt || std::memcmp(b.data(), kMagic, 4) != 0) {
    return Status::Corruption("not a bible-kjv-text data file (no EC02 header)");
  }
  *window_size = ReadU32(b, kWindowSizeAt);
  const uint32_t n = ReadU32(b, kWindowSizeAt + 4);
  if (*window_size == 0 || *window_size > kMaxWindowSize || n == 0 || n > kMaxWindows) {
    return Status::Corruption("bad header: window size " + std::to_string(*window_size) + ", " +
                              std::to_string(n) + " windows");
  }
  const size_t table_end = kOffsetsAt + 4 * (size_t{n} + 1);
  if (b.size() < table_end + 3) return Status::Corruption("truncated offset table");
  offsets->resize(n + 1);
  for (uint32_t i = 0; i <= n; ++i) (*offsets)[i] = ReadU32(b, kOffsetsAt + 4 * size_t{i});
  if ((*offsets)[0] < table_end + 3 || (*offsets)[n] != b.size()) {
    return Status::Corruption("offset table does not match the file (" + std::to_string(b.size()) +
                              " bytes; truncated?)");
  }
  for (uint32_t i = 0; i < n; ++i) {
    if ((*offsets)[i + 1] <= (*offsets)[i]) return Status::Corruption("window offsets are not increasing");
  }
  const size_t h = (*offsets)[0] - 3;
  *max_bits = b[h + 2] & 0x1f;
  if (b[h] != 0x1f || b[h + 1] != 0x9d || (b[h + 2] & 0x80) == 0 || *max_bits < 9 || *max_bits > 16) {
    return Status::Corruption("no block-mode compress header before the first window");
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> DecodeBibleData(const std::vector<uint8_t>& bytes) {
  uint32_t window_size = 0;
  std::vector<uint32_t> offsets;
  int max_bits = 0;
  FRUGAL_RETURN_IF_ERROR(ParseHeader(bytes, &window_size, &offsets, &max_bits));
  LzwWindowDecoder decoder(max_bits);
  std::string text;
  const size_t n = offsets.size() - 1;
  text.reserve(n * window_size);
  for (size_t i = 0; i < n; ++i) {
    const size_t before = text.size();
    Status s = decoder.Decode(bytes.data() + offsets[i], offsets[i + 1] - offsets[i], window_size, &text);
    if (!s.ok()) return s.WithContext("window " + std::to_string(i));
    const size_t got = text.size() - before;
    if ((i + 1 < n && got != window_size) || got == 0) {
      return Status::Corruption("window " + std::to_string(i) + " decodes to " + std::to_string(got) +
                                " bytes, expected " + std::to_string(window_size));
    }
  }
  return text;
}

Result<std::string> ReadTextCorpus(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::NotFound("text corpus " + path +
                            " does not exist (install Debian's bible-kjv-text, or pass --text-file with a plain "
                            "text file)");
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return Status::IOError(path + ": read failed");
  if (bytes.empty()) return Status::Corruption(path + ": the corpus is empty");
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), kMagic, 4) == 0) {
    Result<std::string> text = DecodeBibleData(bytes);
    if (!text.ok()) return text.status().WithContext(path);
    return text;
  }
  return std::string(bytes.begin(), bytes.end());
}

Result<Dataset> MakeTextDataset(const std::string& text, Split split, int64_t context, int64_t held_out_bytes) {
  if (context < 1) return Status::InvalidArgument("context length must be positive");
  if (held_out_bytes < context + 1) {
    return Status::InvalidArgument("the held-out split (" + std::to_string(held_out_bytes) +
                                   " bytes) must hold one window of " + std::to_string(context) + " + 1 bytes");
  }
  const auto total = static_cast<int64_t>(text.size());
  if (total < held_out_bytes + context + 1) {
    return Status::Corruption("the corpus has " + std::to_string(total) + " bytes, too few for a " +
                              std::to_string(held_out_bytes) + "-byte validation split and one training window");
  }
  const int64_t begin = split == Split::kTrain ? 0 : total - held_out_bytes;
  const int64_t end = split == Split::kTrain ? total - held_out_bytes : total;
  Dataset ds;
  ds.name = split == Split::kTrain ? "text-train" : "text-validation";
  ds.sequence_length = context;
  ds.size = (end - begin - 1) / context;
  ds.num_classes = kByteVocab;
  ds.channels = 1;
  ds.height = 1;
  ds.width = context;
  ds.tokens.assign(text.begin() + begin, text.begin() + begin + ds.size * context + 1);
  return ds;
}

Result<Dataset> LoadTextCorpus(const std::string& path, Split split, int64_t context, int64_t held_out_bytes) {
  FRUGAL_ASSIGN_OR_RETURN(std::string text, ReadTextCorpus(path));
  Result<Dataset> ds = MakeTextDataset(text, split, context, held_out_bytes);
  if (!ds.ok()) return ds.status().WithContext(path);
  return ds;
}

}  // namespace frugal::data
