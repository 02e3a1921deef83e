// Socket security of the ZeroMQ backend and the rendezvous: who may connect
// to a process, and whether the bytes are encrypted (docs/design/security.md).
//
// SecurityOptions is the seam: every socket comm creates passes through one
// setup function (src/comm/zmq/zmq_socket_setup.cc) that applies it, and a
// process that listens with kCurve runs a ZAP handler (one thread per ZeroMQ
// context) that admits only the allow-listed public keys. A new mechanism is
// a new enum value handled in those two places.
//
// CurveZMQ in short: each process has a long-term key pair; a client must
// know the server's public key before it connects; the server learns the
// client's public key in the handshake and asks the ZAP handler whether it
// may connect. Where comm's clients get server keys from:
//   - worker -> rendezvous server: SecurityOptions::server_key, or, when
//     empty, every authorised key is tried (the server's key must be on the
//     list; the handshake succeeds only with the right one);
//   - worker -> worker: the world table, whose keys the rendezvous server
//     takes from the authenticated connections, not from what a rank claims.
//
// Key files (text, written by `frugal keys generate`):
//   secret key file   `public-key = "<Z85>"` and `secret-key = "<Z85>"`
//                     lines, '#' comments; mode 0600 (refused when group or
//                     others may read it).
//   FILE.pub          `<Z85> <name>`: one line to append to an allow-list.
//   authorized keys   one Z85 public key per line (the first word; the rest
//                     of the line is a free-form name), '#' comments and
//                     blank lines allowed; refused when group or others may
//                     write it.
//
// Thread safety: free functions; no state.
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::comm {

struct CurveKeyPair {
  std::string public_key;  // Z85, 40 characters.
  std::string secret_key;  // Z85, 40 characters. Never logged.
};

struct SecurityOptions {
  enum class Mechanism {
    kNone,   // Plain TCP: anyone who can reach a port can connect.
    kCurve,  // CurveZMQ: encrypted, and only allow-listed keys may connect.
  };
  Mechanism mechanism = Mechanism::kNone;
  // kCurve: this process's key pair.
  CurveKeyPair keys;
  // kCurve: Z85 public keys that may connect to this process's listening
  // sockets. This process's own public key is always admitted (the workers
  // of one site may share a key).
  std::vector<std::string> authorized_keys;
  // kCurve, rendezvous clients: the server's public key. Default (empty):
  // try every authorised key and this process's own.
  std::string server_key;
};

// Whether this libzmq was built with CURVE (libsodium).
bool CurveAvailable();

// A fresh key pair (zmq_curve_keypair). Errors: Unimplemented without CURVE.
Result<CurveKeyPair> GenerateCurveKeyPair();

// Writes `path` (mode 0600, the pair) and `path`.pub (mode 0644, the public
// key and `name`). Refuses to overwrite an existing `path`.
Status WriteKeyPairFiles(const std::string& path, const CurveKeyPair& keys, const std::string& name);

// Reads a secret key file. Errors: NotFound, InvalidArgument when group or
// others can read it ("... chmod 600 FILE") or the keys are malformed or do
// not belong together.
Result<CurveKeyPair> ReadKeyPairFile(const std::string& path);

// Reads an allow-list. Errors: NotFound, InvalidArgument naming file:line
// for a malformed key, or when group or others can write the file.
Result<std::vector<std::string>> ReadAuthorizedKeysFile(const std::string& path);

// kCurve options from the two files (the CLI's --key, --authorized-keys).
Result<SecurityOptions> CurveSecurityFromFiles(const std::string& key_file, const std::string& authorized_keys_file);

// Whether `address` (tcp://HOST:PORT, ipc://..., inproc://...) can be
// reached from this machine only.
bool IsLoopbackAddress(const std::string& address);

// The security of a process given a key file, an allow-list file and an
// --insecure choice (the CLI's --key / --authorized-keys / --insecure, and
// frugal.init()'s key= / authorized_keys= / insecure=) for a world reached at
// `address`: plain TCP when `insecure`, or on loopback without keys; else
// kCurve from the two files. Errors: InvalidArgument naming what to do when
// a non-loopback address has no keys, only one of the files is given,
// `insecure` comes with keys, or a file is refused (as ReadKeyPairFile and
// ReadAuthorizedKeysFile say).
Result<SecurityOptions> ResolveSecuritySettings(const std::string& key_file, const std::string& authorized_keys_file,
                                                bool insecure, const std::string& address);

// Checks that kCurve options are usable: CURVE available, keys well formed.
Status ValidateSecurity(const SecurityOptions& options);

// A short, loggable name of a public key: its first 12 Z85 characters.
std::string KeyFingerprint(const std::string& z85_public_key);

// Z85 <-> 32-byte binary key; the empty string for malformed input.
std::string KeyToZ85(const std::string& binary32);
std::string Z85ToKey(const std::string& z85);

}  // namespace frugal::comm
