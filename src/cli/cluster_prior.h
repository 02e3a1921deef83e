// What `frugal cluster submit` and `serve` know about a job's speed from its
// configuration: the profile that groups jobs of the same speed
// (JobSubmission::profile), and the planner's throughput prior
// (cluster::SpeedPrior; Note [Live throughput prior] in
// src/cluster/live_speed.h).
#pragma once

#include <string>

#include <toml.hpp>

#include "frugal/cluster/speed_prior.h"
#ifdef FRUGAL_HAVE_SIM
#include "frugal/sim/hardware.h"
#endif

namespace frugal::cli {

// "<model>-<16 hex digits>": a 64-bit FNV-1a digest of the configuration's
// keys and values (sorted; nested tables flattened as a.b) without the keys
// that do not change how fast a step runs (the run's length, logging,
// checkpoints, learning rates and other optimizer hyperparameters, seeds,
// keys and time-outs: the fields marked SpeedNeutral,
// engine::SpeedNeutralKeys). Jobs that differ only in those share a profile. A key spelled out at its default
// and the same key left out give different profiles.
std::string ProfileOfConfig(const toml::table& config);

#if defined(FRUGAL_HAVE_SIM) && defined(FRUGAL_WITH_TORCH)
// The prior of a `frugal train` configuration: sim::PredictFrugalIteration
// of its model, batch (global_batch split over the workers, or batch_size
// per worker), density, wire format, sync mode and CPU threads, with n
// workers on one host of `hardware` (shared_cpu when the hardware is a
// CPU). nullptr for a command job, a configuration it cannot parse or a
// model the planner does not know (a custom Python model, gpt-tiny). `elastic`: the jobs run
// as elastic workers (`--sync auto` then resolves as frugal train does).
cluster::SpeedPriorFactory PlannerSpeedPrior(const sim::HardwareSpec& hardware, bool elastic);
#endif

}  // namespace frugal::cli
