// save_state's DeepSpeed layout under pp x ZeRO (accelerator/deepspeed_save.hpp): pp 2 x dp 2 thread ranks train a
// llama two steps, each writes its files of the folder, which then holds the whole model's partitions as a ZeRO
// run without a pipeline writes them: the trained weights and optimizer state, bit for bit (and one process's after
// the same steps within 1e-5). The folder loads onto the same mesh (training resumed equals the uninterrupted run)
// and onto one process without a pipeline; also with 2 replicas of each stage's shard (HSDP: the first writes); a
// folder written by a ZeRO run without a pipeline (dp 2) loads onto the pipeline alike. ~0.2 s in all.
#include "accelerator/deepspeed_save.hpp"
#include "catch_error.hpp"
#include "checkpointing/checkpointing.hpp"
#include "checkpointing/deepspeed_folder.hpp"
#include "checkpointing/torch_archive.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "config/accelerator_config.hpp"
#include "config/optimizer_config.hpp"
#include "config/parallelism_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "fresh_dir.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "parallel/fsdp/sharded_data_parallel.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "pipeline_models.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace pp = accel::parallel::pp;

namespace {

constexpr int kSteps = 4, kSaved = 2; // trained kSaved steps, saved, then kSteps in all
constexpr int32_t kStages = 2, kDp = 2;

using Named = std::map<std::string, at::Tensor>;

struct Rank {
    std::shared_ptr<accel::Model> model;
    std::shared_ptr<pp::PipelineParallel> pipeline;           // null without a pipeline
    std::shared_ptr<accel::parallel::ShardedDataParallel> own; // the engine without a pipeline
    std::shared_ptr<accel::AcceleratedOptimizer> opt;
    accel::parallel::ShardedDataParallel *engine = nullptr;
};

std::shared_ptr<accel::Model> fresh_model(const std::string &json)
{
    // Every rank and the reference start from one process's weights: the global generator is seeded and drawn
    // from by one thread at a time.
    static std::mutex generator;
    const std::lock_guard<std::mutex> lock(generator);
    at::manual_seed(41);
    auto m = accel::make_model_from_json(json.c_str());
    m->train(false);
    return m;
}

std::shared_ptr<accel::AcceleratedOptimizer> adamw(const std::shared_ptr<accel::Model> &m)
{
    return std::make_shared<accel::AcceleratedOptimizer>(
        m, accel::config::parse_optimizer_config(R"({"type": "adamw", "lr": 0.003, "weight_decay": 0.01, "eps": 1e-6})"));
}

// A stage (stages > 1) or a whole model under ZeRO over the mesh's dp group, its optimizer stepping the engine's
// shards as the accelerator's does (prepare_optimizer).
Rank prepared(const std::string &json, const dist::DeviceMesh &mesh, const accel::config::ShardingConfig &sharding, int32_t stages)
{
    Rank r;
    r.model = fresh_model(json);
    if (stages > 1) {
        accel::config::ParallelismConfig config;
        config.pp_size = stages;
        config.num_micro_batches = 2;
        r.pipeline = pp::prepare_pipeline(*r.model, mesh, config, nullptr, &sharding);
        r.engine = r.pipeline->sharded();
    } else {
        r.own = std::make_shared<accel::parallel::ShardedDataParallel>(*r.model, mesh, sharding);
        r.engine = r.own.get();
    }
    r.opt = adamw(r.model);
    auto *e = r.engine;
    r.opt->shard_over(e->optimizer_params(), e->layout(), [e] { e->after_optimizer_step(); }, [e] { e->zero_grad(); }, nullptr);
    return r;
}

void train(Rank &r, const dist::DeviceMesh &mesh, const at::Tensor &ids, const at::Tensor &labels, int from, int to)
{
    const accel::Loss causal(accel::LossKind::CausalLm);
    const int64_t rows = ids.size(1) / kDp, first = mesh.rank_in(dist::MeshDim::Dp) * rows; // this rank's share
    for (int s = from; s < to; ++s) {
        const at::Tensor x = ids[s].narrow(0, first, rows), y = labels[s].narrow(0, first, rows);
        if (r.pipeline) {
            r.pipeline->run(x, y, [&](const at::Tensor &out, const at::Tensor &l) { return accel::compute_loss(causal, out, l); },
                            [](const at::Tensor &l) { return l; });
        } else {
            accel::compute_loss(causal, r.model->forward(x), y).backward();
            r.engine->finish_backward();
        }
        r.opt->step();
        r.opt->zero_grad();
    }
}

// The parameters this rank holds, whole (the engine gathers them for the copy).
Named held_weights(Rank &r)
{
    Named out;
    r.engine->summon_full_params(true);
    for (const auto &[name, t] : r.model->named_parameters())
        if (t.numel() > 0) out.emplace(name, t.detach().clone());
    r.engine->summon_full_params(false);
    return out;
}

// This rank's files of the folder (its tag folder `dir`).
void save(Rank &r, const dist::DeviceMesh &mesh, const std::string &dir)
{
    accel::DeepSpeedSave how;
    how.dp = mesh.group(dist::MeshDim::DpShardCp).get();
    how.pipeline = r.pipeline.get();
    how.writes = mesh.rank_in(dist::MeshDim::DpReplicate) == 0; // HSDP: the first replica writes
    how.main = how.dp->rank() == 0;
    for (const auto &[name, object] : accel::deepspeed_rank_files(*r.model, *r.engine, *r.opt, how))
        accel::ckpt::save_torch_file(accel::join(dir, name), *object);
}

// load_state's reading of the folder onto a stage (checkpoint.cpp's stage_source): the other stages' tensors read as
// empty, as the stage holds them.
accel::ShardedSource stage_source(const accel::Model &model, const accel::ShardedSource &src)
{
    accel::ShardedSource out = src;
    out.find = [&model, find = src.find](const std::string &name, std::vector<int64_t> &shape) {
        if (!find(name, shape)) return false;
        if (const at::Tensor *mine = model.find_tensor(name); mine != nullptr && mine->numel() == 0) shape = {0};
        return true;
    };
    return out;
}

void copy_into(const at::Tensor &d, const at::Tensor &s)
{
    at::NoGradGuard no_grad;
    d.copy_(s);
}

void load(Rank &r, const std::string &dir)
{
    const accel::ckpt::DsFolder ds = accel::ckpt::read_deepspeed_folder(dir);
    r.engine->load_sharded_state_dict(*r.model, r.pipeline ? stage_source(*r.model, ds.model) : ds.model).first();
    r.opt->load_sharded_state_dict(*ds.optimizer_rest, ds.optimizer, dir, copy_into)();
}

// A state dict with its tensors copied: the sharded optimizer's may be views of the state it goes on stepping (its
// only shard's, under HSDP with one shard per replica).
accel::PyRef copied(const accel::PyRef &sd)
{
    auto out = std::make_shared<accel::PyObj>(*sd);
    for (auto &[key, value] : out->map) {
        if (key->kind != accel::PyObj::Kind::Str || key->s != "state") continue;
        auto state = std::make_shared<accel::PyObj>(*value);
        for (auto &entry : state->map) {
            auto e = std::make_shared<accel::PyObj>(*entry.second);
            for (auto &kv : e->map)
                if (kv.second->kind == accel::PyObj::Kind::Tensor) kv.second = accel::py_tensor(kv.second->tensor.clone());
            entry.second = e;
        }
        value = state;
    }
    return out;
}

void expect_close(const Named &got, const Named &want, double tol, const std::string &what)
{
    for (const auto &[name, t] : got) {
        const at::Tensor &w = want.at(name);
        EXPECT_LE((t - w).abs().max().item<double>(), tol * std::max(1.0, w.abs().max().item<double>())) << name << ": " << what;
    }
}

// The folder's optimizer state (one process's per-parameter form) against each stage's own after the same steps.
void expect_state_equal(const accel::PyObj &folder, const std::vector<accel::PyRef> &stage_states)
{
    int64_t compared = 0;
    for (const auto &sd : stage_states)
        for (const auto &[id, entry] : sd->get("state")->map)
            for (const auto &[key, value] : entry->map) {
                if (value->kind != accel::PyObj::Kind::Tensor || value->tensor.dim() == 0) continue;
                const accel::PyObj *theirs = folder.get("state")->get_int_key(id->i);
                ASSERT_NE(theirs, nullptr) << "state " << id->i;
                EXPECT_TRUE(at::equal(theirs->get(key->s)->tensor, value->tensor)) << "state " << id->i << " " << key->s;
                ++compared;
            }
    EXPECT_GT(compared, 0);
}

// `replicas` 2: the dp processes are 2 replicas of one shard each (HSDP, dp_replicate 2): the first writes.
void check_pipeline_folder(int zero_stage, bool tied, int32_t replicas = 1)
{
    SCOPED_TRACE("ZeRO-" + std::to_string(zero_stage) + (tied ? ", tied" : ", untied") + ", " + std::to_string(replicas) + " replicas");
    const std::string json = accel_test::llama_json(2, tied);
    const auto sharding =
        accel::config::parse_accelerator_config(("{\"deepspeed_plugin\": {\"zero_stage\": " + std::to_string(zero_stage) + "}}").c_str()).sharding;
    at::manual_seed(42);
    const at::Tensor ids = at::randint(0, 37, {kSteps, 4, 8}, at::kLong), labels = at::randint(0, 37, {kSteps, 4, 8}, at::kLong);
    const std::string dir = fresh_dir("zero" + std::to_string(zero_stage) + (tied ? "_tied" : "")), tag = accel::join(dir, "pytorch_model");
    accel::make_dirs(tag);
    const int32_t world = kStages * kDp;
    std::vector<Named> saved(world), uninterrupted(world), resumed(world);
    std::vector<accel::PyRef> states(world);
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const auto r = static_cast<size_t>(comm->rank());
        dist::DeviceMesh mesh(dist::mesh_shape(replicas, kDp / replicas, 1, 1, kStages), comm);
        Rank run = prepared(json, mesh, sharding, kStages);
        train(run, mesh, ids, labels, 0, kSaved);
        save(run, mesh, tag);
        saved[r] = held_weights(run);
        states[r] = copied(run.opt->state_dict()); // collective over the stage's dp group
        train(run, mesh, ids, labels, kSaved, kSteps);
        uninterrupted[r] = held_weights(run);
        comm->barrier(); // every rank's files written
        Rank back = prepared(json, mesh, sharding, kStages);
        load(back, tag);
        EXPECT_EQ(held_weights(back).size(), saved[r].size());
        expect_close(held_weights(back), saved[r], 0.0, "loaded onto the same mesh");
        train(back, mesh, ids, labels, kSaved, kSteps);
        resumed[r] = held_weights(back);
        expect_close(resumed[r], uninterrupted[r], 1e-6, "resumed on the same mesh");
    });
    // The folder is one process's model: every stage's trained weights and optimizer state, as it held them.
    const accel::ckpt::DsWhole whole = accel::ckpt::read_deepspeed_whole(tag);
    Named folder(whole.model.begin(), whole.model.end());
    for (const auto &held : saved) expect_close(held, folder, 0.0, "the folder's");
    expect_state_equal(*whole.optimizer, states);
    // And one process's after the same steps on the whole batch (the moments' scale too, which the resumes below,
    // AdamW being scale-free, would not see).
    {
        Rank ref;
        ref.model = fresh_model(json);
        ref.opt = adamw(ref.model);
        const accel::Loss causal(accel::LossKind::CausalLm);
        for (int s = 0; s < kSaved; ++s) {
            accel::compute_loss(causal, ref.model->forward(ids[s]), labels[s]).backward();
            ref.opt->step();
            ref.opt->zero_grad();
        }
        const accel::PyRef want = ref.opt->state_dict();
        for (const auto &[id, entry] : want->get("state")->map)
            for (const auto &[key, value] : entry->map) {
                if (value->kind != accel::PyObj::Kind::Tensor || value->tensor.dim() == 0) continue;
                const at::Tensor &got = whole.optimizer->get("state")->get_int_key(id->i)->get(key->s)->tensor;
                EXPECT_LE((got - value->tensor).abs().max().item<double>(), 1e-5 * value->tensor.abs().max().item<double>())
                    << "state " << id->i << " " << key->s << " against one process's";
            }
    }
    // Onto one process without a pipeline (the whole batch), as load_state reads it there.
    {
        Rank one;
        one.model = fresh_model(json);
        one.opt = adamw(one.model);
        const accel::ckpt::DsFolder ds = accel::ckpt::read_deepspeed_folder(tag);
        EXPECT_TRUE(one.model->load_state_dict(accel::ckpt::read_source_tensors(ds.model), true, copy_into).empty());
        one.opt->load_sharded_state_dict(*ds.optimizer_rest, ds.optimizer, tag, copy_into)();
        const accel::Loss causal(accel::LossKind::CausalLm);
        for (int s = kSaved; s < kSteps; ++s) {
            accel::compute_loss(causal, one.model->forward(ids[s]), labels[s]).backward();
            one.opt->step();
            one.opt->zero_grad();
        }
        Named after;
        for (const auto &[name, t] : one.model->named_parameters()) after.emplace(name, t.detach());
        for (const auto &held : uninterrupted) expect_close(held, after, 1e-5, "resumed by one process (against the pipeline's run)");
    }
}

TEST(PipelineDeepSpeedCheckpoint, Zero1SavesOneProcessFolderAndResumes)
{
    check_pipeline_folder(1, true);
    check_pipeline_folder(1, true, 2); // HSDP: 2 replicas of each stage's single shard
}

TEST(PipelineDeepSpeedCheckpoint, Zero3SavesOneProcessFolderAndResumes)
{
    check_pipeline_folder(3, true);
    check_pipeline_folder(3, false);
}

// A ZeRO-2 folder of dp 2 without a pipeline loads onto pp 2 x dp 2: each stage takes its parameters' partitions
// and their optimizer state, and trains on as the run that saved it does.
TEST(PipelineDeepSpeedCheckpoint, FolderWithoutPipelineLoadsOntoStages)
{
    const std::string json = accel_test::llama_json(2, true);
    const auto sharding = accel::config::parse_accelerator_config(R"({"deepspeed_plugin": {"zero_stage": 2}})").sharding;
    at::manual_seed(42);
    const at::Tensor ids = at::randint(0, 37, {kSteps, 4, 8}, at::kLong), labels = at::randint(0, 37, {kSteps, 4, 8}, at::kLong);
    const std::string tag = accel::join(fresh_dir("no_pipeline"), "pytorch_model");
    accel::make_dirs(tag);
    Named want;
    dist::run_on_threads(kDp, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, kDp, 1, 1), comm);
        Rank run = prepared(json, mesh, sharding, 1);
        train(run, mesh, ids, labels, 0, kSaved);
        save(run, mesh, tag);
        train(run, mesh, ids, labels, kSaved, kSteps);
        const Named w = held_weights(run);
        if (comm->rank() == 0) want = w;
    });
    dist::run_on_threads(kStages * kDp, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, kDp, 1, 1, kStages), comm);
        Rank back = prepared(json, mesh, sharding, kStages);
        load(back, tag);
        train(back, mesh, ids, labels, kSaved, kSteps);
        expect_close(held_weights(back), want, 1e-5, "a folder without a pipeline resumed on pp 2 x dp 2");
    });
}

// What the layout does not hold under pp is refused by name on every rank, before anything is written: pp x tp
// (the stages' partitions are joined without tp slices) and frozen parameters sharded by ZeRO-3 (LoRA's base).
void expect_refused(const std::string &json, int32_t zero_stage, int32_t tp, const std::string &named)
{
    SCOPED_TRACE(named);
    const auto sharding =
        accel::config::parse_accelerator_config(("{\"deepspeed_plugin\": {\"zero_stage\": " + std::to_string(zero_stage) + "}}").c_str()).sharding;
    dist::run_on_threads(kStages * 2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 2 / tp, 1, tp, kStages), comm);
        Rank run = prepared(json, mesh, sharding, kStages);
        accel::DeepSpeedSave how;
        how.dp = mesh.group(dist::MeshDim::DpShardCp).get();
        how.pipeline = run.pipeline.get();
        how.main = how.dp->rank() == 0;
        const accel::Error e = catch_error([&] { accel::deepspeed_rank_files(*run.model, *run.engine, *run.opt, how); });
        EXPECT_EQ(e.code(), ACCEL_ERR_UNIMPLEMENTED) << e.what();
        EXPECT_NE(std::string(e.what()).find("pp_size > 1 under deepspeed_plugin with " + named), std::string::npos) << e.what();
    });
}

TEST(PipelineDeepSpeedCheckpoint, WhatTheLayoutCannotHoldRefusedByName)
{
    expect_refused(accel_test::llama_json(2, true), 1, 2, "tp_size > 1");
    expect_refused(accel_test::llama_json(2, true, R"(, "lora": {"r": 2, "target_modules": ["q_proj"]})"), 3, 1,
                   "frozen parameters sharded by ZeRO-3");
}

} // namespace
