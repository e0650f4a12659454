#include "parallel/pipeline/stage_sharded_checkpoint.hpp"

#include "checkpointing/checkpointing.hpp"
#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "ops/object_collectives.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/pipeline/stage_checkpoint.hpp"

#include <map>
#include <sstream>

namespace accel::parallel::pp {

namespace {

// How `tp` splits tensor `name` ("dim,groups,size,whole size along dim"), or empty when it is not split.
std::string split_text(const ckpt::TpSave *tp, const std::string &name)
{
    if (tp == nullptr || tp->split.count(name) == 0) return "";
    const auto &[how, whole] = tp->split.at(name);
    return std::to_string(how.dim) + "," + std::to_string(how.groups) + "," + std::to_string(how.size) + "," + std::to_string(whole);
}

// A stage's tensors without their values, as text (one line each: name, dtype, shape, pieces, and under tp its split:
// dim, groups, size, the whole size along dim); names hold no tab.
std::string metadata_text(const ShardedState &st, const ckpt::TpSave *tp)
{
    std::ostringstream out;
    out << st.world_size << "\n";
    for (const auto &t : st.tensors) {
        out << t.name << '\t' << static_cast<int>(t.dtype) << '\t';
        for (const int64_t d : t.shape) out << d << ',';
        out << '\t';
        for (const auto &p : t.pieces) out << p.rank << ',' << p.offset << ',' << p.numel << ';';
        out << '\t' << split_text(tp, t.name) << '\n';
    }
    return out.str();
}

std::vector<int64_t> numbers(const std::string &text, char sep)
{
    std::vector<int64_t> out;
    std::istringstream in(text);
    std::string item;
    while (std::getline(in, item, sep))
        if (!item.empty()) out.push_back(std::stoll(item));
    return out;
}

// metadata_text read back (no local pieces); world_size from its first line; the tp splits into `splits`.
ShardedState parsed_metadata(const std::string &text, std::map<std::string, std::pair<ckpt::TpSplit, uint64_t>> &splits)
{
    ShardedState st;
    std::istringstream in(text);
    std::string line;
    std::getline(in, line);
    st.world_size = static_cast<int32_t>(std::stol(line));
    while (std::getline(in, line)) {
        std::vector<std::string> f;
        std::istringstream fields(line);
        for (std::string s; std::getline(fields, s, '\t');) f.push_back(s);
        f.resize(5);
        ShardedTensor t;
        t.name = f[0];
        t.dtype = static_cast<at::ScalarType>(std::stoi(f[1]));
        t.shape = numbers(f[2], ',');
        std::istringstream pieces(f[3]);
        for (std::string p; std::getline(pieces, p, ';');) {
            const std::vector<int64_t> v = numbers(p, ',');
            if (v.size() == 3) t.pieces.push_back({static_cast<int32_t>(v[0]), v[1], v[2]});
        }
        if (const std::vector<int64_t> v = numbers(f[4], ','); v.size() == 4)
            splits[t.name] = {ckpt::TpSplit{v[0], static_cast<uint64_t>(v[1]), static_cast<uint64_t>(v[2])},
                              static_cast<uint64_t>(v[3])};
        st.tensors.push_back(std::move(t));
    }
    return st;
}

int64_t elements(const ShardedTensor &t)
{
    int64_t n = 1;
    for (const int64_t d : t.shape) n *= d;
    return n;
}

} // namespace

ShardedState whole_model_pieces(PipelineParallel &pipeline, const ShardedState &mine, bool main, ckpt::TpSave *tp)
{
    distributed::Communicator &pp = *pipeline.pp_group();
    const std::string text = metadata_text(mine, tp);
    std::vector<ShardedState> stages;
    std::vector<std::map<std::string, std::pair<ckpt::TpSplit, uint64_t>>> splits(static_cast<size_t>(pp.size()));
    for (const auto &t : ops::gather_object(pp, {text, ""}, "save_state"))
        stages.push_back(parsed_metadata(t, splits[stages.size()]));
    const int32_t shard_world = mine.world_size, stage = pp.rank();
    for (const auto &s : stages)
        if (s.world_size != shard_world)
            fail(ACCEL_ERR_INTERNAL, "save_state: the stages' sharded state dicts are over " + std::to_string(s.world_size) +
                                         " and " + std::to_string(shard_world) + " ranks");
    // Each name's owner: the first stage holding elements of it, else the first listing it (and whether it holds any).
    std::map<std::string, std::pair<int32_t, bool>> owner;
    for (int32_t s = 0; s < pp.size(); ++s)
        for (const auto &t : stages[static_cast<size_t>(s)].tensors) {
            const bool holds = elements(t) > 0;
            auto [it, fresh] = owner.emplace(t.name, std::make_pair(s, holds));
            if (!fresh && holds && !it->second.second) it->second = {s, true};
        }
    ShardedState out;
    out.world_size = pp.size() * shard_world;
    out.rank = stage * shard_world + mine.rank;
    if (mine.rest) out.rest = joined_stage_optimizer_state(pipeline, mine.rest, main);
    for (int32_t s = 0; s < pp.size(); ++s) {
        if (stage != 0 && s != stage) continue; // the first stage's list is the one metadata.json is written from
        const ShardedState &from = s == stage ? mine : stages[static_cast<size_t>(s)];
        for (const auto &t : from.tensors) {
            if (owner.at(t.name).first != s) continue;
            ShardedTensor e = t;
            for (auto &p : e.pieces) p.rank += s * shard_world;
            if (s != stage) e.local = at::Tensor();
            if (auto it = splits[static_cast<size_t>(s)].find(t.name); tp != nullptr && s != stage && it != splits[static_cast<size_t>(s)].end())
                tp->split[t.name] = it->second;
            out.tensors.push_back(std::move(e));
        }
    }
    return out;
}

} // namespace accel::parallel::pp
