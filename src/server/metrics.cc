// /metrics: the engine's counters, gauges and histograms in the Prometheus text exposition format (0.0.4).
#include <cstdio>
#include <map>
#include <string>

#include "engine/engine.h"

namespace penstock::server {
namespace {

void line(std::string* out, const std::string& name, const std::string& labels, double v) {
    char num[64];
    std::snprintf(num, sizeof(num), "%.9g", v);
    *out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + num + "\n";
}

void head(std::string* out, const std::string& name, const char* type, const char* help) {
    *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void histogram(std::string* out, const std::string& name, const char* help, const engine::Histogram& h) {
    head(out, name, "histogram", help);
    int64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
        cum += h.counts[i];
        char le[64];
        std::snprintf(le, sizeof(le), "le=\"%g\"", h.bounds[i]);
        line(out, name + "_bucket", le, static_cast<double>(cum));
    }
    line(out, name + "_bucket", "le=\"+Inf\"", static_cast<double>(h.count));
    line(out, name + "_sum", "", h.sum);
    line(out, name + "_count", "", static_cast<double>(h.count));
}

void by_label(std::string* out, const std::string& name, const char* help, const std::map<std::string, int64_t>& m) {
    head(out, name, "counter", help);
    for (const auto& [k, v] : m) line(out, name, "reason=\"" + k + "\"", static_cast<double>(v));
}

}  // namespace

std::string render_metrics(const engine::EngineMetrics& m, const std::map<std::string, int64_t>& http_rejections,
                           int64_t connections, bool ready) {
    std::string out;
    const auto gauge = [&](const char* name, const char* help, double v) {
        head(&out, name, "gauge", help);
        line(&out, name, "", v);
    };
    const auto counter = [&](const char* name, const char* help, double v) {
        head(&out, name, "counter", help);
        line(&out, name, "", v);
    };
    gauge("penstock_num_queue_reqs", "Requests waiting for admission", static_cast<double>(m.waiting));
    gauge("penstock_num_running_reqs", "Admitted requests (prefilling or decoding)", static_cast<double>(m.running));
    gauge("penstock_kv_pages_used", "KV cache pages in use", static_cast<double>(m.kv_pages_used));
    gauge("penstock_kv_pages_free", "KV cache pages free", static_cast<double>(m.kv_pages_total - m.kv_pages_used));
    gauge("penstock_kv_pages_total", "KV cache pages", static_cast<double>(m.kv_pages_total));
    gauge("penstock_open_connections", "Open HTTP connections", static_cast<double>(connections));
    gauge("penstock_ready", "1 when the server accepts requests (0 while draining)", ready ? 1 : 0);
    counter("penstock_prompt_tokens_total", "Prompt tokens of admitted requests",
            static_cast<double>(m.prompt_tokens_total));
    counter("penstock_generation_tokens_total", "Generated tokens", static_cast<double>(m.generation_tokens_total));
    counter("penstock_steps_total", "Engine forward steps", static_cast<double>(m.steps_total));
    counter("penstock_step_failures_total", "Engine steps that failed", static_cast<double>(m.step_failures_total));
    counter("penstock_idle_checks_total", "Idle invariant checks run (--idle-invariant-check)",
            static_cast<double>(m.idle_checks_total));
    counter("penstock_invariant_violations_total", "Idle invariant checks that found a broken invariant",
            static_cast<double>(m.invariant_violations_total));
    by_label(&out, "penstock_requests_finished_total", "Finished requests by finish reason", m.finished_by_reason);
    std::map<std::string, int64_t> rejected = m.rejected_by_reason;
    for (const auto& [k, v] : http_rejections) rejected[k] += v;
    by_label(&out, "penstock_requests_rejected_total", "Rejected requests by reason", rejected);
    by_label(&out, "penstock_requests_aborted_total", "Aborted requests by reason", m.aborted_by_reason);
    head(&out, "penstock_requests_aborted_by_phase_total", "counter", "Aborted requests by phase at abort time");
    for (const auto& [k, v] : m.aborted_by_phase) {
        line(&out, "penstock_requests_aborted_by_phase_total", "phase=\"" + k + "\"", static_cast<double>(v));
    }
    head(&out, "penstock_kv_transfers_total", "counter",
         "Disaggregated KV transfers by outcome (prefill: sent, send_failed; decode: received, receive_failed, "
         "record_dropped)");
    for (const auto& [k, v] : m.kv_transfers) {
        line(&out, "penstock_kv_transfers_total", "outcome=\"" + k + "\"", static_cast<double>(v));
    }
    head(&out, "penstock_disagg_rooms", "gauge", "Decode end: open rooms by state, and lazy claims (claimed)");
    for (const auto& [k, v] : m.disagg_rooms) {
        line(&out, "penstock_disagg_rooms", "state=\"" + k + "\"", static_cast<double>(v));
    }
    // Step executor (pipeline micro-batches; one slot in one process).
    const engine::ExecutorStats& x = m.executor;
    gauge("penstock_pp_micro_batch_slots", "Micro-batch slots (pp + async depth; 1 in one process)",
          static_cast<double>(x.slots));
    gauge("penstock_pp_micro_batches_in_flight", "Micro-batches submitted and not yet collected",
          static_cast<double>(x.in_flight));
    gauge("penstock_pp_max_micro_batches_in_flight", "The most micro-batches in flight at once",
          static_cast<double>(x.max_in_flight));
    counter("penstock_pp_micro_batches_total", "Micro-batches submitted", static_cast<double>(x.submitted));
    counter("penstock_pp_active_seconds_total", "Wall time with at least one micro-batch in flight", x.active_ms / 1e3);
    head(&out, "penstock_pp_stage_busy_seconds_total", "counter", "Time each pipeline stage spent running its layers");
    for (size_t s = 0; s < x.stages.size(); ++s) {
        line(&out, "penstock_pp_stage_busy_seconds_total", "stage=\"" + std::to_string(s) + "\"",
             x.stages[s].busy_ms / 1e3);
    }
    head(&out, "penstock_pp_stage_busy_fraction", "gauge",
         "Stage busy time / time with a micro-batch in flight (above 1/pp for several stages: they overlap)");
    for (size_t s = 0; s < x.stages.size(); ++s) {
        line(&out, "penstock_pp_stage_busy_fraction", "stage=\"" + std::to_string(s) + "\"",
             x.active_ms > 0 ? x.stages[s].busy_ms / x.active_ms : 0.0);
    }
    head(&out, "penstock_pp_stage_stall_seconds_total", "counter",
         "Time each pipeline stage waited for a planned micro-batch's activations from the previous one (stage 0: "
         "for the last stage's results)");
    for (size_t s = 0; s < x.stages.size(); ++s) {
        line(&out, "penstock_pp_stage_stall_seconds_total", "stage=\"" + std::to_string(s) + "\"",
             x.stages[s].stall_ms / 1e3);
    }
    head(&out, "penstock_pp_stage_steps_total", "counter", "Micro-batches each pipeline stage ran");
    for (size_t s = 0; s < x.stages.size(); ++s) {
        line(&out, "penstock_pp_stage_steps_total", "stage=\"" + std::to_string(s) + "\"",
             static_cast<double>(x.stages[s].steps));
    }
    if (!x.phase_ms.empty()) {
        head(&out, "penstock_step_phase_seconds_total", "counter",
             "Host wall time of each phase of the steps (one process): layout, layers_enqueue, head_and_wait, sample");
        for (const auto& [phase, v] : x.phase_ms) {
            line(&out, "penstock_step_phase_seconds_total", "phase=\"" + phase + "\"", v / 1e3);
        }
    }
    histogram(&out, "penstock_time_to_first_token_seconds", "Time to first token", m.ttft_s);
    histogram(&out, "penstock_e2e_request_latency_seconds", "End-to-end request latency", m.e2e_s);
    return out;
}

}  // namespace penstock::server
