// `frugal keys generate`: CurveZMQ key pairs for multi-host runs
// (docs/design/security.md), and the --key / --authorized-keys / --insecure
// resolution shared by the commands that open network ports.
#include <cstdio>

#include "commands.h"
#include "frugal/comm/transport/security.h"

namespace frugal::cli {

comm::SecurityOptions ResolveSecurity(const std::string& key_file, const std::string& authorized_keys_file,
                                      bool insecure, const std::string& address) {
  auto security = comm::ResolveSecuritySettings(key_file, authorized_keys_file, insecure, address);
  if (!security.ok()) throw UsageError(security.status().message());
  return *security;
}

void AddKeysCommand(CLI::App& app) {
  CLI::App* keys = app.add_subcommand("keys", "CurveZMQ keys for multi-host runs (docs/design/security.md)");
  keys->require_subcommand(1);
  auto out = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  CLI::App* gen = keys->add_subcommand(
      "generate", "Write a key pair to FILE (mode 0600) and its public key to FILE.pub (for authorized_keys)");
  gen->add_option("--out", *out, "Secret key file to create")->required();
  gen->add_option("--name", *name, "Name written after the public key in FILE.pub (default: FILE)");
  gen->callback([out, name] {
    auto keys = comm::GenerateCurveKeyPair();
    ThrowIfError(keys.status());
    Status written = comm::WriteKeyPairFiles(*out, *keys, name->empty() ? *out : *name);
    if (!written.ok()) throw UsageError(written.message());
    std::printf("wrote %s (secret, mode 0600) and %s.pub\npublic key %s\n", out->c_str(), out->c_str(),
                keys->public_key.c_str());
  });
}

}  // namespace frugal::cli
