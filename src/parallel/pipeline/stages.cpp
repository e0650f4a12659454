#include "parallel/pipeline/stages.hpp"

#include "common/error.hpp"
#include "config/parallelism_config.hpp"

#include <limits>
#include <string>

namespace accel::parallel::pp {

std::vector<int64_t> balanced_stage_starts(const std::vector<int64_t> &costs, int32_t stages)
{
    const auto n = static_cast<int64_t>(costs.size());
    if (stages < 1 || n < stages)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config.pp_size: " + std::to_string(stages) + " stages need at least as "
                                         "many layers, the model has " + std::to_string(n));
    std::vector<int64_t> prefix(static_cast<size_t>(n) + 1, 0);
    for (int64_t i = 0; i < n; ++i) prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + costs[static_cast<size_t>(i)];
    // best[k][i]: the smallest largest-stage cost of the first i layers in k stages; cut[k][i] where the last
    // of those k stages starts. Layers number in the hundreds at most: O(stages n^2) is nothing.
    const int64_t inf = std::numeric_limits<int64_t>::max();
    const auto N = static_cast<size_t>(n) + 1;
    std::vector<std::vector<int64_t>> best(static_cast<size_t>(stages) + 1, std::vector<int64_t>(N, inf));
    std::vector<std::vector<int64_t>> cut(static_cast<size_t>(stages) + 1, std::vector<int64_t>(N, 0));
    best[0][0] = 0;
    for (size_t k = 1; k <= static_cast<size_t>(stages); ++k)
        for (int64_t i = static_cast<int64_t>(k); i <= n; ++i)
            for (int64_t j = i - 1; j >= static_cast<int64_t>(k) - 1; --j) { // latest start first: ties keep it
                const int64_t before = best[k - 1][static_cast<size_t>(j)];
                if (before == inf) continue;
                const int64_t worst = std::max(before, prefix[static_cast<size_t>(i)] - prefix[static_cast<size_t>(j)]);
                if (worst < best[k][static_cast<size_t>(i)]) {
                    best[k][static_cast<size_t>(i)] = worst;
                    cut[k][static_cast<size_t>(i)] = j;
                }
            }
    std::vector<int64_t> starts(static_cast<size_t>(stages));
    int64_t end = n;
    for (size_t k = static_cast<size_t>(stages); k >= 1; --k) {
        starts[k - 1] = cut[k][static_cast<size_t>(end)];
        end = starts[k - 1];
    }
    return starts;
}

std::vector<int64_t> stage_starts_from_split_points(const std::vector<int64_t> &points, int64_t num_layers, int32_t stages)
{
    const std::string key = "parallelism_config.pp_split_points";
    if (points.size() + 1 != static_cast<size_t>(stages))
        fail(ACCEL_ERR_INVALID_ARGUMENT, key + ": " + std::to_string(points.size()) + " points for " + std::to_string(stages) +
                                             " stages; give one block index fewer than the stages (pp_size, times the "
                                             "chunks per stage under interleaving)");
    std::vector<int64_t> starts{0};
    for (int64_t p : points) {
        if (p <= starts.back() || p >= num_layers)
            fail(ACCEL_ERR_INVALID_ARGUMENT, key + ": " + std::to_string(p) + " must be above the previous point (" +
                                                 std::to_string(starts.back()) + ") and below the model's " +
                                                 std::to_string(num_layers) + " blocks (every stage holds one at least)");
        starts.push_back(p);
    }
    return starts;
}

int32_t chunks_per_stage(int64_t layers_per_virtual_stage, int32_t virtual_stages_per_rank, int64_t num_layers, int32_t stages)
{
    const std::string lpv = "parallelism_config.num_layers_per_virtual_pipeline_stage";
    const std::string vpr = "parallelism_config.num_virtual_stages_per_pipeline_rank";
    if (layers_per_virtual_stage <= 0 && virtual_stages_per_rank <= 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config.pp_schedule: \"interleaved_1f1b\" needs the model chunks per "
                                         "stage: set " + lpv + " or " + vpr);
    int64_t chunks = virtual_stages_per_rank;
    if (layers_per_virtual_stage > 0) {
        if (num_layers % (layers_per_virtual_stage * stages) != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, lpv + ": the model's " + std::to_string(num_layers) + " blocks do not divide "
                                             "into pp_size (" + std::to_string(stages) + ") x " +
                                             std::to_string(layers_per_virtual_stage) + " blocks per chunk");
        chunks = num_layers / (layers_per_virtual_stage * stages);
        if (virtual_stages_per_rank > 0 && virtual_stages_per_rank != chunks)
            fail(ACCEL_ERR_INVALID_ARGUMENT, vpr + " (" + std::to_string(virtual_stages_per_rank) + ") disagrees with " + lpv +
                                             " (" + std::to_string(layers_per_virtual_stage) + " blocks per chunk of " +
                                             std::to_string(num_layers) + " make " + std::to_string(chunks) + ")");
    }
    if (chunks * stages > num_layers)
        fail(ACCEL_ERR_INVALID_ARGUMENT, vpr + ": " + std::to_string(chunks) + " chunks on each of " + std::to_string(stages) +
                                         " stages need at least as many blocks, the model has " + std::to_string(num_layers));
    return static_cast<int32_t>(chunks);
}

std::vector<std::pair<int64_t, int64_t>> stage_chunks(const std::vector<int64_t> &costs,
                                                      const config::ParallelismConfig &config, int32_t p, int32_t s)
{
    const auto n = static_cast<int64_t>(costs.size());
    const int32_t chunks = config.pp_schedule == "interleaved_1f1b"
                               ? chunks_per_stage(config.num_layers_per_virtual_pipeline_stage,
                                                  config.num_virtual_stages_per_pipeline_rank, n, p)
                               : 1;
    const int32_t virtual_stages = p * chunks;
    const std::vector<int64_t> starts = config.pp_split_points.empty()
                                            ? balanced_stage_starts(costs, virtual_stages)
                                            : stage_starts_from_split_points(config.pp_split_points, n, virtual_stages);
    std::vector<std::pair<int64_t, int64_t>> blocks;
    for (int32_t c = 0; c < chunks; ++c) {
        const auto vs = static_cast<size_t>(c * p + s);
        blocks.emplace_back(starts[vs], vs + 1 < starts.size() ? starts[vs + 1] : n);
    }
    return blocks;
}

} // namespace accel::parallel::pp
