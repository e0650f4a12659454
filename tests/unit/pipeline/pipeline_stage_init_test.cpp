// A gpt built while a pipeline scope is held (src/parallel/pipeline/stage_init.hpp), on thread ranks: each rank
// holds only its stage's parameters (the others hold zero elements), bit for bit those of the model one process
// builds from the same seed; the elements held are at most 1/pp of the whole plus the embeddings; the model
// refuses to run until prepared, then its pipeline's forward is one process's (pp x tp too: the other stages' shapes
// kept on meta until the plan and the cut); a prepare that cuts otherwise is
// refused, and so is a prepare without a pipeline; from_pretrained reads only the stage's tensors. ~0.2 s.
#include "accelerator/accelerator.hpp"
#include "catch_error.hpp"
#include "common/error.hpp"
#include "config/checkpoint_options.hpp"
#include "config/parallelism_config.hpp"
#include "config/pretrained_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/model.hpp"
#include "model/pretrained.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/pipeline/stage_init.hpp"
#include "parallel/pipeline/stage_model.hpp"
#include "pipeline_models.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace pp = accel::parallel::pp;

namespace {

constexpr int64_t kVocab = 37, kPositions = 8, kEmbd = 16, kLayers = 8;

std::string gpt_spec(bool tied, const std::string &extra = "")
{
    return R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_head": 4, "n_layer": 8, )"
           R"("tie_word_embeddings": )" + std::string(tied ? "true" : "false") + extra + "}";
}

// Built from seed 41 (thread ranks share the default generator: one build at a time).
std::shared_ptr<accel::Model> build(const std::string &spec)
{
    static std::mutex building;
    std::lock_guard<std::mutex> lock(building);
    at::manual_seed(41);
    auto m = accel::make_model_from_json(spec.c_str());
    m->train(false);
    return m;
}

int64_t elements(const accel::Model &m)
{
    int64_t n = 0;
    for (const auto &np : m.named_parameters()) n += np.second.numel();
    return n;
}

// The parameter names stage `s` of `p` holds when its chunks are `blocks`: their blocks, the embeddings on the
// first, the final norm and the head on the last (the tied head is wte).
std::set<std::string> stage_names(const accel::Model &whole, const std::vector<std::pair<int64_t, int64_t>> &blocks,
                                  int32_t p, int32_t s, bool tied)
{
    std::set<std::string> out;
    for (const auto &[name, t] : whole.named_parameters()) {
        bool keep = (s == 0 && name.rfind("transformer.w", 0) == 0) ||
                    (s == p - 1 && (name.rfind("transformer.ln_f.", 0) == 0 || name == "lm_head.weight" ||
                                    (tied && name == "transformer.wte.weight")));
        for (const auto &[b, e] : blocks)
            for (int64_t i = b; i < e; ++i) keep = keep || name.rfind("transformer.h." + std::to_string(i) + ".", 0) == 0;
        if (keep) out.insert(name);
    }
    return out;
}

// On `p` thread ranks under `config`: each builds `spec` inside a scope, holds exactly its stage (`expected` gives
// each rank's chunks) equal to one process's model, within 1/p of it plus the embeddings, refuses to run
// unprepared, and once prepared runs the whole model's forward.
void check_built_by_stage(int32_t p, accel::config::ParallelismConfig config, bool tied,
                          const std::function<std::vector<std::pair<int64_t, int64_t>>(int32_t)> &expected)
{
    SCOPED_TRACE("pp " + std::to_string(p) + (tied ? ", tied" : ", untied"));
    config.pp_size = p;
    const auto ref = build(gpt_spec(tied));
    at::manual_seed(43);
    const at::Tensor ids = at::randint(0, kVocab, {4, kPositions}, at::kLong);
    const at::Tensor want = ref->forward(ids);
    const int64_t whole = elements(*ref), embeddings = (kVocab + kPositions) * kEmbd;
    dist::run_on_threads(p, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t s = comm->rank();
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, 1, p), comm);
        const auto scope = pp::StageAtInit::scope(p, s, config);
        const auto m = build(gpt_spec(tied));
        const auto built = pp::StageAtInit::of(*m);
        ASSERT_NE(built, nullptr) << "rank " << s;
        EXPECT_EQ(built->chunks(), expected(s)) << "rank " << s;
        const std::set<std::string> mine = stage_names(*ref, expected(s), p, s, tied);
        ASSERT_EQ(m->named_parameters().size(), ref->named_parameters().size());
        for (size_t i = 0; i < m->named_parameters().size(); ++i) {
            const auto &[name, t] = m->named_parameters()[i];
            if (mine.count(name) != 0) {
                EXPECT_TRUE(t.equal(ref->named_parameters()[i].second)) << name << " on rank " << s;
            } else {
                EXPECT_EQ(t.numel(), 0) << name << " on rank " << s;
                EXPECT_FALSE(t.is_meta()) << name << " on rank " << s;
            }
        }
        EXPECT_LE(elements(*m), whole / p + embeddings) << "rank " << s;
        const accel::Error e = catch_error([&] { m->forward(ids); });
        EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION) << e.what();
        EXPECT_NE(std::string(e.what()).find("pipeline stage " + std::to_string(s) + " of " + std::to_string(p)),
                  std::string::npos) << e.what();
        const auto pipeline = pp::prepare_pipeline(*m, mesh, config);
        EXPECT_FALSE(m->forward_hooks);
        EXPECT_TRUE(m->forward(ids).allclose(want, 1e-5, 1e-6)) << "rank " << s;
    });
}

std::vector<std::pair<int64_t, int64_t>> even(int32_t p, int32_t s)
{
    const int64_t per = kLayers / p;
    return {{s * per, (s + 1) * per}};
}

} // namespace

TEST(PipelineStageInit, EachRankBuildsOnlyItsStageAsOneProcessDoes)
{
    accel::config::ParallelismConfig config;
    config.num_micro_batches = 2;
    for (const bool tied : {true, false}) {
        check_built_by_stage(2, config, tied, [](int32_t s) { return even(2, s); });
        check_built_by_stage(4, config, tied, [](int32_t s) { return even(4, s); });
    }
}

TEST(PipelineStageInit, SplitPointsAndInterleavingCutAsPrepareDoes)
{
    accel::config::ParallelismConfig config;
    config.num_micro_batches = 4;
    config.pp_schedule = "interleaved_1f1b";
    config.num_virtual_stages_per_pipeline_rank = 2;
    config.pp_split_points = {1, 3, 6}; // virtual stages [0, 1) [1, 3) [3, 6) [6, 8): rank 0 holds the 1st and 3rd
    check_built_by_stage(2, config, true, [](int32_t s) {
        return s == 0 ? std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {3, 6}}
                      : std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {6, 8}};
    });
}

// pp 2 x tp 2: the other stages' parameters keep their shapes on meta until prepare has applied the tensor-parallel
// plan and cut the model; then they hold zero elements and the forward gives each rank its columns of the logits.
TEST(PipelineStageInit, PipelineTimesTensorParallelKeepsShapesUntilPrepare)
{
    constexpr int32_t p = 2, tp = 2;
    accel::config::ParallelismConfig config;
    config.pp_size = p;
    config.tp_size = tp;
    config.num_micro_batches = 2;
    const auto ref = build(gpt_spec(true));
    at::manual_seed(43);
    const at::Tensor ids = at::randint(0, kVocab, {4, kPositions}, at::kLong);
    const at::Tensor want = ref->forward(ids);
    const int64_t whole = elements(*ref), embeddings = (kVocab + kPositions) * kEmbd;
    dist::run_on_threads(p * tp, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, tp, p), comm);
        const int32_t s = mesh.rank_in(dist::MeshDim::Pp), t = mesh.rank_in(dist::MeshDim::Tp);
        const auto scope = pp::StageAtInit::scope(p, s, config, true);
        const auto m = build(gpt_spec(true));
        const std::set<std::string> mine = stage_names(*ref, even(p, s), p, s, true);
        int64_t held = 0;
        for (size_t i = 0; i < m->named_parameters().size(); ++i) {
            const auto &[name, param] = m->named_parameters()[i];
            const at::Tensor &r = ref->named_parameters()[i].second;
            if (mine.count(name) != 0) {
                EXPECT_TRUE(param.equal(r)) << name << " on rank " << comm->rank();
                held += param.numel();
            } else {
                EXPECT_TRUE(param.is_meta()) << name << " on rank " << comm->rank();
                EXPECT_EQ(param.sizes(), r.sizes()) << name << " on rank " << comm->rank();
            }
        }
        EXPECT_LE(held, whole / p + embeddings) << "rank " << comm->rank();
        const auto pipeline = pp::prepare_pipeline(*m, mesh, config);
        for (const auto &[name, param] : m->named_parameters())
            if (mine.count(name) == 0) {
                EXPECT_EQ(param.numel(), 0) << name << " on rank " << comm->rank();
                EXPECT_FALSE(param.is_meta()) << name << " on rank " << comm->rank();
            }
        at::NoGradGuard no_grad;
        const at::Tensor logits = m->forward(ids);
        const int64_t columns = logits.size(-1), start = t * columns, valid = std::min<int64_t>(columns, kVocab - start);
        EXPECT_TRUE(logits.narrow(-1, 0, valid).allclose(want.narrow(-1, start, valid), 1e-5, 1e-6)) << "rank " << comm->rank();
    });
}

TEST(PipelineStageInit, PreparedWithAnotherCutIsRefused)
{
    accel::config::ParallelismConfig built_as, prepared_as;
    built_as.pp_size = prepared_as.pp_size = 2;
    built_as.pp_split_points = {2};
    prepared_as.num_micro_batches = 2;
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, 1, 2), comm);
        const auto scope = pp::StageAtInit::scope(2, comm->rank(), built_as);
        const auto m = build(gpt_spec(true));
        const accel::Error e = catch_error([&] { pp::prepare_pipeline(*m, mesh, prepared_as); });
        EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION) << e.what();
        EXPECT_NE(std::string(e.what()).find("cuts it differently"), std::string::npos) << e.what();
    });
}

TEST(PipelineStageInit, AnAcceleratorWithoutThePipelineRefusesTheStage)
{
    accel::config::ParallelismConfig config;
    config.pp_size = 2;
    const auto scope = pp::StageAtInit::scope(2, 1, config);
    const auto m = build(gpt_spec(true));
    accel::Accelerator acc(nullptr); // one process, no pipeline: nothing could fill in stage 0's parameters
    const accel::Error e = catch_error([&] { acc.prepare_model(*m); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION) << e.what();
    EXPECT_NE(std::string(e.what()).find("pipeline stage 1 of 2"), std::string::npos) << e.what();
    EXPECT_NE(pp::StageAtInit::of(*m), nullptr);
}

TEST(PipelineStageInit, BuiltWholeWhereNoStageApplies)
{
    accel::config::ParallelismConfig config;
    config.pp_size = 2;
    const int64_t whole = elements(*build(gpt_spec(true)));
    const auto scope = pp::StageAtInit::scope(2, 1, config);
    // LoRA's adapters go on the whole model (a gpt's, a llama's); 1 block cannot make 2 stages (prepare says so).
    for (const std::string &spec :
         {gpt_spec(true, R"(, "lora": {"r": 2, "target_modules": ["c_attn"]})"),
          accel_test::llama_json(2, true, R"(, "lora": {"r": 2, "target_modules": ["q_proj"]})"),
          std::string(R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_head": 4, "n_layer": 1})")}) {
        const auto m = build(spec);
        EXPECT_EQ(pp::StageAtInit::of(*m), nullptr) << spec;
        for (const auto &[name, t] : m->named_parameters()) EXPECT_GT(t.numel(), 0) << name << " of " << spec;
    }
    // Another thread holds no scope: built whole.
    std::shared_ptr<accel::Model> elsewhere;
    dist::run_on_threads(1, [&](const std::shared_ptr<dist::Communicator> &) { elsewhere = build(gpt_spec(true)); });
    EXPECT_EQ(elements(*elsewhere), whole);
}

TEST(PipelineStageInit, FromPretrainedReadsOnlyTheStage)
{
    const auto ref = build(gpt_spec(false));
    const std::string dir = (std::filesystem::temp_directory_path() / ("accel_stage_init_" + std::to_string(::getpid()))).string();
    accel::write_pretrained(*ref, dir, accel::config::SaveModelOptions{});
    accel::config::ParallelismConfig config;
    config.pp_size = 2;
    for (int32_t s = 0; s < 2; ++s) {
        const auto scope = pp::StageAtInit::scope(2, s, config);
        const accel::PretrainedModel loaded = accel::from_pretrained(dir, accel::config::FromPretrainedOptions{});
        EXPECT_NE(pp::StageAtInit::of(*loaded.model), nullptr);
        EXPECT_TRUE(loaded.report.missing.empty());
        const std::set<std::string> mine = stage_names(*ref, even(2, s), 2, s, false);
        for (size_t i = 0; i < ref->named_parameters().size(); ++i) {
            const auto &[name, t] = loaded.model->named_parameters()[i];
            if (mine.count(name) != 0) EXPECT_TRUE(t.equal(ref->named_parameters()[i].second)) << name << " on stage " << s;
            else EXPECT_EQ(t.numel(), 0) << name << " on stage " << s;
        }
    }
    std::filesystem::remove_all(dir);
}

// A llama (grouped-query attention) built by stage on `p` thread ranks (x `tp`: the other stages' shapes kept on meta
// until prepare): each rank holds what prepare's cut of the whole model keeps, bit for bit one process's, the rest
// empty (on meta with their shapes under tp); from_pretrained of its folder reads only the stage's tensors; prepared,
// its forward through the stages is one process's (each tp rank's vocabulary columns).
// `extra`: more spec keys (Qwen2's q/k/v biases, Llama's attention_bias and mlp_bias: other parameter counts per layer).
static void check_llama_by_stage(int32_t p, int32_t tp, bool tied, const std::string &extra = "")
{
    SCOPED_TRACE("llama, pp " + std::to_string(p) + " x tp " + std::to_string(tp) + (tied ? ", tied" : ", untied") + extra);
    accel::config::ParallelismConfig config;
    config.pp_size = p;
    config.tp_size = tp;
    const std::string spec = accel_test::llama_json(4, tied, extra);
    const auto ref = build(spec);
    at::manual_seed(43);
    const at::Tensor ids = at::randint(0, kVocab, {4, kPositions}, at::kLong);
    const at::Tensor want = ref->forward(ids).detach();
    const std::string dir = (std::filesystem::temp_directory_path() / ("accel_stage_init_llama_" + std::to_string(::getpid()))).string();
    accel::write_pretrained(*ref, dir, accel::config::SaveModelOptions{});
    std::vector<std::shared_ptr<accel::Model>> cut; // per stage: the whole model, cut as prepare cuts it
    for (int32_t s = 0; s < p; ++s) cut.push_back(build(spec));
    dist::run_on_threads(p * tp, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, tp, p), comm);
        const int32_t s = mesh.rank_in(dist::MeshDim::Pp), t = mesh.rank_in(dist::MeshDim::Tp);
        const auto scope = pp::StageAtInit::scope(p, s, config, tp > 1);
        const auto m = build(spec);
        const auto built = pp::StageAtInit::of(*m);
        ASSERT_NE(built, nullptr) << "rank " << comm->rank();
        if (t == 0)
            dynamic_cast<pp::PipelineStageModel &>(*cut[static_cast<size_t>(s)]).apply_pipeline_stage(built->chunks(), s == 0, s == p - 1);
        comm->barrier();
        const accel::Model &kept = *cut[static_cast<size_t>(s)];
        if (tp == 1) { // from_pretrained: the stage's tensors only
            const accel::PretrainedModel loaded = accel::from_pretrained(dir, accel::config::FromPretrainedOptions{});
            EXPECT_TRUE(loaded.report.missing.empty()) << "rank " << comm->rank();
            for (size_t i = 0; i < kept.named_parameters().size(); ++i) {
                const at::Tensor &l = loaded.model->named_parameters()[i].second, &r = ref->named_parameters()[i].second;
                if (kept.named_parameters()[i].second.numel() > 0) EXPECT_TRUE(l.equal(r)) << i << " read on rank " << s;
                else EXPECT_EQ(l.numel(), 0) << i << " read on rank " << s;
            }
        }
        int64_t held = 0;
        for (size_t i = 0; i < m->named_parameters().size(); ++i) {
            const auto &[name, param] = m->named_parameters()[i];
            const at::Tensor &r = ref->named_parameters()[i].second;
            if (kept.named_parameters()[i].second.numel() > 0) {
                EXPECT_TRUE(param.equal(r)) << name << " on rank " << comm->rank();
                ++held;
            } else if (tp > 1) {
                EXPECT_TRUE(param.is_meta() && param.sizes() == r.sizes()) << name << " on rank " << comm->rank();
            } else {
                EXPECT_EQ(param.numel(), 0) << name << " on rank " << comm->rank();
            }
        }
        EXPECT_GT(held, 0);
        EXPECT_LT(held, static_cast<int64_t>(m->named_parameters().size()));
        EXPECT_EQ(catch_error([&] { m->forward(ids); }).code(), ACCEL_ERR_FAILED_PRECONDITION);
        const auto pipeline = pp::prepare_pipeline(*m, mesh, config);
        at::NoGradGuard no_grad;
        const at::Tensor logits = m->forward(ids);
        const int64_t columns = logits.size(-1), start = t * columns, valid = std::min<int64_t>(columns, kVocab - start);
        EXPECT_TRUE(logits.narrow(-1, 0, valid).allclose(want.narrow(-1, start, valid), 1e-5, 1e-6)) << "rank " << comm->rank();
    });
    std::filesystem::remove_all(dir);
}

TEST(PipelineStageInit, LlamaBuildsOnlyItsStage)
{
    check_llama_by_stage(2, 1, true);
    check_llama_by_stage(4, 1, false);
    check_llama_by_stage(2, 2, true);
    check_llama_by_stage(2, 1, false, R"(, "model_type": "qwen2")");
    check_llama_by_stage(2, 1, true, R"(, "attention_bias": true, "mlp_bias": true)");
}
