// Addresses of a multi-host run: which of this host's addresses a peer can
// reach (the one that routes to the coordinator), whether an address is
// loopback, and the listen ports a firewall opens (a port range).
//
// Every function is thread-safe and keeps no state. None sends a packet:
// the route is asked of the kernel (a UDP socket connected, never written).
// A host name is resolved by the system resolver (its own timeouts, from
// resolv.conf); numeric addresses are not looked up.
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::comm {

// The host of a "tcp://HOST:PORT" endpoint, without IPv6 brackets; an
// empty string when `endpoint` has no such form.
std::string EndpointHost(const std::string& endpoint);

// Whether `host` names this host's loopback (127.0.0.0/8, ::1, or a name
// that resolves only to those). A name that does not resolve is not loopback.
bool IsLoopbackHost(const std::string& host);

// The name of this host's network interface that holds the numeric
// address `address` ("eth0"); empty when none does.
std::string InterfaceOfAddress(const std::string& address);

// Whether `host` is a wildcard bind address (0.0.0.0, *, ::).
bool IsWildcardHost(const std::string& host);

// The source address the kernel picks for packets to `endpoint`'s host
// (tcp://HOST:PORT): this host's address on the route to it, numeric.
// Errors: InvalidArgument (not tcp://HOST:PORT), Unavailable (the host does
// not resolve, or no route to it).
Result<std::string> RouteSourceAddress(const std::string& endpoint);

// The endpoint peers are told to connect to, for a listener bound at
// `bound` (tcp://HOST:PORT) in a world whose rendezvous is at `rendezvous`:
// - `advertise_host` given: `bound` with its host replaced by it;
// - else a wildcard `bound` (tcp://0.0.0.0:PORT): its host replaced by
//   RouteSourceAddress(rendezvous), the address peers reach us at if they
//   can reach the rendezvous;
// - else `bound` as it is.
// A loopback result for a rendezvous that is not on loopback is refused
// (InvalidArgument naming both and what to give instead): peers on other
// hosts could not connect to it.
Result<std::string> AdvertisedEndpoint(const std::string& bound, const std::string& advertise_host,
                                       const std::string& rendezvous);

// An inclusive range of TCP ports, e.g. 29600-29607.
struct PortRange {
  int first = 0;
  int last = 0;
  int size() const { return last - first + 1; }
};

// Parses "A-B" (1 <= A <= B <= 65535). Errors: InvalidArgument naming
// `text` and the expected form.
Result<PortRange> ParsePortRange(const std::string& text);

// The first `count` ports of `range` that a TCP listener can bind on `host`
// now (a numeric address, or a wildcard), in ascending order. The ports are
// released again: a process started afterwards binds them (another process
// could take one in between; its bind then fails with the port named).
// Errors: InvalidArgument when the range holds fewer than `count` ports or
// fewer are free (naming the ports in use), `host` not numeric.
Result<std::vector<int>> FreePortsInRange(const std::string& host, PortRange range, int count);

// A TCP port free on `host` now (the kernel's choice of an ephemeral
// port), released again, as FreePortsInRange's. Errors: InvalidArgument
// (`host` not numeric), IOError.
Result<int> FreeTcpPort(const std::string& host);

}  // namespace frugal::comm
