// The pipeline schedules' own bubble, apart from this machine's CPU contention (issue 36's goal: within 10 % of
// (p-1)/(m+p-1) for GPipe and 1F1B, smaller interleaved). pp_step.sh trains a real GPT: each stage's compute holds
// one of the 2 cores, so every transfer's CPU work (Gloo's copies and syscalls) waits for a core and shows up as
// bubble. Here each block's forward and backward are a fixed sleep instead (a stand-in for compute that runs on a
// device, as on a GPU, leaving the CPU to the transfers), while everything else is the real thing: the processes
// (accel launch), Gloo, PipelineParallel::run with its schedules, asynchronous sends and early receives, and
// activations of the real bench's size ([B/m, T, hidden] float32) crossing every boundary.
// Prints per stage the measured bubble (PipelineParallel's own measure: the schedule's wall time minus its
// forwards and backwards) against the theory, and the ratio.
// Usage: accel launch -n P bench_pp_bubble SCHEDULE M [BLOCKS] [FORWARD_MS] [T] [B] [HIDDEN] [STEPS] [CHUNKS]
//   SCHEDULE gpipe | 1f1b | interleaved_1f1b (CHUNKS model chunks per stage, default 2); a block's backward
//   sleeps twice its forward.
#include "config/accelerator_config.hpp"
#include "config/parallelism_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "model/model.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace {

using accel::parallel::pp::PipelineStageModel;

void sleep_ms(double ms) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); }

// Passes its input on; its backward sleeps `ms` first (the block's backward compute).
struct SleepInBackward : torch::autograd::Function<SleepInBackward> {
    static at::Tensor forward(torch::autograd::AutogradContext *ctx, const at::Tensor &x, double ms)
    {
        ctx->saved_data["ms"] = ms;
        return x.clone();
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx, torch::autograd::variable_list grads)
    {
        sleep_ms(ctx->saved_data["ms"].toDouble());
        return {grads[0], at::Tensor()};
    }
};

// `blocks` blocks of one scalar weight each; a block's forward sleeps `forward_ms` and scales by its weight.
class SleepModel final : public accel::Model, public PipelineStageModel {
public:
    SleepModel(int64_t blocks, int64_t hidden, double forward_ms) : hidden_(hidden), forward_ms_(forward_ms)
    {
        accel::NamedTensors params;
        for (int64_t i = 0; i < blocks; ++i) params.emplace_back(std::to_string(i) + ".w", at::ones({1}).requires_grad_(true));
        set_tensors(std::move(params), {});
        block_end_ = static_cast<size_t>(blocks);
    }
    at::Tensor forward(const at::Tensor &input) override { return through_pipeline(input, nullptr, "forward"); }
    void train(bool) override {}
    bool is_training() const override { return true; }

    accel::Model &stage_model() override { return *this; }
    Shape pipeline_shape() const override
    {
        Shape s;
        s.type = "sleep";
        s.hidden_size = hidden_;
        s.vocab_size = hidden_;
        return s;
    }
    std::vector<int64_t> block_costs() const override { return costs_by_name(*this, "", named_parameters().size()); }
    at::Tensor tied_embedding() const override { return {}; }
    void apply_pipeline_stage(const std::vector<std::pair<int64_t, int64_t>> &chunks, bool first, bool last) override
    {
        const auto &params = named_parameters();
        cut_stage(*this, "sleep", chunks, first, last, params.size(),
                  [&params](size_t i) { return std::vector<at::Tensor>{params[i].second}; }, {}, {});
    }
    at::Tensor forward_stage(const at::Tensor &input, accel::KvCache *) override
    {
        // Token ids [rows, T] become hidden states [rows, T, hidden] on the first stage's first chunk.
        at::Tensor x = stage_first_ ? at::ones({input.size(0), input.size(1), hidden_}) : input;
        for (size_t i = block_begin_; i < block_end_; ++i) {
            sleep_ms(forward_ms_);
            x = SleepInBackward::apply(x * named_parameters()[i].second, 2.0 * forward_ms_);
        }
        return x;
    }
    void mark_logits(const at::Tensor &) const override {}
    bool sequence_parallel() const override { return false; }
    const std::shared_ptr<accel::distributed::Communicator> &tensor_parallel_group() const override { return no_group_; }
    const std::map<std::string, accel::parallel::tp::ParameterSlicing> &tensor_parallel_slicing() const override
    {
        return no_slicing_;
    }

private:
    int64_t hidden_;
    double forward_ms_;
    std::shared_ptr<accel::distributed::Communicator> no_group_;
    std::map<std::string, accel::parallel::tp::ParameterSlicing> no_slicing_;
};

double theory(const std::string &schedule, int32_t p, int64_t m, int64_t chunks)
{
    const double v = schedule == "interleaved_1f1b" ? static_cast<double>(chunks) : 1.0;
    return (p - 1.0) / (v * static_cast<double>(m) + p - 1.0);
}

int run(int argc, char **argv)
{
    if (argc < 3) {
        std::fprintf(stderr, "usage: accel launch -n P %s SCHEDULE M [BLOCKS] [FORWARD_MS] [T] [B] [HIDDEN] [STEPS] [CHUNKS]\n", argv[0]);
        return 2;
    }
    auto arg = [&](int i, double fallback) { return argc > i ? std::atof(argv[i]) : fallback; };
    const std::string schedule = argv[1];
    const auto m = static_cast<int32_t>(arg(2, 8));
    const auto blocks = static_cast<int64_t>(arg(3, 8));
    const double forward_ms = arg(4, 2.0);
    const auto T = static_cast<int64_t>(arg(5, 256)), B = static_cast<int64_t>(arg(6, 16)), hidden = static_cast<int64_t>(arg(7, 256));
    const auto steps = static_cast<int>(arg(8, 5));
    const auto chunks = static_cast<int64_t>(arg(9, 2));

    accel::config::AcceleratorConfig config = accel::config::parse_accelerator_config(R"({"cpu": true})");
    std::shared_ptr<accel::distributed::Communicator> world = accel::distributed::process_communicator(config);
    const int32_t p = world->size();
    accel::config::ParallelismConfig &pc = config.parallelism;
    pc.pp_size = p;
    pc.num_micro_batches = m;
    pc.pp_schedule = schedule;
    if (schedule == "interleaved_1f1b") pc.num_layers_per_virtual_pipeline_stage = blocks / (p * chunks);
    accel::distributed::DeviceMesh mesh(accel::distributed::mesh_shape(1, 1, 1, 1, p), world);
    SleepModel model(blocks, hidden, forward_ms);
    std::shared_ptr<accel::parallel::pp::PipelineParallel> pipeline = accel::parallel::pp::prepare_pipeline(model, mesh, pc);

    const at::Tensor ids = at::zeros({B, T}, at::kLong);
    auto loss = [](const at::Tensor &y, const at::Tensor &) { return y.mean(); };
    auto scale = [](const at::Tensor &l) { return l; };
    std::vector<double> bubbles;
    double busy = 0.0;
    for (int step = 0; step <= steps; ++step) { // step 0 warms up (the first receives learn their sizes)
        pipeline->run(ids, ids, loss, scale);
        if (step == 0) continue;
        bubbles.push_back(pipeline->last_times().bubble_fraction());
        busy += pipeline->last_times().busy;
    }
    std::sort(bubbles.begin(), bubbles.end());
    const double median = bubbles[bubbles.size() / 2], expected = theory(schedule, p, m, pipeline->chunks());
    std::printf("stage %d of %d %s m %d chunks %d: bubble median %.4f (min %.4f max %.4f) theory %.4f ratio %.3f busy/step %.1f ms\n",
                pipeline->stage(), p, schedule.c_str(), m, pipeline->chunks(), median, bubbles.front(), bubbles.back(), expected,
                median / expected, 1e3 * busy / steps);
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    try {
        return run(argc, argv);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "pp_bubble: %s\n", e.what());
        return 1;
    }
}
