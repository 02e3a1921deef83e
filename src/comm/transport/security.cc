#include "frugal/comm/transport/security.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <sstream>
#include <zmq.h>

#include "frugal/common/file.h"
#include "frugal/common/text.h"

namespace frugal::comm {

namespace {

constexpr size_t kZ85KeyChars = 40;

// Note [Key file permissions]
// Like ssh: a secret key that other users can read is no secret, and an
// allow-list that other users can write lets them add themselves. Both are
// refused rather than warned about, with the command that fixes them.
Status CheckMode(const std::string& path, mode_t forbidden, const std::string& why) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::IOError(path + ": " + std::strerror(errno));
  }
  if ((st.st_mode & forbidden) == 0) return Status::Ok();
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return Status::InvalidArgument(path + " has mode " + mode + ": " + why + "; run: chmod 600 " + path);
}

bool IsZ85Key(const std::string& z85) { return z85.size() == kZ85KeyChars && !Z85ToKey(z85).empty(); }

// Calls fn(line, line_number) for every line of `text` that is neither
// blank nor a '#' comment, trimmed; stops at the first error.
Status ForEachEntry(const std::string& text, const std::function<Status(const std::string&, int)>& fn) {
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    line = Trim(line);
    if (line.empty() || line[0] == '#') continue;
    FRUGAL_RETURN_IF_ERROR(fn(line, line_no));
  }
  return Status::Ok();
}

}  // namespace

bool CurveAvailable() { return zmq_has("curve") != 0; }

std::string KeyToZ85(const std::string& binary32) {
  if (binary32.size() != 32) return "";
  char out[kZ85KeyChars + 1];
  if (zmq_z85_encode(out, reinterpret_cast<const uint8_t*>(binary32.data()), 32) == nullptr) return "";
  return std::string(out, kZ85KeyChars);
}

std::string Z85ToKey(const std::string& z85) {
  if (z85.size() != kZ85KeyChars) return "";
  uint8_t out[32];
  if (zmq_z85_decode(out, z85.c_str()) == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(out), 32);
}

std::string KeyFingerprint(const std::string& z85_public_key) { return z85_public_key.substr(0, 12); }

Result<CurveKeyPair> GenerateCurveKeyPair() {
  if (!CurveAvailable()) {
    return Status::Unavailable("this libzmq was built without CURVE (libsodium); install a libzmq with CURVE");
  }
  char pub[kZ85KeyChars + 1], sec[kZ85KeyChars + 1];
  if (zmq_curve_keypair(pub, sec) != 0) return Status::IOError(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
  return CurveKeyPair{pub, sec};
}

Status WriteKeyPairFiles(const std::string& path, const CurveKeyPair& keys, const std::string& name) {
  // O_EXCL: never replace a key that may already be on an allow-list.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return Status::InvalidArgument(path + " exists; remove it or choose another --out");
    return Status::IOError("cannot create " + path + ": " + std::strerror(errno));
  }
  std::string text = "# Frugal CurveZMQ key pair (frugal keys generate). Keep this file private (mode 0600).\n"
                     "public-key = \"" + keys.public_key + "\"\nsecret-key = \"" + keys.secret_key + "\"\n";
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ::close(fd) == 0 && ok;
  if (!ok) return Status::IOError("cannot write " + path);
  const std::string pub_path = path + ".pub";
  fd = ::open(pub_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("cannot create " + pub_path + ": " + std::strerror(errno));
  text = keys.public_key + " " + name + "\n";
  ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ::close(fd) == 0 && ok;
  if (!ok) return Status::IOError("cannot write " + pub_path);
  return Status::Ok();
}

Result<CurveKeyPair> ReadKeyPairFile(const std::string& path) {
  FRUGAL_RETURN_IF_ERROR(CheckMode(path, S_IRWXG | S_IRWXO, "group or others can read this secret key"));
  FRUGAL_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "key file"));
  CurveKeyPair keys;
  FRUGAL_RETURN_IF_ERROR(ForEachEntry(text, [&](const std::string& line, int line_no) {
    const size_t eq = line.find('=');
    const std::string where = path + ":" + std::to_string(line_no);
    if (eq == std::string::npos) return Status::InvalidArgument(where + ": expected key = \"Z85\"");
    const std::string key = Trim(line.substr(0, eq));
    std::string value = Trim(line.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    if (!IsZ85Key(value)) return Status::InvalidArgument(where + ": " + key + " is not a 40-character Z85 key");
    if (key == "public-key") keys.public_key = value;
    else if (key == "secret-key") keys.secret_key = value;
    else return Status::InvalidArgument(where + ": unknown entry '" + key + "'");
    return Status::Ok();
  }));
  if (keys.public_key.empty() || keys.secret_key.empty()) {
    return Status::InvalidArgument(path + ": needs both public-key and secret-key (frugal keys generate --out FILE)");
  }
  char derived[kZ85KeyChars + 1];
  if (zmq_curve_public(derived, keys.secret_key.c_str()) != 0 || keys.public_key != derived) {
    return Status::InvalidArgument(path + ": the public key does not belong to the secret key");
  }
  return keys;
}

Result<std::vector<std::string>> ReadAuthorizedKeysFile(const std::string& path) {
  FRUGAL_RETURN_IF_ERROR(CheckMode(path, S_IWGRP | S_IWOTH, "group or others can write this allow-list"));
  FRUGAL_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "authorized keys file"));
  std::vector<std::string> keys;
  FRUGAL_RETURN_IF_ERROR(ForEachEntry(text, [&](const std::string& line, int line_no) {
    const std::string key = line.substr(0, line.find_first_of(" \t"));
    if (!IsZ85Key(key)) {
      return Status::InvalidArgument(path + ":" + std::to_string(line_no) +
                                     ": expected a 40-character Z85 public key (a line of a .pub file)");
    }
    keys.push_back(key);
    return Status::Ok();
  }));
  if (keys.empty()) return Status::InvalidArgument(path + ": no public keys");
  return keys;
}

Status ValidateSecurity(const SecurityOptions& options) {
  if (options.mechanism == SecurityOptions::Mechanism::kNone) return Status::Ok();
  if (!CurveAvailable()) {
    return Status::Unavailable("CURVE security requested but this libzmq was built without CURVE (libsodium)");
  }
  if (!IsZ85Key(options.keys.public_key) || !IsZ85Key(options.keys.secret_key)) {
    return Status::InvalidArgument("CURVE security needs this process's key pair (--key FILE)");
  }
  for (const std::string& k : options.authorized_keys) {
    if (!IsZ85Key(k)) return Status::InvalidArgument("authorised key '" + KeyFingerprint(k) + "...' is not a Z85 key");
  }
  if (!options.server_key.empty() && !IsZ85Key(options.server_key)) {
    return Status::InvalidArgument("the rendezvous server key is not a Z85 key");
  }
  return Status::Ok();
}

Result<SecurityOptions> CurveSecurityFromFiles(const std::string& key_file, const std::string& authorized_keys_file) {
  SecurityOptions s;
  s.mechanism = SecurityOptions::Mechanism::kCurve;
  FRUGAL_ASSIGN_OR_RETURN(s.keys, ReadKeyPairFile(key_file));
  FRUGAL_ASSIGN_OR_RETURN(s.authorized_keys, ReadAuthorizedKeysFile(authorized_keys_file));
  FRUGAL_RETURN_IF_ERROR(ValidateSecurity(s));
  return s;
}

bool IsLoopbackAddress(const std::string& address) {
  return address.rfind("tcp://127.", 0) == 0 || address.rfind("tcp://localhost:", 0) == 0 ||
         address.rfind("tcp://[::1]:", 0) == 0 || address.rfind("ipc://", 0) == 0 ||
         address.rfind("inproc://", 0) == 0;
}

Result<SecurityOptions> ResolveSecuritySettings(const std::string& key_file, const std::string& authorized_keys_file,
                                                bool insecure, const std::string& address) {
  if (insecure) {
    if (!key_file.empty() || !authorized_keys_file.empty()) {
      return Status::InvalidArgument("--insecure cannot be combined with --key/--authorized-keys");
    }
    return SecurityOptions{};
  }
  if (key_file.empty() && authorized_keys_file.empty()) {
    if (IsLoopbackAddress(address)) return SecurityOptions{};  // One machine: nobody else can connect.
    return Status::InvalidArgument(
        "a multi-host run needs keys: run 'frugal keys generate --out site.key' on each site, "
        "collect the .pub lines into one authorized_keys file, and pass --key site.key "
        "--authorized-keys authorized_keys (or --insecure for plain TCP on a trusted network)");
  }
  if (key_file.empty() || authorized_keys_file.empty()) {
    return Status::InvalidArgument("--key and --authorized-keys go together");
  }
  return CurveSecurityFromFiles(key_file, authorized_keys_file);
}

}  // namespace frugal::comm
