// Generation under tensor parallelism, for the models with a tp plan (tensor_parallel_test.cpp's GPT,
// tensor_parallel_llama_test.cpp's llama).
#pragma once

#include "config/generation_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/generation.hpp"
#include "model/model.hpp"
#include "parallel/tensor_parallel/split_model.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

// Greedy decoding with and without the key/value cache (which holds each rank's heads) and seeded top-k
// sampling: every rank of tp 2, holding models[rank] split by its plan, generates the tokens of one process's
// whole model (models[2]; all three built alike).
inline void expect_tp_generation_equals_one_process(const std::vector<std::shared_ptr<accel::Model>> &models,
                                                    int64_t new_tokens)
{
    const at::Tensor prompt = at::tensor(std::vector<int64_t>{3, 14, 15, 9, 2, 6, 5, 35}, at::kLong).view({2, 4});
    std::vector<accel::config::GenerationConfig> configs(3);
    for (auto &c : configs) c.max_new_tokens = new_tokens;
    configs[1].use_cache = false;
    configs[2].do_sample = true;
    configs[2].top_k = 5;
    configs[2].seed = 7;
    std::vector<at::Tensor> expected;
    for (const auto &c : configs) expected.push_back(accel::generate(*models.at(2), prompt, c, false));
    accel::distributed::run_on_threads(2, [&](const std::shared_ptr<accel::distributed::Communicator> &comm) {
        accel::Model &m = *models[static_cast<size_t>(comm->rank())];
        dynamic_cast<accel::parallel::tp::TensorParallelModel &>(m).apply_tensor_parallel(comm);
        for (size_t i = 0; i < configs.size(); ++i)
            EXPECT_TRUE(at::equal(accel::generate(m, prompt, configs[i], false), expected[i]))
                << "config " << i << " on rank " << comm->rank();
    });
}
