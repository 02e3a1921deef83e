// PipelineWindow: the synchronisation's part of a metrics window, the fields
// of a metrics.jsonl window record after the reporter's own
// (train::WindowRecord): the CLI's Worker and frugal.DistributedModel write
// the same, from this one field list, and the progress line's traffic and
// density come from the same values. Torch-free.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "frugal/comm/transport/transport.h"
#include "frugal/common/stat_list.h"
#include "frugal/engine/gradient_pipeline.h"

namespace frugal::engine {

struct PipelineWindow {
  double wait_s = 0;
  double sparsify_s = 0;
  double exchange_s = 0;
  double optimizer_s = 0;
  double bytes_sent_intra = 0;
  double bytes_sent_inter = 0;
  double bytes_received_intra = 0;
  double bytes_received_inter = 0;
  double density = 0;
  double merged_density = 0;
  double deferral_steps = 0;
  double sent_share_l2 = 0;
  double iter_s = 0;
  double compute_s = 0;
  int staleness = 0;
  int workers = 0;

  // Megabits per second sent over both link classes in the window.
  double sent_mbit_per_s() const { return (bytes_sent_intra + bytes_sent_inter) * 8 / iter_s / 1e6; }

  // The one list of a window's synchronisation fields (common/stat_list.h):
  // the record's keys, Python's schema and the metrics table of
  // docs/guide/python.md.
  template <class V>
  static void VisitStats(V&& visit) {
    using W = PipelineWindow;
    // In the local mode the four seconds are its rounds', per step.
    visit(Stat("wait_s", "s", "compute thread blocked on the synchronisation, per step").Mean(), &W::wait_s);
    visit(Stat("sparsify_s", "s", "error feedback, selection and encode, per step").Mean(), &W::sparsify_s);
    visit(Stat("exchange_s", "s", "the exchange, per step").Mean(), &W::exchange_s);
    visit(Stat("optimizer_s", "s", "decode, merge, scale and the sparse optimizer step, per step").Mean(),
          &W::optimizer_s);
    visit(Stat("bytes_sent_intra", "bytes", "bytes sent per step inside a cluster").Mean(), &W::bytes_sent_intra);
    visit(Stat("bytes_sent_inter", "bytes", "bytes sent per step between clusters").Mean(), &W::bytes_sent_inter);
    visit(Stat("bytes_received_intra", "bytes", "bytes received per step inside a cluster").Mean(),
          &W::bytes_received_intra);
    visit(Stat("bytes_received_inter", "bytes", "bytes received per step between clusters").Mean(),
          &W::bytes_received_inter);
    visit(Stat("density", "", "share of the coordinates this worker sent").Mean(), &W::density);
    visit(Stat("merged_density", "", "share of the coordinates of the merged updates").Mean(), &W::merged_density);
    visit(Stat("deferral_steps", "steps", "mean delay of gradient mass in the residual (0: nothing sent)").Mean(),
          &W::deferral_steps);
    visit(Stat("sent_share_l2", "", "share of the squared L2 norm sent").Mean(), &W::sent_share_l2);
    visit(Stat("iter_s", "s", "window time per step").Mean(), &W::iter_s);
    visit(Stat("compute_s", "s", "forward and backward per step").Mean(), &W::compute_s);
    visit(Stat("staleness", "steps", "updates applied this many steps late (0 or 1)").Last(), &W::staleness);
    visit(Stat("workers", "", "the world's size").Last(), &W::workers);
  }
};

// The window between two readings of the cumulative counters: `now`/`before`
// the synchronisation's at the window's end and start, `traffic` /
// `traffic_before` the transport's; `steps` > 0 iterations in `span_s` > 0
// seconds with `compute_s` seconds of compute per step. staleness and
// workers are left to the caller.
PipelineWindow MeasureWindow(const PipelineStats& now, const PipelineStats& before,
                             const comm::TransportStats& traffic, const comm::TransportStats& traffic_before,
                             double steps, double span_s, double compute_s);

// The window's fields as the record's JSON.
nlohmann::json WindowJson(const PipelineWindow& w);

// The progress line's synchronisation part: "6.1 Mbit/s sent  " + `mode`
// (the strategy's own, e.g. DensityText or "syncs 9").
std::string ProgressText(const PipelineWindow& w, const std::string& mode);
// "density 3%": the step mode's part of the progress line.
std::string DensityText(double density);

}  // namespace frugal::engine
