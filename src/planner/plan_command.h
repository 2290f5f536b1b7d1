// `penstock plan`: the planner's command line and its report (tables on stdout, optionally JSON).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "planner/planner.h"

namespace penstock::planner {

struct PlanArgs {
    std::string model;               // config.json, or a model directory holding one
    std::string cluster = "h200x8";  // a built-in profile or a TOML file
    Workload workload;
    int64_t num_layers = 0;  // > 0: the model's first N layers (as `serve --num-layers`)
    int gpus = 0;  // 0: the whole cluster
    int max_cp = 1;
    std::string ep = "auto";           // "auto" (= tp for MoE models) or a number that divides tp
    std::vector<std::string> layouts;  // explicit "pp,tp[,cp]" entries instead of the enumeration
    int64_t long_context = 0;          // > 0: also the long-context table for one prompt of this many tokens
    int top = 0;                       // > 0: print only the best N layouts
    std::string json;                  // write the predictions here too
    std::vector<std::string> calibrate;  // "CONFIG=BENCH.json": derive the cluster's class rates from these results
    std::vector<std::string> check;      // "CONFIG=BENCH.json": results the calibrated model predicts (held out)
};

void add_plan_options(CLI::App* cmd, PlanArgs* a);

// Runs the planner and writes the report to `out`; errors (bad model, cluster, layout) are returned.
[[nodiscard]] Status run_plan(const PlanArgs& a, std::ostream& out);

}  // namespace penstock::planner
